// gemm: Eigen's blocked GEMM behind the one entry. The single-thread path calls Eigen's
// general_matrix_matrix_product directly (no global Eigen setting read or touched); the threaded
// path lets Eigen split the product over num_threads() threads.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive
#include "attnkit/ops/matmul.hpp"

#include <omp.h>

#include <Eigen/Core>
#include <vector>

#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {
namespace {

using Stride = Eigen::OuterStride<>;
using MatRM = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const MatRM, Eigen::Unaligned, Stride>;
using Map = Eigen::Map<MatRM, Eigen::Unaligned, Stride>;

// C [M, N] (row-major, ldc) += alpha * op(A) op(B) on this thread. op(A) of a row-major A is a
// column-major view of the same memory when transposed.
template <int LhsOrder, int RhsOrder>
void serial_product(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float* C, int64_t ldc) {
  using namespace Eigen::internal;
  gemm_blocking_space<Eigen::RowMajor, float, float, Eigen::Dynamic, Eigen::Dynamic, Eigen::Dynamic> blocking(
      M, N, K, 1, true);
  general_matrix_matrix_product<Eigen::Index, float, LhsOrder, false, float, RhsOrder, false, Eigen::RowMajor,
                                1>::run(M, N, K, A, lda, B, ldb, C, 1, ldc, alpha, blocking, nullptr);
}

}  // namespace

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, GemmThreads threads) {
  AK_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M {} N {} K {}", M, N, K);
  if (M == 0 || N == 0) return;
  Map c(C, M, N, Stride(ldc));
  if (beta == 0.0f) c.setZero();
  else if (beta != 1.0f) c *= beta;
  if (K == 0 || alpha == 0.0f) return;
  const bool serial = threads == GemmThreads::This || omp_in_parallel() || num_threads() <= 1 ||
                      M * N * K < (int64_t(1) << 21);  // forking costs more than it saves below ~2 MFLOP
  if (serial) {
    const bool a = ta == Trans::Yes, b = tb == Trans::Yes;
    if (!a && !b) serial_product<Eigen::RowMajor, Eigen::RowMajor>(M, N, K, alpha, A, lda, B, ldb, C, ldc);
    else if (!a && b) serial_product<Eigen::RowMajor, Eigen::ColMajor>(M, N, K, alpha, A, lda, B, ldb, C, ldc);
    else if (a && !b) serial_product<Eigen::ColMajor, Eigen::RowMajor>(M, N, K, alpha, A, lda, B, ldb, C, ldc);
    else serial_product<Eigen::ColMajor, Eigen::ColMajor>(M, N, K, alpha, A, lda, B, ldb, C, ldc);
    return;
  }
  // Eigen's parallel GEMM over Eigen::nbThreads() (= num_threads(), set by set_num_threads).
  const int64_t ar = ta == Trans::No ? M : K, ac = ta == Trans::No ? K : M;
  const int64_t br = tb == Trans::No ? K : N, bc = tb == Trans::No ? N : K;
  ConstMap a(A, ar, ac, Stride(lda)), b(B, br, bc, Stride(ldb));
  if (ta == Trans::No && tb == Trans::No) c.noalias() += alpha * a * b;
  else if (ta == Trans::No) c.noalias() += alpha * a * b.transpose();
  else if (tb == Trans::No) c.noalias() += alpha * a.transpose() * b;
  else c.noalias() += alpha * a.transpose() * b.transpose();
}

void gemm_naive(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta == Trans::No ? A[i * lda + k] : A[k * lda + i];
        const double b = tb == Trans::No ? B[k * ldb + j] : B[j * ldb + k];
        acc += a * b;
      }
      float& c = C[i * ldc + j];
      c = static_cast<float>(alpha * acc + (beta == 0.0f ? 0.0 : double(beta) * c));
    }
}

}  // namespace attnkit::ops
