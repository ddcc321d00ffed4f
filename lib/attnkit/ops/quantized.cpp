#include "attnkit/ops/quantized.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include <omp.h>

#include "attnkit/ops/quantized_tiles.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/scratch_pool.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {

namespace {

constexpr int64_t kBlock = 16;  // output channels a packed block

int64_t blocks_of(int64_t n) { return (n + kBlock - 1) / kBlock; }

bool cpu_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool cpu_avx512_vnni() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vnni");
}
bool cpu_avx512f() { return __builtin_cpu_supports("avx512f"); }

void check_sizes(const char* what, int64_t n, int64_t k) {
  AK_CHECK(n >= 1 && k >= 1, "{}: weights [{}, {}] must have N >= 1 and K >= 1", what, n, k);
  // |acc| <= K 127^2 must fit int32
  AK_CHECK(k <= 133000, "{}: K = {} is more than 133000, the most an int32 sum of int8 products holds", what, k);
}

void pack_q8(Q8Matrix& m) {
  m.k4 = (m.k + 3) / 4 * 4;
  const int64_t nb = blocks_of(m.n);
  m.packed.assign(static_cast<size_t>(nb * kBlock * m.k4), 0);
  m.sums.assign(static_cast<size_t>(nb * kBlock), 0);
  for (int64_t r = 0; r < m.n; ++r) {
    const int64_t b = r / kBlock, j = r % kBlock;
    const int64_t panel = detail::lowp_panel_offset(b, m.k4 / 4, 64), stride = detail::lowp_panel_width(b, nb) * 64;
    int32_t sum = 0;
    for (int64_t c = 0; c < m.k; ++c) {
      const int8_t v = m.q[static_cast<size_t>(r * m.k + c)];
      m.packed[static_cast<size_t>(panel + (c / 4) * stride + j * 4 + c % 4)] = v;
      sum += v;
    }
    m.sums[static_cast<size_t>(r)] = sum;
  }
}

// The team for `blocks` blocks of work `flops`, and its share: thread t takes blocks [lo, hi), whole panels
// (ops/quantized_tiles.hpp).
template <typename Body>
void over_blocks(int64_t blocks, double flops, Body&& body) {
  const int64_t panels = (blocks + detail::kLowpPanel - 1) / detail::kLowpPanel;
  const int team = attnkit::detail::team_for(panels, flops);
  if (team <= 1) return body(int64_t{0}, blocks);
#pragma omp parallel num_threads(team)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = panels * t / nt * detail::kLowpPanel;
    const int64_t hi = std::min(blocks, panels * (t + 1) / nt * detail::kLowpPanel);
    if (lo < hi) body(lo, hi);
  }
}

void q8_reference(const Q8Matrix& w, const int8_t* a, int64_t m, int64_t b0, int64_t b1, const detail::Q8Out& out) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = b0 * kBlock; r < std::min(b1 * kBlock, w.n); ++r) {
      int32_t s = 0;
      for (int64_t c = 0; c < w.k; ++c) s += int32_t{a[i * w.k4 + c]} * int32_t{w.q[static_cast<size_t>(r * w.k + c)]};
      if (!out.y) {
        out.acc[i * out.n16 + r] = s;
        continue;
      }
      const float ts = out.t[i] * out.scale[r];
      out.y[i * out.ldy + r] = out.bias ? std::fma(static_cast<float>(s), ts, out.bias[r]) : static_cast<float>(s) * ts;
    }
}

void bf16_reference(const Bf16Matrix& w, const float* x, int64_t m, int64_t ldx, int64_t b0, int64_t b1, float* y,
                    int64_t ldy) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = b0 * kBlock; r < std::min(b1 * kBlock, w.n); ++r) {
      float s = 0;
      for (int64_t c = 0; c < w.k; ++c) s = std::fma(x[i * ldx + c], from_bf16(w.w[static_cast<size_t>(r * w.k + c)]), s);
      y[i * ldy + r] = s;
    }
}

LowpKernel resolve(LowpKernel kernel, LowpKernel automatic, bool (*available)(LowpKernel), const char* what) {
  if (kernel == LowpKernel::Auto) return automatic;
  AK_CHECK(available(kernel), "{}: the {} kernel does not run on this processor", what, lowp_kernel_name(kernel));
  return kernel;
}

// Blocks [b0, b1) of a product on the calling thread, by the resolved `kernel`.
void q8_blocks_by(LowpKernel kernel, const Q8Matrix& w, const int8_t* a, int64_t m, int64_t b0, int64_t b1,
                  const detail::Q8Out& out) {
  switch (kernel) {
    case LowpKernel::Avx512: return detail::lowp_avx512::q8_blocks(w.packed.data(), w.sums.data(), w.k4, a, m, b0, b1, out);
    case LowpKernel::Avx2: return detail::lowp_avx2::q8_blocks(w.packed.data(), w.sums.data(), w.k4, a, m, b0, b1, out);
    default: return q8_reference(w, a, m, b0, b1, out);
  }
}

void bf16_blocks_by(LowpKernel kernel, const Bf16Matrix& w, const float* x, int64_t m, int64_t ldx, int64_t b0,
                    int64_t b1, float* y, int64_t ldy) {
  switch (kernel) {
    case LowpKernel::Avx512: return detail::lowp_avx512::bf16_blocks(w.packed.data(), w.k, w.n, x, m, ldx, b0, b1, y, ldy);
    case LowpKernel::Avx2: return detail::lowp_avx2::bf16_blocks(w.packed.data(), w.k, w.n, x, m, ldx, b0, b1, y, ldy);
    default: return bf16_reference(w, x, m, ldx, b0, b1, y, ldy);
  }
}

}  // namespace

bool q8_kernel_available(LowpKernel kernel) {
  switch (kernel) {
    case LowpKernel::Auto:
    case LowpKernel::Reference: return true;
    case LowpKernel::Avx2: return cpu_avx2();
    case LowpKernel::Avx512: return cpu_avx512_vnni();
  }
  return false;
}

bool bf16_kernel_available(LowpKernel kernel) {
  switch (kernel) {
    case LowpKernel::Auto:
    case LowpKernel::Reference: return true;
    case LowpKernel::Avx2: return cpu_avx2();
    case LowpKernel::Avx512: return cpu_avx512f();
  }
  return false;
}

LowpKernel q8_kernel_auto() {
  static const LowpKernel k = cpu_avx512_vnni() ? LowpKernel::Avx512 : cpu_avx2() ? LowpKernel::Avx2 : LowpKernel::Reference;
  return k;
}

LowpKernel bf16_kernel_auto() {
  static const LowpKernel k = cpu_avx512f() ? LowpKernel::Avx512 : cpu_avx2() ? LowpKernel::Avx2 : LowpKernel::Reference;
  return k;
}

std::string_view lowp_kernel_name(LowpKernel kernel) {
  switch (kernel) {
    case LowpKernel::Auto: return "auto";
    case LowpKernel::Reference: return "reference";
    case LowpKernel::Avx2: return "avx2";
    case LowpKernel::Avx512: return "avx512";
  }
  return "?";
}

// --- int8 ---

Q8Matrix quantize_q8(const float* w, int64_t n, int64_t k) {
  check_sizes("quantize_q8", n, k);
  Q8Matrix m;
  m.n = n, m.k = k;
  m.scale.resize(static_cast<size_t>(n));
  m.q.resize(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) {
      AK_CHECK(std::isfinite(w[r * k + c]), "quantize_q8: weight [{}, {}] is {}", r, c, w[r * k + c]);
      amax = std::max(amax, std::fabs(w[r * k + c]));
    }
    const float s = amax / 127.0f;
    m.scale[static_cast<size_t>(r)] = s;
    for (int64_t c = 0; c < k; ++c) {
      const float v = s > 0 ? std::nearbyint(w[r * k + c] / s) : 0.0f;
      m.q[static_cast<size_t>(r * k + c)] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  }
  pack_q8(m);
  return m;
}

Q8Matrix q8_from_stored(std::vector<int8_t> q, std::vector<float> scale, int64_t n, int64_t k) {
  check_sizes("int8 weights", n, k);
  AK_CHECK(static_cast<int64_t>(q.size()) == n * k && static_cast<int64_t>(scale.size()) == n,
           "int8 weights: {} values and {} scales for [{}, {}]", q.size(), scale.size(), n, k);
  for (int8_t v : q) AK_CHECK(v != -128, "int8 weights: -128 is outside the symmetric range [-127, 127]");
  for (float s : scale) AK_CHECK(std::isfinite(s) && s >= 0, "int8 weights: a scale of {} (scales are finite, >= 0)", s);
  Q8Matrix m;
  m.n = n, m.k = k, m.q = std::move(q), m.scale = std::move(scale);
  pack_q8(m);
  return m;
}

namespace {

// q8_quantize_rows, each byte written xor `flip` (0, or -128 for the AVX-512 kernel's a + 128 as u8): the plain
// loop the vector kernels (detail::lowp_*::q8_quantize_rows) agree with byte for byte (the shared parts in
// ops/quantized_tiles.hpp).
void quantize_rows_plain(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t k4, int8_t* a, float* t,
                         int8_t flip) {
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * ldx;
    float amax = 0;
    bool finite = true;
    for (int64_t c = 0; c < k; ++c) {
      const float v = std::fabs(row[c]);
      finite = finite && v <= std::numeric_limits<float>::max();
      amax = std::max(amax, v);
    }
    int8_t* out = a + i * k4;
    if (!finite) {  // a NaN or infinity has no int8 value: the row's products are NaN, as float32's would not be finite
      detail::unquantizable_row(out, k4, t + i, flip);
      continue;
    }
    const detail::RowScale scale = detail::row_scale(amax);
    t[i] = scale.t;
    for (int64_t c = 0; c < k; ++c) out[c] = detail::quantize_value(row[c], scale, flip);
    std::fill(out + k, out + k4, flip);
  }
}

// By the kernel's instruction set (the AVX-512 one needs only AVX-512F/BW, which the int8 AVX-512 kernel implies).
void quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t k4, int8_t* a, float* t, int8_t flip,
                   LowpKernel kernel) {
  switch (kernel) {
    case LowpKernel::Avx512: return detail::lowp_avx512::q8_quantize_rows(x, m, k, ldx, k4, a, t, flip);
    case LowpKernel::Avx2: return detail::lowp_avx2::q8_quantize_rows(x, m, k, ldx, k4, a, t, flip);
    default: return quantize_rows_plain(x, m, k, ldx, k4, a, t, flip);
  }
}

}  // namespace

void q8_quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t k4, int8_t* a, float* t,
                      LowpKernel kernel) {
  kernel = resolve(kernel, q8_kernel_auto(), q8_kernel_available, "int8 quantization");
  quantize_rows(x, m, k, ldx, k4, a, t, 0, kernel);
}

namespace {

// `kernel` resolved; `a` as the kernel takes it (AVX-512: a + 128 as u8) when `as_kernel_takes`, else int8.
void q8_run(const Q8Matrix& w, const int8_t* a, int64_t m, const detail::Q8Out& out, LowpKernel kernel,
            bool as_kernel_takes) {
  std::shared_ptr<float> flipped;
  if (kernel == LowpKernel::Avx512 && !as_kernel_takes) {  // a + 128 as u8, once, not in every tile
    const int64_t bytes = m * w.k4;
    flipped = ScratchPool::get((bytes + 3) / 4);
    int8_t* u = reinterpret_cast<int8_t*>(flipped.get());
    for (int64_t i = 0; i < bytes; ++i) u[i] = static_cast<int8_t>(a[i] ^ int8_t(-128));
    a = u;
  }
  over_blocks(blocks_of(w.n), 2.0 * double(m) * double(w.n) * double(w.k),
              [&](int64_t b0, int64_t b1) { q8_blocks_by(kernel, w, a, m, b0, b1, out); });
}

}  // namespace

void q8_accumulate(const Q8Matrix& w, const int8_t* a, int64_t m, int32_t* acc, LowpKernel kernel) {
  detail::Q8Out out;
  out.acc = acc, out.n16 = blocks_of(w.n) * kBlock;
  q8_run(w, a, m, out, resolve(kernel, q8_kernel_auto(), q8_kernel_available, "int8 linear"), false);
}

void q8_linear(const Q8Matrix& w, const float* x, int64_t m, int64_t ldx, const float* bias, float* y, int64_t ldy,
               LowpKernel kernel) {
  if (m <= 0) return;
  kernel = resolve(kernel, q8_kernel_auto(), q8_kernel_available, "int8 linear");
  // Scratch from the recycling pool: a fresh buffer's page faults would cost more than the product itself
  // (tensor/scratch_pool.hpp); int8 values in float-sized storage, written as the kernel takes them. The sums
  // never leave the registers: each tile writes its float results.
  const std::shared_ptr<float> a_buf = ScratchPool::get((m * w.k4 + 3) / 4), t_buf = ScratchPool::get(m);
  int8_t* a = reinterpret_cast<int8_t*>(a_buf.get());
  float* t = t_buf.get();
  quantize_rows(x, m, w.k, ldx, w.k4, a, t, kernel == LowpKernel::Avx512 ? int8_t{-128} : int8_t{0}, kernel);
  detail::Q8Out out;
  out.t = t, out.scale = w.scale.data(), out.bias = bias, out.y = y, out.ldy = ldy, out.n = w.n;
  q8_run(w, a, m, out, kernel, true);
}

int64_t lowp_panel_blocks() { return detail::kLowpPanel; }

void q8_prepare_rows(const Q8Matrix& w, const float* x, int64_t m, int64_t ldx, int8_t* a, float* t,
                     LowpKernel kernel) {
  kernel = resolve(kernel, q8_kernel_auto(), q8_kernel_available, "int8 linear");
  quantize_rows(x, m, w.k, ldx, w.k4, a, t, kernel == LowpKernel::Avx512 ? int8_t{-128} : int8_t{0}, kernel);
}

namespace {

void check_block_range(int64_t n, int64_t b0, int64_t b1, const char* what) {
  const int64_t blocks = blocks_of(n);
  AK_CHECK(0 <= b0 && b0 <= b1 && b1 <= blocks && b0 % detail::kLowpPanel == 0 &&
               (b1 % detail::kLowpPanel == 0 || b1 == blocks),
           "{}: blocks [{}, {}) of {} do not start and end at panels of {}", what, b0, b1, blocks, detail::kLowpPanel);
}

}  // namespace

void q8_linear_blocks(const Q8Matrix& w, const int8_t* a, const float* t, int64_t m, int64_t b0, int64_t b1,
                      const float* bias, float* y, int64_t ldy, LowpKernel kernel) {
  kernel = resolve(kernel, q8_kernel_auto(), q8_kernel_available, "int8 linear");
  check_block_range(w.n, b0, b1, "int8 linear");
  if (m <= 0 || b0 == b1) return;
  detail::Q8Out out;
  out.t = t, out.scale = w.scale.data(), out.bias = bias, out.y = y, out.ldy = ldy, out.n = w.n;
  q8_blocks_by(kernel, w, a, m, b0, b1, out);
}

// --- bfloat16 ---

uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // nearest, ties to even (finite x)
  return static_cast<uint16_t>(bits >> 16);
}

float from_bf16(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

static void pack_bf16(Bf16Matrix& m) {
  const int64_t nb = blocks_of(m.n);
  m.packed.assign(static_cast<size_t>(nb * kBlock * m.k), 0);
  for (int64_t r = 0; r < m.n; ++r) {
    const int64_t b = r / kBlock;
    const int64_t panel = detail::lowp_panel_offset(b, m.k, kBlock), stride = detail::lowp_panel_width(b, nb) * kBlock;
    for (int64_t c = 0; c < m.k; ++c)
      m.packed[static_cast<size_t>(panel + c * stride + r % kBlock)] = m.w[static_cast<size_t>(r * m.k + c)];
  }
}

Bf16Matrix quantize_bf16(const float* w, int64_t n, int64_t k) {
  check_sizes("quantize_bf16", n, k);
  Bf16Matrix m;
  m.n = n, m.k = k;
  m.w.resize(static_cast<size_t>(n * k));
  for (int64_t i = 0; i < n * k; ++i) {
    AK_CHECK(std::isfinite(w[i]), "quantize_bf16: weight [{}, {}] is {}", i / k, i % k, w[i]);
    m.w[static_cast<size_t>(i)] = to_bf16(w[i]);
  }
  pack_bf16(m);
  return m;
}

Bf16Matrix bf16_from_stored(std::vector<uint16_t> w, int64_t n, int64_t k) {
  check_sizes("bfloat16 weights", n, k);
  AK_CHECK(static_cast<int64_t>(w.size()) == n * k, "bfloat16 weights: {} values for [{}, {}]", w.size(), n, k);
  for (uint16_t b : w) AK_CHECK((b & 0x7F80u) != 0x7F80u, "bfloat16 weights: a NaN or infinity (bits {:#06x})", b);
  Bf16Matrix m;
  m.n = n, m.k = k, m.w = std::move(w);
  pack_bf16(m);
  return m;
}

void bf16_linear(const Bf16Matrix& w, const float* x, int64_t m, int64_t ldx, const float* bias, float* y, int64_t ldy,
                 LowpKernel kernel) {
  if (m <= 0) return;
  kernel = resolve(kernel, bf16_kernel_auto(), bf16_kernel_available, "bfloat16 linear");
  over_blocks(blocks_of(w.n), 2.0 * double(m) * double(w.n) * double(w.k),
              [&](int64_t b0, int64_t b1) { bf16_blocks_by(kernel, w, x, m, ldx, b0, b1, y, ldy); });
  if (bias)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t r = 0; r < w.n; ++r) y[i * ldy + r] += bias[r];
}

void bf16_linear_blocks(const Bf16Matrix& w, const float* x, int64_t m, int64_t ldx, int64_t b0, int64_t b1,
                        float* y, int64_t ldy, LowpKernel kernel) {
  kernel = resolve(kernel, bf16_kernel_auto(), bf16_kernel_available, "bfloat16 linear");
  check_block_range(w.n, b0, b1, "bfloat16 linear");
  if (m <= 0 || b0 == b1) return;
  bf16_blocks_by(kernel, w, x, m, ldx, b0, b1, y, ldy);
}

}  // namespace attnkit::ops
