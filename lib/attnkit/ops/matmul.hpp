// The library's one matrix-multiply entry (DESIGN.md §9): every kernel's GEMM goes through here,
// so the implementation behind it is chosen in one place: attnkit's own BLIS-style kernel
// (ops/gemm_kernel.inc) in its AVX-512 or AVX2+FMA build, picked at run time from the processor,
// Eigen's blocked GEMM on processors without AVX2 (ops/gemm_kernels.hpp names them; the
// measurements behind the choice: docs/benchmarks.md, "GEMM").
//
//   C [M, N] = alpha * op(A) [M, K] * op(B) [K, N] + beta * C
//   op(X) = X or X^T (Trans::Yes); all matrices row-major with leading dimensions (row strides)
//   lda, ldb, ldc, like cblas_sgemm(CblasRowMajor, ...). beta == 0 ignores C's old contents
//   (even NaN). The transposed forms serve backward: dX = dY W (No, No), dW += dY^T X (Yes, No).
//
// Threads: the library's thread policy (tensor/threads.hpp, num_threads()); a call made inside an
// OpenMP parallel region, or with GemmThreads::This, runs on the calling thread only.
#pragma once
#include <cstdint>

namespace attnkit::ops {

enum class Trans { No, Yes };
enum class GemmThreads { Policy, This };

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, GemmThreads threads = GemmThreads::Policy);

// Reference: plain loops in double precision (tests compare gemm to it).
void gemm_naive(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace attnkit::ops
