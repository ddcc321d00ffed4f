// Internal (include from .cpp files only): the kernels behind ops::gemm (matmul.hpp), for benchmarks and
// tests that time or check one of them; library code calls ops::gemm, which picks the fastest the processor runs.
#pragma once
#include <cstdint>

#include "attnkit/ops/gemm_panels.hpp"
#include "attnkit/ops/matmul.hpp"

namespace attnkit::ops {

enum class GemmKernel { Auto, Eigen, Avx2, Avx512 };

// Whether this processor (and this build) can run the kernel; Auto and Eigen always can.
bool gemm_kernel_available(GemmKernel kernel);
// The kernel Auto stands for on this processor.
GemmKernel gemm_kernel_auto();
const char* gemm_kernel_name(GemmKernel kernel);

// ops::gemm with a chosen kernel (same semantics: transposes, strides, alpha, beta, threads).
// Throws if the kernel is not available.
void gemm_with(GemmKernel kernel, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
               GemmThreads threads = GemmThreads::Policy, const GemmEpilogue& epilogue = {});

namespace detail {
// One thread's product by attnkit's own kernels (gemm_avx2.cpp, gemm_avx512.cpp): C = act(alpha op(A) op(B)
// + beta C + bias) + add for K >= 1 (ops::GemmEpilogue's fields: bias, add, ldadd, relu; nullptr / false
// for none). false when its packing buffers could not be allocated (nothing written).
// The same entries in both builds' namespaces.
#define ATTNKIT_GEMM_KERNEL_ENTRIES \
  bool gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, \
    const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias, const float* add, \
    int64_t ldadd, bool relu); \
  int64_t packed_size(int64_t K, int64_t N); \
  void pack_b_all(bool tb, const float* B, int64_t ldb, int64_t K, int64_t N, float* dst); \
  float packed_at(const float* packed, int64_t K, int64_t N, int64_t k, int64_t j); \
  bool gemm_packed(bool ta, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, \
    const float* packed, int64_t j0, int64_t j1, float beta, float* C, int64_t ldc, const float* bias, \
    const float* add, int64_t ldadd, bool relu); \
  int64_t rows_block(); \
  int64_t packed_rows_size(int64_t K, int64_t N); \
  void pack_b_rows(bool tb, const float* B, int64_t ldb, int64_t K, int64_t N, float* dst); \
  void gemm_rows(bool ta, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, \
    const float* packed, int64_t j0, int64_t j1, float beta, float* C, int64_t ldc); \
  void pack_a_panels(bool ta, const float* A, int64_t lda, int64_t M, int64_t K, float* dst, bool balanced); \
  void pack_b_panels(bool tb, const float* B, int64_t ldb, int64_t K, int64_t N, float* dst); \
  void gemm_in_place(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B, \
    int64_t ldb, float beta, float* C, int64_t ldc); \
  void panel_shape(int64_t* mr, int64_t* nr, int64_t* kc, int64_t* nc); \
  void gemm_panels(int64_t M, int64_t N, int64_t K, float alpha, const float* pa, const float* pb, float beta, float* C, \
    int64_t ldc, bool balanced); \
  void gemm_panels_a_in_place(bool ta, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, \
    const float* pb, float beta, float* C, int64_t ldc);
namespace avx2 {
ATTNKIT_GEMM_KERNEL_ENTRIES
}
namespace avx512 {
ATTNKIT_GEMM_KERNEL_ENTRIES
// Products with bfloat16 multiplications (ops::MatmulPrecision::BFloat16; gemm_kernel.inc, "pair panels"): only
// on processors with AVX512_BF16 (ops::matmul_precision_available). gemm's and gemm_packed's semantics for any M;
// the pre-packed op(B) as pair panels (pack_pairs_all converts pack_b_all's panels; packed_pairs_size words);
// gemm_panels_bf16: A's float32 panels (pack_a_panels, K <= the K block) times one block of pair panels.
#define ATTNKIT_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
ATTNKIT_BF16 bool gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                            int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                            const float* bias, const float* add, int64_t ldadd, bool relu);
int64_t packed_pairs_size(int64_t K, int64_t N);
ATTNKIT_BF16 void pack_pairs_all(const float* packed, int64_t K, int64_t N, uint32_t* dst);
ATTNKIT_BF16 bool gemm_packed_bf16(bool ta, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                   int64_t lda, const uint32_t* pairs, int64_t j0, int64_t j1, float beta, float* C,
                                   int64_t ldc, const float* bias, const float* add, int64_t ldadd, bool relu);
ATTNKIT_BF16 void gemm_panels_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* pa, const uint32_t* pb,
                                   float beta, float* C, int64_t ldc, bool balanced);
#undef ATTNKIT_BF16
}
#undef ATTNKIT_GEMM_KERNEL_ENTRIES
}  // namespace detail

}  // namespace attnkit::ops
