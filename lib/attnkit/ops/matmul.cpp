// gemm: the one entry, and the choice of the kernel behind it (docs/benchmarks.md, "GEMM"):
// attnkit's own BLIS-style kernel (gemm_kernel.inc) in its AVX-512 build when the processor has
// AVX-512F, else its AVX2 + FMA build, else Eigen's blocked GEMM (portable builds on old
// processors). The choice is made at run time, so a -DATTNKIT_NATIVE=OFF build picks the fastest.
// Eigen: the single-thread path calls Eigen's general_matrix_matrix_product directly (no global
// Eigen setting read or touched); the threaded path lets Eigen split the product over
// num_threads() threads. Own kernel: each thread takes a slice of C's columns (or rows, when C is
// taller than wide) and runs the single-thread kernel on it with its own packing buffers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // Eigen AVX-512, GCC 12 false positive
#include "attnkit/ops/gemm_panels.hpp"
#include "attnkit/ops/matmul.hpp"

#include "attnkit/ops/gemm_kernels.hpp"

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <vector>

#include "attnkit/tensor/enum_names.hpp"
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

// Eigen's product: C = alpha op(A) op(B) + beta C, C already scaled by beta by the caller.
void eigen_gemm(bool serial, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  if (serial) {
    const bool a = ta == Trans::Yes, b = tb == Trans::Yes;
    if (!a && !b) serial_product<Eigen::RowMajor, Eigen::RowMajor>(M, N, K, alpha, A, lda, B, ldb, C, ldc);
    else if (!a && b) serial_product<Eigen::RowMajor, Eigen::ColMajor>(M, N, K, alpha, A, lda, B, ldb, C, ldc);
    else if (a && !b) serial_product<Eigen::ColMajor, Eigen::RowMajor>(M, N, K, alpha, A, lda, B, ldb, C, ldc);
    else serial_product<Eigen::ColMajor, Eigen::ColMajor>(M, N, K, alpha, A, lda, B, ldb, C, ldc);
    return;
  }
  // Eigen's parallel GEMM over Eigen::nbThreads() (= num_threads(), set by set_num_threads).
  Map c(C, M, N, Stride(ldc));
  const int64_t ar = ta == Trans::No ? M : K, ac = ta == Trans::No ? K : M;
  const int64_t br = tb == Trans::No ? K : N, bc = tb == Trans::No ? N : K;
  ConstMap a(A, ar, ac, Stride(lda)), b(B, br, bc, Stride(ldb));
  if (ta == Trans::No && tb == Trans::No) c.noalias() += alpha * a * b;
  else if (ta == Trans::No) c.noalias() += alpha * a * b.transpose();
  else if (tb == Trans::No) c.noalias() += alpha * a.transpose() * b;
  else c.noalias() += alpha * a.transpose() * b.transpose();
}

// Plain loops in float, allocation-free: the own kernel's fallback when its packing buffers cannot be
// allocated inside an OpenMP region (where throwing is not allowed).
void plain_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      float& c = C[i * ldc + j];
      c = alpha * acc + (beta == 0.0f ? 0.0f : beta * c);
    }
}

// The epilogue as a separate pass, for the paths that do not fuse it (Eigen, K == 0, alpha == 0, the
// plain-loop fallbacks). The kernels' own pass (gemm_kernel.inc, epilogue_pass) is compiled for AVX2 or
// AVX-512 and cannot serve the Eigen path on a processor without them.
void apply_epilogue(int64_t M, int64_t N, float* C, int64_t ldc, const GemmEpilogue& e) {
  if (!e.bias && !e.relu && !e.add) return;
  for (int64_t i = 0; i < M; ++i) {
    float* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) {
      float v = c[j];
      if (e.bias) v += e.bias[j];
      if (e.relu) v = v > 0.0f ? v : 0.0f;
      if (e.add) v += e.add[i * e.ldadd + j];
      c[j] = v;
    }
  }
}

using KernelFn = bool (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t, const float*, const float*, int64_t, bool);

bool cpu_has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }

// The own kernel on one thread, or split over the policy's threads: thread t of nt takes columns (or
// rows) [t * chunk, (t + 1) * chunk) in multiples of 32 (a whole number of register blocks).
void own_gemm(KernelFn fn, bool serial, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
              const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
              const GemmEpilogue& e) {
  if (serial) {
    if (fn(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, e.bias, e.add, e.ldadd, e.relu)) return;
    AK_CHECK(omp_in_parallel(), "gemm: cannot allocate the packing buffers for [{}, {}] x [{}, {}]", M, K, K, N);
    plain_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    apply_epilogue(M, N, C, ldc, e);
    return;
  }
  const bool by_columns = N >= M;
  const int64_t extent = by_columns ? N : M;
  std::vector<char> failed(num_threads(), 0);
#pragma omp parallel num_threads(num_threads())
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (extent / nt + 31) / 32 * 32;
    const int64_t lo = std::min<int64_t>(extent, t * chunk), hi = t + 1 == nt ? extent : std::min(extent, lo + chunk);
    if (lo < hi) {
      bool ok;
      if (by_columns)  // C[:, lo:hi] = op(A) op(B)[:, lo:hi]
        ok = fn(ta, tb, M, hi - lo, K, alpha, A, lda, tb ? B + lo * ldb : B + lo, ldb, beta, C + lo, ldc,
                e.bias ? e.bias + lo : nullptr, e.add ? e.add + lo : nullptr, e.ldadd, e.relu);
      else  // C[lo:hi, :] = op(A)[lo:hi, :] op(B)
        ok = fn(ta, tb, hi - lo, N, K, alpha, ta ? A + lo : A + lo * lda, lda, B, ldb, beta, C + lo * ldc, ldc, e.bias,
                e.add ? e.add + lo * e.ldadd : nullptr, e.ldadd, e.relu);
      if (!ok) failed[t] = 1;
    }
  }
  for (char f : failed) AK_CHECK(!f, "gemm: cannot allocate the packing buffers for [{}, {}] x [{}, {}]", M, K, K, N);
}

bool cpu_has_avx512_bf16() {
  return cpu_has_avx512() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
}

std::atomic<MatmulPrecision> g_precision{MatmulPrecision::Float32};

// Whether a product of M rows on the kernel runs with bfloat16 multiplications.
bool bf16_products(GemmKernel kernel, int64_t M) {
  return M > 4 && kernel == GemmKernel::Avx512 &&
         g_precision.load(std::memory_order_relaxed) == MatmulPrecision::BFloat16;
}

}  // namespace

bool matmul_precision_available(MatmulPrecision precision) {
  return precision == MatmulPrecision::Float32 || (gemm_kernel_auto() == GemmKernel::Avx512 && cpu_has_avx512_bf16());
}

namespace {
constexpr EnumName<MatmulPrecision> kPrecisionNames[] = {{MatmulPrecision::Float32, "float32"},
                                                          {MatmulPrecision::BFloat16, "bf16"}};
}  // namespace

const char* matmul_precision_name(MatmulPrecision precision) { return name_of(kPrecisionNames, precision); }

MatmulPrecision parse_matmul_precision(std::string_view name) {
  if (const std::optional<MatmulPrecision> p = parse_name(kPrecisionNames, name)) return *p;
  fail("unknown matmul precision \"{}\" (expected {})", name, names_or(kPrecisionNames));
}

void set_matmul_precision(MatmulPrecision precision) {
  AK_CHECK(matmul_precision_available(precision),
           "matmul precision {}: this processor has no AVX512_BF16 (bfloat16 products need it; float32 runs anywhere)",
           matmul_precision_name(precision));
  g_precision.store(precision);
}

MatmulPrecision matmul_precision() { return g_precision.load(); }

bool gemm_kernel_available(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::Auto:
    case GemmKernel::Eigen: return true;
    case GemmKernel::Avx2: return cpu_has_avx2();
    case GemmKernel::Avx512: return cpu_has_avx512();
  }
  return false;
}

GemmKernel gemm_kernel_auto() {
  static const GemmKernel chosen = cpu_has_avx512() ? GemmKernel::Avx512
                                   : cpu_has_avx2() ? GemmKernel::Avx2
                                                    : GemmKernel::Eigen;
  return chosen;
}

namespace {

// Auto is named by the kernel it chooses.
constexpr EnumName<GemmKernel> kGemmKernelNames[] = {
    {GemmKernel::Eigen, "eigen"}, {GemmKernel::Avx2, "attnkit-avx2"}, {GemmKernel::Avx512, "attnkit-avx512"}};

}  // namespace

const char* gemm_kernel_name(GemmKernel kernel) {
  return name_of(kGemmKernelNames, kernel == GemmKernel::Auto ? gemm_kernel_auto() : kernel);
}

void gemm_with(GemmKernel kernel, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc, GemmThreads threads,
               const GemmEpilogue& e) {
  AK_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M {} N {} K {}", M, N, K);
  AK_CHECK(gemm_kernel_available(kernel), "gemm: the kernel {} does not run on this processor",
           gemm_kernel_name(kernel));
  if (kernel == GemmKernel::Auto) kernel = gemm_kernel_auto();
  if (M == 0 || N == 0) return;
  // Forking costs more than it saves below ~2 M multiply-adds, except for a few rows times a large B:
  // that product streams B from memory once (a decoder's per-token projections, 1 x 2048 x 512), so it
  // is bound by bandwidth, which two cores' streams add up, not by arithmetic.
  const bool streams_b = M <= 4 && N * K >= (int64_t(1) << 18);
  const bool serial = threads == GemmThreads::This || omp_in_parallel() || num_threads() <= 1 ||
                      (M * N * K < (int64_t(1) << 21) && !streams_b);
  if (K == 0 || alpha == 0.0f || kernel == GemmKernel::Eigen) {
    Map c(C, M, N, Stride(ldc));
    if (beta == 0.0f) c.setZero();
    else if (beta != 1.0f) c *= beta;
    if (K != 0 && alpha != 0.0f) eigen_gemm(serial, ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc);
    apply_epilogue(M, N, C, ldc, e);
    return;
  }
  const KernelFn fn = bf16_products(kernel, M)      ? &detail::avx512::gemm_bf16
                      : kernel == GemmKernel::Avx512 ? &detail::avx512::gemm
                                                     : &detail::avx2::gemm;
  own_gemm(fn, serial, ta == Trans::Yes, tb == Trans::Yes, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, e);
}

void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc, GemmThreads threads, const GemmEpilogue& e) {
  gemm_with(GemmKernel::Auto, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads, e);
}

GemmPackedB::GemmPackedB(Trans tb, int64_t K, int64_t N, const float* B, int64_t ldb, Layout layout)
    : K_(K), N_(N), layout_(layout) {
  AK_CHECK(K >= 0 && N >= 0, "gemm_pack_b: negative size K {} N {}", K, N);
  const GemmKernel kernel = gemm_kernel_auto();
  kernel_ = static_cast<int>(kernel);
  if (kernel == GemmKernel::Eigen) {  // op(B) as a row-major [K, N] copy
    data_.resize(K * N);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) data_[k * N + j] = tb == Trans::No ? B[k * ldb + j] : B[j * ldb + k];
  } else if (layout == Layout::Rows) {
    const bool avx512 = kernel == GemmKernel::Avx512;
    data_.resize((avx512 ? &detail::avx512::packed_rows_size : &detail::avx2::packed_rows_size)(K, N));
    (avx512 ? &detail::avx512::pack_b_rows : &detail::avx2::pack_b_rows)(tb == Trans::Yes, B, ldb, K, N, data_.data());
  } else if (kernel == GemmKernel::Avx512) {
    data_.resize(detail::avx512::packed_size(K, N));
    detail::avx512::pack_b_all(tb == Trans::Yes, B, ldb, K, N, data_.data());
    if (matmul_precision() == MatmulPrecision::BFloat16) {
      pairs_.resize(detail::avx512::packed_pairs_size(K, N));
      detail::avx512::pack_pairs_all(data_.data(), K, N, pairs_.data());
    }
  } else {
    data_.resize(detail::avx2::packed_size(K, N));
    detail::avx2::pack_b_all(tb == Trans::Yes, B, ldb, K, N, data_.data());
  }
}

const float* GemmPackedB::panels(int64_t j0) const {
  const PanelShape s = gemm_panel_shape();
  const bool one_block = layout_ == Layout::Panels && s.mr > 0 && K_ <= s.max_depth && N_ <= s.max_width;
  if (!one_block || j0 < 0 || j0 >= N_ || j0 % s.nr) return nullptr;
  return data_.data() + j0 * K_;  // gemm_packed's layout with one block: panel jr at jr * K, [K][nr]
}

const uint32_t* GemmPackedB::pairs(int64_t j0) const {
  if (pairs_.empty() || !panels(j0)) return nullptr;
  return pairs_.data() + j0 * ((K_ + 1) / 2);  // panel jr at jr * ceil(K / 2), [ceil(K / 2)][nr]
}

bool gemm_packed_matches(int64_t M) { return M > 4 && gemm_panel_shape().mr > 0; }

void gemm_packed(Trans ta, int64_t M, float alpha, const float* A, int64_t lda, const GemmPackedB& B, float beta,
                 float* C, int64_t ldc, GemmThreads threads, const GemmEpilogue& e) {
  const int64_t N = B.N_, K = B.K_;
  AK_CHECK(M >= 0, "gemm_packed: negative size M {}", M);
  AK_CHECK(B.kernel_ == static_cast<int>(gemm_kernel_auto()), "gemm_packed: B was packed for another kernel");
  if (M == 0 || N == 0) return;
  const bool serial = threads == GemmThreads::This || omp_in_parallel() || num_threads() <= 1 ||
                      M * N * K < (int64_t(1) << 21);
  const GemmKernel kernel = static_cast<GemmKernel>(B.kernel_);
  if (K == 0 || alpha == 0.0f || kernel == GemmKernel::Eigen) {
    Map c(C, M, N, Stride(ldc));
    if (beta == 0.0f) c.setZero();
    else if (beta != 1.0f) c *= beta;
    if (K != 0 && alpha != 0.0f) eigen_gemm(serial, ta, Trans::No, M, N, K, alpha, A, lda, B.data_.data(), N, C, ldc);
    apply_epilogue(M, N, C, ldc, e);
    return;
  }
  const bool avx512 = kernel == GemmKernel::Avx512;
  const float* p = B.data_.data();
  const bool t = ta == Trans::Yes;
  if (B.layout_ == GemmPackedB::Layout::Rows) {
    // columns [j0, j1) of every row; threads take slices of whole blocks (the product has few rows)
    const auto rows = avx512 ? &detail::avx512::gemm_rows : &detail::avx2::gemm_rows;
    const int64_t block = (avx512 ? &detail::avx512::rows_block : &detail::avx2::rows_block)();
    auto slice = [&](int64_t j0, int64_t j1) {
      rows(t, M, N, K, alpha, A, lda, p, j0, j1, beta, C, ldc);
      GemmEpilogue se = e;
      if (se.bias) se.bias += j0;
      if (se.add) se.add += j0;
      apply_epilogue(M, j1 - j0, C + j0, ldc, se);
    };
    if (serial) return slice(0, N);
#pragma omp parallel num_threads(num_threads())
    {
      const int th = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t blocks = (N + block - 1) / block;
      const int64_t lo = std::min(N, blocks * th / nt * block), hi = std::min(N, blocks * (th + 1) / nt * block);
      if (lo < hi) slice(lo, hi);
    }
    return;
  }
  const auto fn = avx512 ? &detail::avx512::gemm_packed : &detail::avx2::gemm_packed;
  const uint32_t* pairs = B.pairs_.empty() ? nullptr : B.pairs_.data();  // packed under MatmulPrecision::BFloat16
  // rows [i0, i1) of C (A, C and the epilogue's add offset to them), columns [j0, j1)
  auto part = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const float* a = t ? A + i0 : A + i0 * lda;
    const float* add = e.add ? e.add + i0 * e.ldadd : nullptr;
    if (pairs)
      return detail::avx512::gemm_packed_bf16(t, i1 - i0, N, K, alpha, a, lda, pairs, j0, j1, beta, C + i0 * ldc, ldc,
                                              e.bias, add, e.ldadd, e.relu);
    return fn(t, i1 - i0, N, K, alpha, a, lda, p, j0, j1, beta, C + i0 * ldc, ldc, e.bias, add, e.ldadd, e.relu);
  };
  if (serial) {
    if (part(0, M, 0, N)) return;
    AK_CHECK(omp_in_parallel(), "gemm_packed: cannot allocate the packing buffer for [{}, {}]", M, K);
    // allocation-free fallback inside an OpenMP region: plain loops over the packed layout
    const auto at = avx512 ? &detail::avx512::packed_at : &detail::avx2::packed_at;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += (t ? A[k * lda + i] : A[i * lda + k]) * at(p, K, N, k, j);
        C[i * ldc + j] = alpha * acc + (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]);
      }
    apply_epilogue(M, N, C, ldc, e);
    return;
  }
  const int team = num_threads();
  std::vector<char> failed(team, 0);
  // Row blocks of 96 (a multiple of every kernel's MR) when there are at least two per thread; else
  // each thread a slice of columns, a multiple of 32 (whole panels).
  constexpr int64_t kRowBlock = 96;
  const int64_t row_blocks = (M + kRowBlock - 1) / kRowBlock;
  if (row_blocks >= 2 * team) {
    std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(team)
    {
      const int th = omp_get_thread_num();
      for (int64_t b = next++; b < row_blocks; b = next++)
        if (!part(b * kRowBlock, std::min(M, (b + 1) * kRowBlock), 0, N)) failed[th] = 1;
    }
  } else {
#pragma omp parallel num_threads(team)
    {
      const int th = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t chunk = (N / nt + 31) / 32 * 32;
      const int64_t lo = std::min<int64_t>(N, th * chunk), hi = th + 1 == nt ? N : std::min(N, lo + chunk);
      if (lo < hi && !part(0, M, lo, hi)) failed[th] = 1;
    }
  }
  for (char f : failed) AK_CHECK(!f, "gemm_packed: cannot allocate the packing buffer for [{}, {}]", M, K);
}

namespace {
// The panel entries of the kernel ops::gemm picks (gemm_kernel_auto()), chosen once.
struct PanelKernel {
  PanelShape shape;  // mr = 0: no panel kernel (the Eigen path)
  void (*pack_a)(bool, const float*, int64_t, int64_t, int64_t, float*, bool) = nullptr;
  void (*pack_b)(bool, const float*, int64_t, int64_t, int64_t, float*) = nullptr;
  void (*product)(int64_t, int64_t, int64_t, float, const float*, const float*, float, float*, int64_t, bool) = nullptr;
  void (*product_a_in_place)(bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, float, float*,
                             int64_t) = nullptr;
  void (*product_in_place)(int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
                           float*, int64_t) = nullptr;
};

const PanelKernel& panel_kernel() {
  static const PanelKernel kernel = [] {
    PanelKernel k;
    if (gemm_kernel_auto() == GemmKernel::Avx512) {
      namespace d = detail::avx512;
      d::panel_shape(&k.shape.mr, &k.shape.nr, &k.shape.max_depth, &k.shape.max_width);
      k.pack_a = &d::pack_a_panels, k.pack_b = &d::pack_b_panels, k.product = &d::gemm_panels;
      k.product_a_in_place = &d::gemm_panels_a_in_place, k.product_in_place = &d::gemm_in_place;
    } else if (gemm_kernel_auto() == GemmKernel::Avx2) {
      namespace d = detail::avx2;
      d::panel_shape(&k.shape.mr, &k.shape.nr, &k.shape.max_depth, &k.shape.max_width);
      k.pack_a = &d::pack_a_panels, k.pack_b = &d::pack_b_panels, k.product = &d::gemm_panels;
      k.product_a_in_place = &d::gemm_panels_a_in_place, k.product_in_place = &d::gemm_in_place;
    }
    return k;
  }();
  AK_CHECK(kernel.shape.mr > 0, "gemm: no panel kernel on this processor (check gemm_panel_shape() first)");
  return kernel;
}
}  // namespace

PanelShape gemm_panel_shape() {
  return gemm_kernel_auto() == GemmKernel::Eigen ? PanelShape{} : panel_kernel().shape;
}

void pack_a_panels(Trans ta, int64_t M, int64_t K, const float* A, int64_t lda, float* dst, RowBlocks blocks) {
  panel_kernel().pack_a(ta == Trans::Yes, A, lda, M, K, dst, blocks == RowBlocks::Balanced);
}

void pack_b_panels(Trans tb, int64_t K, int64_t N, const float* B, int64_t ldb, float* dst) {
  panel_kernel().pack_b(tb == Trans::Yes, B, ldb, K, N, dst);
}

void gemm_panels(int64_t M, int64_t N, int64_t K, float alpha, const float* pa, const float* pb, float beta, float* C,
                 int64_t ldc, RowBlocks blocks) {
  panel_kernel().product(M, N, K, alpha, pa, pb, beta, C, ldc, blocks == RowBlocks::Balanced);
}

void gemm_panels_pairs(int64_t M, int64_t N, int64_t K, float alpha, const float* pa, const uint32_t* pb, float beta,
                       float* C, int64_t ldc, RowBlocks blocks) {
  AK_CHECK(matmul_precision_available(MatmulPrecision::BFloat16) && K <= panel_kernel().shape.max_depth,
           "gemm_panels_pairs: bfloat16 pair panels need AVX512_BF16 and K <= {} (K = {})",
           panel_kernel().shape.max_depth, K);
  detail::avx512::gemm_panels_bf16(M, N, K, alpha, pa, pb, beta, C, ldc, blocks == RowBlocks::Balanced);
}

void gemm_panels_a_in_place(Trans ta, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                            const float* pb, float beta, float* C, int64_t ldc) {
  panel_kernel().product_a_in_place(ta == Trans::Yes, M, N, K, alpha, A, lda, pb, beta, C, ldc);
}

void gemm_in_place(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                   int64_t ldb, float beta, float* C, int64_t ldc) {
  const PanelKernel& k = panel_kernel();
  AK_CHECK(N % k.shape.nr == 0, "gemm_in_place: N = {} is not a multiple of the panel width {}", N, k.shape.nr);
  k.product_in_place(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
