// Products with bfloat16 multiplications (ops::MatmulPrecision::BFloat16, the AVX512_BF16 pair panels of
// ops/gemm_kernel.inc): every path that takes them (ops::gemm from 5 rows, gemm_packed on a B packed under the
// precision, the recurrent layers' gemm_panels_pairs) against a double reference on operands rounded to bfloat16
// (round to nearest even), within float32 rounding of the sums, and away from the float32 product (so the
// rounding did happen). On a processor without AVX512_BF16 the precision is refused.
// Legend: M rows, K depth, N columns of C.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "attnkit/ops/gemm_kernels.hpp"
#include "attnkit/ops/quantized.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;
using ops::MatmulPrecision;
using ops::Trans;

namespace {

// The precision for one test case, float32 again after it.
struct Precision {
  explicit Precision(MatmulPrecision p) { ops::set_matmul_precision(p); }
  ~Precision() { ops::set_matmul_precision(MatmulPrecision::Float32); }
};

// to 8 bits of mantissa, nearest, ties to even (ops::to_bf16, the library's inference weights' rounding)
float to_bf16(float x) { return ops::from_bf16(ops::to_bf16(x)); }

Tensor rounded(const Tensor& t) {
  Tensor r = t;
  for (int64_t i = 0; i < r.numel(); ++i) r[i] = to_bf16(r[i]);
  return r;
}

// The worst |C - R| / (sum_k |a| |b| + |beta C0| + tiny) over C's N columns (the padding must be untouched).
struct Deviation {
  double worst = 0;
  std::string where;
  bool padding_written = false;
};
Deviation deviation(const Tensor& C, const Tensor& R, const Tensor& scale, int64_t M, int64_t N, int64_t ldc) {
  Deviation d;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const int64_t e = i * ldc + j;
      if (j >= N) {
        if (!(C[e] == R[e] || (std::isnan(C[e]) && std::isnan(R[e])))) d.padding_written = true;
        continue;
      }
      const double dev = std::fabs(double(C[e]) - R[e]) / (double(scale[e]) + 1e-30);
      if (!(dev <= d.worst)) d.worst = dev, d.where = "(" + std::to_string(i) + ", " + std::to_string(j) + ")";
    }
  return d;
}

struct Case {
  Trans ta, tb;
  int64_t M, N, K;
  float beta;
};

// C by `run` against the double reference on bf16-rounded operands (within float32 sums: 8 (K + 1) eps) and on
// the operands as they are (further than a float32 product would be: the rounding happened).
template <class Run>
void check_against_reference(const Case& c, Rng& rng, Run run, bool expect_bf16 = true) {
  const auto [ta, tb, M, N, K, beta] = c;
  const int64_t lda = (ta == Trans::No ? K : M) + 3, ldb = (tb == Trans::No ? N : K) + 1, ldc = N + 2;
  const Tensor A = rand_normal({ta == Trans::No ? M : K, lda}, rng), B = rand_normal({tb == Trans::No ? K : N, ldb}, rng);
  Tensor C = rand_normal({M, ldc}, rng);
  if (beta == 0.0f)
    for (int64_t i = 0; i < C.numel(); ++i) C[i] = NAN;
  const Tensor C0 = C;
  Tensor R16 = C, R32 = C, S = C;
  for (int64_t i = 0; i < S.numel(); ++i) S[i] = std::fabs(S[i]);
  Tensor Aa = A, Ba = B;
  for (int64_t i = 0; i < Aa.numel(); ++i) Aa[i] = std::fabs(Aa[i]);
  for (int64_t i = 0; i < Ba.numel(); ++i) Ba[i] = std::fabs(Ba[i]);
  const Tensor A16 = rounded(A), B16 = rounded(B);
  run(A, lda, B, ldb, C, ldc);
  ops::gemm_naive(ta, tb, M, N, K, 0.5f, A16.data(), lda, B16.data(), ldb, beta, R16.data(), ldc);
  ops::gemm_naive(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, R32.data(), ldc);
  ops::gemm_naive(ta, tb, M, N, K, 0.5f, Aa.data(), lda, Ba.data(), ldb, std::fabs(beta), S.data(), ldc);
  const std::string label = "ta " + std::to_string(ta == Trans::Yes) + " tb " + std::to_string(tb == Trans::Yes) +
                            " M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K) +
                            " beta " + std::to_string(beta);
  const Deviation d16 = deviation(C, R16, S, M, N, ldc), d32 = deviation(C, R32, S, M, N, ldc);
  CHECK_MESSAGE(!d16.padding_written, label, ": the padding past N was written");
  const double sums = 8.0 * (K + 1) * 1.2e-7;
  // the float32 product of the same operands: most elements differ from a bf16 one
  Tensor F = C0;
  {
    const MatmulPrecision was = ops::matmul_precision();
    ops::set_matmul_precision(MatmulPrecision::Float32);
    ops::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, F.data(), ldc);
    ops::set_matmul_precision(was);
  }
  int64_t same = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) same += C[i * ldc + j] == F[i * ldc + j];
  if (expect_bf16) {
    CHECK_MESSAGE(d16.worst <= sums, label, ": ", d16.worst, " from the rounded operands' product at ", d16.where);
    if (K >= 2) CHECK_MESSAGE(same < M * N / 2 + 1, label, ": ", same, " of ", M * N, " elements as float32's");
  } else {
    CHECK_MESSAGE(d32.worst <= sums, label, ": ", d32.worst, " from the float32 product at ", d32.where);
    CHECK_MESSAGE(same == M * N, label, ": ", M * N - same, " elements not float32's");
  }
}

const Case kCases[] = {
    {Trans::No, Trans::No, 5, 7, 3, 0.0f},       {Trans::No, Trans::Yes, 13, 33, 5, -1.5f},
    {Trans::Yes, Trans::No, 64, 1024, 256, 0.0f}, {Trans::Yes, Trans::Yes, 241, 35, 385, -1.5f},
    {Trans::No, Trans::No, 12, 70, 1025, -1.5f},  {Trans::No, Trans::Yes, 300, 3100, 17, 0.0f},
    {Trans::Yes, Trans::No, 7, 64, 1, 0.0f},      {Trans::No, Trans::No, 37, 96, 512, 0.0f},
};

}  // namespace

TEST_CASE("bf16 products: refused without AVX512_BF16, else the precision is set and named") {
  CHECK(ops::matmul_precision() == MatmulPrecision::Float32);
  CHECK(std::string(ops::matmul_precision_name(MatmulPrecision::BFloat16)) == "bf16");
  CHECK(ops::matmul_precision_available(MatmulPrecision::Float32));
  if (!ops::matmul_precision_available(MatmulPrecision::BFloat16)) {
    MESSAGE("no AVX512_BF16 here: only the refusal is checked");
    CHECK_THROWS_AS(ops::set_matmul_precision(MatmulPrecision::BFloat16), Error);
    CHECK(ops::matmul_precision() == MatmulPrecision::Float32);
    return;
  }
  {
    Precision p(MatmulPrecision::BFloat16);
    CHECK(ops::matmul_precision() == MatmulPrecision::BFloat16);
  }
  CHECK(ops::matmul_precision() == MatmulPrecision::Float32);
}

TEST_CASE("bf16 products: ops::gemm rounds both operands from 5 rows (every form, K, M and N block), not below") {
  if (!ops::matmul_precision_available(MatmulPrecision::BFloat16)) return;
  Precision p(MatmulPrecision::BFloat16);
  Rng rng(31);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (Case c : kCases)
      check_against_reference(c, rng, [&](const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, Tensor& C,
                                          int64_t ldc) {
        ops::gemm(c.ta, c.tb, c.M, c.N, c.K, 0.5f, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
      });
    // 4 rows or fewer: the float32 paths (dot products, rows streamed), as gemm_packed_matches says
    for (int64_t M : {1, 2, 4})
      for (Trans tb : {Trans::No, Trans::Yes}) {
        const Case c{Trans::No, tb, M, 300, 200, 0.0f};
        check_against_reference(c, rng, [&](const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, Tensor& C,
                                            int64_t ldc) {
          ops::gemm(c.ta, c.tb, c.M, c.N, c.K, 0.5f, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
        }, false);
      }
  }
  set_num_threads(1);
}

TEST_CASE("bf16 products: the epilogue (bias, relu, add) applies to the bf16 sums as to float32's") {
  if (!ops::matmul_precision_available(MatmulPrecision::BFloat16)) return;
  Precision p(MatmulPrecision::BFloat16);
  Rng rng(32);
  const int64_t M = 29, N = 77, K = 90;
  const Tensor A = rand_normal({M, K}, rng), B = rand_normal({K, N}, rng), bias = rand_normal({N}, rng);
  const Tensor add = rand_normal({M, N + 3}, rng);
  Tensor plain({M, N}), fused({M, N});
  ops::gemm(Trans::No, Trans::No, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, plain.data(), N);
  ops::GemmEpilogue e;
  e.bias = bias.data(), e.relu = true, e.add = add.data(), e.ldadd = N + 3;
  ops::gemm(Trans::No, Trans::No, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, fused.data(), N,
            ops::GemmThreads::Policy, e);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float v = plain[i * N + j] + bias[j];
      REQUIRE(fused[i * N + j] == (v > 0.0f ? v : 0.0f) + add[i * (N + 3) + j]);
    }
}

TEST_CASE("bf16 products: gemm_packed on a B packed under bf16 rounds both, and matches ops::gemm's bits") {
  if (!ops::matmul_precision_available(MatmulPrecision::BFloat16)) return;
  Rng rng(33);
  {  // packed under float32: no pair panels, float32 products even under bf16
    const Tensor B = rand_normal({40, 70}, rng);
    const ops::GemmPackedB packed(Trans::No, 40, 70, B.data(), 70);
    CHECK(packed.pairs(0) == nullptr);
  }
  Precision p(MatmulPrecision::BFloat16);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (Case c : kCases)
      check_against_reference(c, rng, [&](const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, Tensor& C,
                                          int64_t ldc) {
        const ops::GemmPackedB packed(c.tb, c.K, c.N, B.data(), ldb);
        ops::gemm_packed(c.ta, c.M, 0.5f, A.data(), lda, packed, c.beta, C.data(), ldc);
      });
  }
  set_num_threads(1);
  for (int64_t M : {5, 64, 241}) {  // the same bits as ops::gemm from 5 rows (gemm_packed_matches)
    const int64_t N = 1030, K = 600;
    const Tensor A = rand_normal({M, K}, rng), B = rand_normal({N, K}, rng);
    const ops::GemmPackedB packed(Trans::Yes, K, N, B.data(), K);
    Tensor want({M, N}), got({M, N});
    ops::gemm(Trans::No, Trans::Yes, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, want.data(), N);
    ops::gemm_packed(Trans::No, M, 1.0f, A.data(), K, packed, 0.0f, got.data(), N);
    for (int64_t i = 0; i < M * N; ++i) REQUIRE_MESSAGE(got[i] == want[i], "M ", M, " at ", i);
  }
}

TEST_CASE("bf16 products: gemm_panels_pairs (a recurrent step) gives ops::gemm's bits on one K block") {
  if (!ops::matmul_precision_available(MatmulPrecision::BFloat16)) return;
  Precision p(MatmulPrecision::BFloat16);
  const ops::PanelShape shape = ops::gemm_panel_shape();
  Rng rng(34);
  for (auto [M, N, K] : {std::array<int64_t, 3>{64, 1024, 256}, {5, 40, 1}, {37, 96, 77}, {13, 64, shape.max_depth}}) {
    CAPTURE(M);
    CAPTURE(N);
    CAPTURE(K);
    const Tensor A = rand_normal({M, K}, rng), B = rand_normal({K, N}, rng);
    std::vector<float> pa(static_cast<size_t>(ops::panels_size(M, K, shape.mr)));
    ops::pack_a_panels(Trans::No, M, K, A.data(), K, pa.data(), ops::RowBlocks::Balanced);
    const ops::GemmPackedB packed(Trans::No, K, N, B.data(), N);
    const int64_t j0 = N > shape.nr ? shape.nr : 0;
    REQUIRE(packed.pairs(j0) != nullptr);
    CHECK(packed.pairs(j0 + 1) == nullptr);
    std::vector<float> want(static_cast<size_t>(M * N), 1.5f), got = want;
    ops::gemm(Trans::No, Trans::No, M, N - j0, K, 1.0f, A.data(), K, B.data() + j0, N, 0.5f, want.data(), N,
              ops::GemmThreads::This);
    ops::gemm_panels_pairs(M, N - j0, K, 1.0f, pa.data(), packed.pairs(j0), 0.5f, got.data(), N,
                           ops::RowBlocks::Balanced);
    CHECK(got == want);
  }
}
