// The kernels behind ops::gemm (ops/gemm_kernels.hpp) against the double reference gemm_naive:
// every transpose form, strides, alpha and beta (beta 0 ignores NaN in C), K = 0, sizes that leave
// partial register blocks (M not a multiple of MR, N not a multiple of NR) and cross the cache
// blocks (K past KC, M past MC, N past NC), few rows (B read in place) and many (B packed), one
// thread, the thread policy's two, and calls from inside an OpenMP region.
// Legend: M rows, K depth, N columns of C.
#include <doctest/doctest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "attnkit/ops/gemm_kernels.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;
using ops::GemmKernel;
using ops::Trans;

namespace {

std::vector<GemmKernel> kernels() {
  std::vector<GemmKernel> out;
  for (GemmKernel k : {GemmKernel::Eigen, GemmKernel::Avx2, GemmKernel::Avx512, GemmKernel::Auto})
    if (ops::gemm_kernel_available(k)) out.push_back(k);
  return out;
}

// "" when C (computed by the kernel) matches gemm_naive within float rounding of a K-term sum:
// |C - R| <= 8 K eps (|alpha| sum_k |a| |b| + |beta C0|), else a message naming the element.
std::string mismatch(GemmKernel kernel, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                     Rng& rng, bool nan_c = false) {
  const int64_t lda = (ta == Trans::No ? K : M) + 3, ldb = (tb == Trans::No ? N : K) + 1, ldc = N + 2;
  Tensor A = rand_normal({ta == Trans::No ? M : K, lda}, rng), B = rand_normal({tb == Trans::No ? K : N, ldb}, rng);
  Tensor C = rand_normal({M, ldc}, rng);
  if (nan_c)
    for (int64_t i = 0; i < C.numel(); ++i) C[i] = NAN;
  Tensor R = C, Aa = A, Ba = B, Ra = C;
  for (int64_t i = 0; i < Aa.numel(); ++i) Aa[i] = std::fabs(Aa[i]);
  for (int64_t i = 0; i < Ba.numel(); ++i) Ba[i] = std::fabs(Ba[i]);
  for (int64_t i = 0; i < Ra.numel(); ++i) Ra[i] = std::fabs(Ra[i]);
  ops::gemm_with(kernel, ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  ops::gemm_naive(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, R.data(), ldc);
  ops::gemm_naive(ta, tb, M, N, K, std::fabs(alpha), Aa.data(), lda, Ba.data(), ldb, std::fabs(beta), Ra.data(), ldc);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const int64_t e = i * ldc + j;
      if (j >= N) {  // the padding past N is never written
        if (!(C[e] == R[e] || (std::isnan(C[e]) && std::isnan(R[e]))))
          return "padding written at (" + std::to_string(i) + ", " + std::to_string(j) + ")";
        continue;
      }
      const double tol = 8.0 * (K + 1) * 1.2e-7 * Ra[e] + 1e-30;
      if (!(std::fabs(double(C[e]) - R[e]) <= tol))
        return std::string(ops::gemm_kernel_name(kernel)) + " ta " + std::to_string(ta == Trans::Yes) + " tb " +
               std::to_string(tb == Trans::Yes) + " M " + std::to_string(M) + " N " + std::to_string(N) + " K " +
               std::to_string(K) + " beta " + std::to_string(beta) + ": C(" + std::to_string(i) + ", " +
               std::to_string(j) + ") = " + std::to_string(C[e]) + ", expected " + std::to_string(R[e]);
    }
  return "";
}

}  // namespace

TEST_CASE("gemm kernels: transposes, strides, alpha/beta, edge tiles and cache blocks against the double reference") {
  Rng rng(21);
  const std::array<int64_t, 3> shapes[] = {
      {1, 1, 1},    {5, 7, 3},      {6, 16, 1},   {7, 17, 2},    {12, 32, 9},  {13, 33, 5},   {1, 300, 40},
      {24, 50, 257}, {25, 40, 300}, {49, 100, 20}, {130, 70, 300}, {241, 35, 385}, {3, 4100, 2}, {150, 9, 11},
      {2, 67, 37},  {4, 9, 1000},   {2, 64, 16},  {1, 130, 19},  {2, 200, 260},
      {61, 70, 1030}, {53, 35, 600},  // several K blocks of every kernel (AVX-512 KC 512) with op(A) packed, and read in place
      {1, 600, 450}, {3, 1030, 260}};  // the last two: few rows times a B of >= 2^18 floats, split over threads
  for (GemmKernel kernel : kernels())
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (Trans ta : {Trans::No, Trans::Yes})
        for (Trans tb : {Trans::No, Trans::Yes})
          for (auto [M, N, K] : shapes)
            for (float beta : {0.0f, 1.0f, -1.5f}) {
              const std::string m = mismatch(kernel, ta, tb, M, N, K, 0.5f, beta, rng, beta == 0.0f);
              CHECK_MESSAGE(m == "", m);
            }
    }
  set_num_threads(1);
}

TEST_CASE("gemm kernels: K = 0 scales C by beta (beta 0 clears NaN), alpha 0 skips the product, empty C") {
  Rng rng(22);
  for (GemmKernel kernel : kernels()) {
    CHECK(mismatch(kernel, Trans::No, Trans::No, 4, 5, 0, 1.0f, 0.0f, rng, true) == "");
    CHECK(mismatch(kernel, Trans::Yes, Trans::No, 4, 5, 0, 1.0f, 2.0f, rng) == "");
    CHECK(mismatch(kernel, Trans::No, Trans::Yes, 7, 3, 6, 0.0f, 0.5f, rng) == "");
    float c = 3.0f;
    ops::gemm_with(kernel, Trans::No, Trans::No, 0, 1, 4, 1.0f, nullptr, 4, nullptr, 1, 0.0f, &c, 1);
    ops::gemm_with(kernel, Trans::No, Trans::No, 1, 0, 4, 1.0f, nullptr, 4, nullptr, 1, 0.0f, &c, 1);
    CHECK(c == 3.0f);
  }
}

TEST_CASE("gemm kernels: inside an OpenMP region and with GemmThreads::This, each call runs on its own thread") {
  Rng rng(23);
  const int64_t M = 70, N = 90, K = 130;
  Tensor A = rand_normal({M, K}, rng), B = rand_normal({N, K}, rng);
  Tensor R({M, N});
  ops::gemm_naive(Trans::No, Trans::Yes, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, R.data(), N);
  set_num_threads(2);
  for (GemmKernel kernel : kernels()) {
    std::vector<Tensor> out(4, Tensor({M, N}));
    std::vector<int> in_parallel(4, 0);
#pragma omp parallel for num_threads(2)
    for (int t = 0; t < 4; ++t) {
      in_parallel[t] = omp_in_parallel();
      ops::gemm_with(kernel, Trans::No, Trans::Yes, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, out[t].data(), N,
                     t % 2 ? ops::GemmThreads::This : ops::GemmThreads::Policy);
    }
    Tensor single({M, N});
    ops::gemm_with(kernel, Trans::No, Trans::Yes, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, single.data(), N,
                   ops::GemmThreads::This);
    for (int t = 0; t < 4; ++t)
      for (int64_t i = 0; i < M * N; ++i) {
        REQUIRE(out[t][i] == single[i]);  // same kernel, same thread count (one): the same bits
        REQUIRE(std::fabs(out[t][i] - R[i]) <= 1e-3f * (1.0f + std::fabs(R[i])));
      }
  }
  set_num_threads(1);
}

TEST_CASE("gemm kernels: one that the processor cannot run is refused, Auto names the fastest it can") {
  for (GemmKernel kernel : {GemmKernel::Avx2, GemmKernel::Avx512}) {
    float a = 1, b = 1, c = 0;
    if (ops::gemm_kernel_available(kernel))
      CHECK_NOTHROW(ops::gemm_with(kernel, Trans::No, Trans::No, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1));
    else
      CHECK_THROWS(ops::gemm_with(kernel, Trans::No, Trans::No, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1));
  }
  const GemmKernel best = ops::gemm_kernel_available(GemmKernel::Avx512) ? GemmKernel::Avx512
                          : ops::gemm_kernel_available(GemmKernel::Avx2) ? GemmKernel::Avx2
                                                                          : GemmKernel::Eigen;
  CHECK(ops::gemm_kernel_auto() == best);
}

TEST_CASE("gemm_packed: a pre-packed B gives gemm's result for every form, edge and block, 1 and 2 threads") {
  Rng rng(24);
  const std::array<int64_t, 3> shapes[] = {{1, 1, 1},    {5, 7, 3},     {6, 16, 1},    {13, 33, 5}, {2, 67, 37},
                                           {64, 512, 128}, {8, 130, 300}, {241, 35, 385}, {3, 4100, 2}, {7, 0, 3},
                                           {4, 5, 0},    {1, 300, 40},  {2, 130, 300}, {1, 4100, 3}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (Trans ta : {Trans::No, Trans::Yes})
      for (Trans tb : {Trans::No, Trans::Yes})
        for (auto [M, N, K] : shapes)
          for (float beta : {0.0f, -1.5f}) {
            const int64_t lda = (ta == Trans::No ? K : M) + 3, ldb = (tb == Trans::No ? N : K) + 1, ldc = N + 2;
            Tensor A = rand_normal({ta == Trans::No ? M : K, lda}, rng);
            Tensor B = rand_normal({tb == Trans::No ? K : N, ldb}, rng), C = rand_normal({M, ldc}, rng);
            if (beta == 0.0f)
              for (int64_t i = 0; i < C.numel(); ++i) C[i] = NAN;
            Tensor R = C;
            const ops::GemmPackedB packed(tb, K, N, B.data(), ldb);
            CHECK(packed.rows() == K);
            CHECK(packed.cols() == N);
            ops::gemm_packed(ta, M, 0.5f, A.data(), lda, packed, beta, C.data(), ldc);
            ops::gemm_naive(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, R.data(), ldc);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < ldc; ++j) {
                const float c = C[i * ldc + j], r = R[i * ldc + j];
                if (j >= N) REQUIRE((c == r || (std::isnan(c) && std::isnan(r))));  // padding untouched
                else REQUIRE_MESSAGE(std::fabs(c - r) <= 1e-5f * (K + 1) * (1.0f + std::fabs(r)),
                                     "M ", M, " N ", N, " K ", K, " ta ", int(ta == Trans::Yes), " tb ",
                                     int(tb == Trans::Yes), " threads ", threads, " at (", i, ", ", j, ")");
              }
          }
  }
  // inside an OpenMP region: each call on its own thread, the same bits as a single-thread call
  const int64_t M = 9, N = 70, K = 40;
  Tensor A = rand_normal({M, K}, rng), B = rand_normal({N, K}, rng);
  const ops::GemmPackedB packed(Trans::Yes, K, N, B.data(), K);
  Tensor single({M, N});
  ops::gemm_packed(Trans::No, M, 1.0f, A.data(), K, packed, 0.0f, single.data(), N, ops::GemmThreads::This);
  std::vector<Tensor> out(4, Tensor({M, N}));
#pragma omp parallel for num_threads(2)
  for (int t = 0; t < 4; ++t) ops::gemm_packed(Trans::No, M, 1.0f, A.data(), K, packed, 0.0f, out[t].data(), N);
  for (int t = 0; t < 4; ++t)
    for (int64_t i = 0; i < M * N; ++i) REQUIRE(out[t][i] == single[i]);
  set_num_threads(1);
}

TEST_CASE("gemm_packed: B packed for rows (Layout::Rows) gives the panels' bits, every form, edge, K block, epilogue") {
  // Rows' blocks are 4 panels wide: N on either side of a block and of a panel, K past either kernel's KC
  // (K blocks), M of one row (the recurrent step) and more (row by row), C's padding untouched, the
  // threads' column slices (M N K >= 2^21), the epilogue, beta 0 ignoring NaN in C.
  Rng rng(31);
  const std::array<int64_t, 3> shapes[] = {{1, 1, 1},    {1, 31, 7},     {1, 33, 600}, {1, 128, 128}, {1, 129, 1100},
                                           {2, 300, 40}, {3, 100, 300},  {5, 64, 9},   {1, 4100, 600}, {1, 0, 3},
                                           {1, 5, 0},    {2, 2100, 513}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (Trans ta : {Trans::No, Trans::Yes})
      for (Trans tb : {Trans::No, Trans::Yes})
        for (auto [M, N, K] : shapes)
          for (int form = 0; form < 4; ++form) {  // alpha, beta; form 3 adds bias, relu and add
            const float alpha = form == 0 ? 1.0f : 0.75f, beta = form == 1 ? 0.0f : form == 2 ? -1.5f : 1.0f;
            const int64_t lda = (ta == Trans::No ? K : M) + 3, ldb = (tb == Trans::No ? N : K) + 1, ldc = N + 2;
            const Tensor A = rand_normal({ta == Trans::No ? M : K, lda}, rng);
            const Tensor B = rand_normal({tb == Trans::No ? K : N, ldb}, rng);
            const Tensor bias = rand_normal({N + 1}, rng), add = rand_normal({M, N + 4}, rng);
            Tensor C0 = rand_normal({M, ldc}, rng);
            if (beta == 0.0f)
              for (int64_t i = 0; i < C0.numel(); ++i) C0[i] = NAN;
            ops::GemmEpilogue e;
            if (form == 3) e.bias = bias.data(), e.relu = true, e.add = add.data(), e.ldadd = N + 4;
            const ops::GemmPackedB panels(tb, K, N, B.data(), ldb), rows(tb, K, N, B.data(), ldb, ops::GemmPackedB::Layout::Rows);
            CHECK(rows.layout() == ops::GemmPackedB::Layout::Rows);
            Tensor want = C0, got = C0;
            ops::gemm_packed(ta, M, alpha, A.data(), lda, panels, beta, want.data(), ldc, ops::GemmThreads::Policy, e);
            ops::gemm_packed(ta, M, alpha, A.data(), lda, rows, beta, got.data(), ldc, ops::GemmThreads::Policy, e);
            for (int64_t i = 0; i < M * ldc; ++i)
              REQUIRE_MESSAGE((got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))), "M ", M, " N ", N,
                              " K ", K, " ta ", int(ta == Trans::Yes), " tb ", int(tb == Trans::Yes), " form ", form,
                              " threads ", threads, " at ", i, ": ", got[i], " vs ", want[i]);
          }
  }
  set_num_threads(1);
}

TEST_CASE("gemm epilogue: act(alpha op(A) op(B) + beta C + bias) + add, every path, 1 and 2 threads, bit for bit") {
  // The fused epilogue must equal the product followed by the separate passes, exactly: ops::gemm in every
  // form and ops::gemm_packed, on shapes that take the one- to four-row paths, edge panels (N not a
  // multiple of the panel width), several K blocks (K past either kernel's KC), the threaded row blocks
  // and column slices.
  Rng rng(77);
  const std::array<int64_t, 3> shapes[] = {{1, 70, 9},     {2, 130, 40},  {4, 33, 50},
                                           {13, 47, 300},  {64, 300, 120}, {400, 40, 300}, {3, 300, 900}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (auto [M, N, K] : shapes)
      for (int op = 0; op < 5; ++op) {  // gemm (ta, tb) in 0..3, gemm_packed 4
        const Trans ta = op & 2 && op < 4 ? Trans::Yes : Trans::No, tb = op & 1 || op == 4 ? Trans::Yes : Trans::No;
        const int64_t ldc = N + 3, ldadd = N + 5, lda = ta == Trans::No ? K : M, ldb = tb == Trans::No ? N : K;
        const Tensor A = rand_uniform({ta == Trans::No ? M : K, lda}, rng, -1, 1);
        const Tensor B = rand_uniform({tb == Trans::No ? K : N, ldb}, rng, -1, 1);
        const Tensor bias = rand_uniform({N}, rng, -1, 1), add = rand_uniform({M, ldadd}, rng, -1, 1);
        const Tensor C0 = rand_uniform({M, ldc}, rng, -1, 1);
        const ops::GemmPackedB packed(tb, K, N, B.data(), ldb);
        for (int form = 1; form < 6; ++form) {
          const bool use_bias = form & 1, relu = form >= 2, use_add = form >= 4;
          const float beta = form == 3 ? 0.5f : 0.0f;
          auto product = [&](Tensor& C, const ops::GemmEpilogue& e) {
            if (op == 4) ops::gemm_packed(ta, M, 0.75f, A.data(), lda, packed, beta, C.data(), ldc, ops::GemmThreads::Policy, e);
            else ops::gemm(ta, tb, M, N, K, 0.75f, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, ops::GemmThreads::Policy, e);
          };
          Tensor want = C0, got = C0;
          product(want, {});
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {  // the separate passes, in the epilogue's order
              float& v = want[i * ldc + j];
              if (use_bias) v += bias[j];
              if (relu) v = v > 0.0f ? v : 0.0f;
              if (use_add) v += add[i * ldadd + j];
            }
          ops::GemmEpilogue e;
          e.bias = use_bias ? bias.data() : nullptr;
          e.relu = relu;
          if (use_add) e.add = add.data(), e.ldadd = ldadd;
          product(got, e);
          for (int64_t i = 0; i < M * ldc; ++i)
            REQUIRE_MESSAGE(got[i] == want[i], "M ", M, " N ", N, " K ", K, " form ", form, " op ", op, " threads ",
                            threads, " at ", i, ": ", got[i], " vs ", want[i]);
        }
      }
  }
  set_num_threads(1);
}

TEST_CASE("gemm_panels: blocks of operands packed once give ops::gemm's bits, every transpose, partial panels") {
  const ops::PanelShape shape = ops::gemm_panel_shape();
  if (shape.mr == 0) return;  // the Eigen path has no panels (attention packs per product there)
  Rng rng(23);
  for (Trans ta : {Trans::No, Trans::Yes})
    for (Trans tb : {Trans::No, Trans::Yes})
      for (auto [M, N, K] : {std::array<int64_t, 3>{37, 70, 64}, {5, 9, 1}, {2 * shape.mr + 1, 3 * shape.nr, shape.max_depth}}) {
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        const int64_t lda = (ta == Trans::No ? K : M) + 3, ldb = (tb == Trans::No ? N : K) + 5, ldc = N + 2;
        const Tensor A = rand_normal({ta == Trans::No ? M : K, lda}, rng), B = rand_normal({tb == Trans::No ? K : N, ldb}, rng);
        std::vector<float> pa(static_cast<size_t>(ops::panels_size(M, K, shape.mr)));
        std::vector<float> pb(static_cast<size_t>(ops::panels_size(N, K, shape.nr)));
        ops::pack_a_panels(ta, M, K, A.data(), lda, pa.data());
        ops::pack_b_panels(tb, K, N, B.data(), ldb, pb.data());
        // a block: rows from the second A panel on, columns from the second B panel on (as attention's tiles)
        const int64_t i0 = M > shape.mr ? shape.mr : 0, j0 = N > shape.nr ? shape.nr : 0;
        const int64_t m = M - i0, n = N - j0;
        std::vector<float> want(static_cast<size_t>(m * ldc), 1.5f), got = want;
        const float* a = ta == Trans::No ? A.data() + i0 * lda : A.data() + i0;
        const float* b = tb == Trans::No ? B.data() + j0 : B.data() + j0 * ldb;
        ops::gemm(ta, tb, m, n, K, 0.75f, a, lda, b, ldb, 0.5f, want.data(), ldc, ops::GemmThreads::This);
        ops::gemm_panels(m, n, K, 0.75f, pa.data() + i0 * K, pb.data() + j0 * K, 0.5f, got.data(), ldc);
        CHECK(got == want);
        // all M rows in near-equal blocks (RowBlocks::Balanced: a recurrent step's batch), B's panels
        // straight from a GemmPackedB of one block (the recurrent layer's packed weights)
        std::vector<float> pab(pa.size());
        ops::pack_a_panels(ta, M, K, A.data(), lda, pab.data(), ops::RowBlocks::Balanced);
        const ops::GemmPackedB packed(tb, K, N, B.data(), ldb);
        REQUIRE(packed.panels(j0) != nullptr);
        CHECK(packed.panels(j0 + 1) == nullptr);  // not a panel's first column
        std::vector<float> all_want(static_cast<size_t>(M * ldc), 1.5f), all_got = all_want;
        ops::gemm(ta, tb, M, n, K, 0.75f, A.data(), lda, b, ldb, 0.5f, all_want.data(), ldc, ops::GemmThreads::This);
        ops::gemm_panels(M, n, K, 0.75f, pab.data(), packed.panels(j0), 0.5f, all_got.data(), ldc,
                         ops::RowBlocks::Balanced);
        CHECK(all_got == all_want);
      }
  // deeper than one K block: no panels to hand out
  const Tensor deep = rand_normal({shape.max_depth + 1, 8}, rng);
  CHECK(ops::GemmPackedB(Trans::No, shape.max_depth + 1, 8, deep.data(), 8).panels(0) == nullptr);
}
