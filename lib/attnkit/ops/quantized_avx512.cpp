// The int8 and bfloat16 kernels of ops/quantized.hpp for AVX-512 (int8: VNNI's vpdpbusd, u8 x s8 -> s32 in
// groups of 4; bf16: widened to float32 in registers). Compiled with -mavx512f -mavx512bw -mavx512vnni whatever
// the build's -march (cmake/kernel_flags.cmake); called only when the processor has them.
// _mm512_setzero_* and _mm512_cvtepu16_epi32: GCC 12 false positives on their undefined first operand
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "attnkit/ops/quantized.hpp"
#include "attnkit/ops/quantized_tiles.hpp"

namespace attnkit::ops::detail::lowp_avx512 {

namespace {

// c + vpdpbusd(u, w): u8 u by s8 w in groups of 4. In inline assembly: for the intrinsic, GCC 12 moved every
// accumulator of a tile between two register sets each step and stored one to the stack (the accumulator is
// the instruction's destination), which held the tiles near 60% of the instruction's rate.
inline __m512i dpbusd(__m512i c, __m512i u, __m512i w) {
  __asm__("vpdpbusd %[w], %[u], %[c]" : [c] "+v"(c) : [u] "v"(u), [w] "v"(w));
  return c;
}

// acc[i0 + r, 16 (b + j) ..] for R rows and B blocks: sum_g dpbusd(u, q), minus 128 sum_k q, where u = a + 128 as
// u8 (a ^ 0x80, made once per call by q8_blocks' caller: ops/quantized.cpp).
template <int R, int B>
void q8_tile(const int8_t* packed, const int32_t* sums, int64_t k4, const int8_t* a, int64_t i0, int64_t b,
             const Q8Out& out) {
  __m512i c[R][B];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < B; ++j) c[r][j] = _mm512_setzero_si512();
  const int64_t groups = k4 / 4;
  const int8_t* panel = packed + lowp_panel_offset(b, groups, 64);
  const int64_t blocks = out.y ? (out.n + 15) / 16 : out.n16 / 16;
  const int64_t stride = lowp_panel_width(b, blocks) * 64;
  for (int64_t g = 0; g < groups; ++g) {
    __m512i w[B];
    for (int j = 0; j < B; ++j) w[j] = _mm512_loadu_si512(panel + g * stride + j * 64);
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, a + (i0 + r) * k4 + g * 4, sizeof four);
      const __m512i av = _mm512_set1_epi32(four);
      for (int j = 0; j < B; ++j) c[r][j] = dpbusd(c[r][j], av, w[j]);
    }
  }
  for (int j = 0; j < B; ++j) {
    const int64_t col = (b + j) * 16;
    const __m512i offset = _mm512_slli_epi32(_mm512_loadu_si512(sums + col), 7);
    if (!out.y) {
      for (int r = 0; r < R; ++r) _mm512_storeu_si512(out.acc + (i0 + r) * out.n16 + col, _mm512_sub_epi32(c[r][j], offset));
      continue;
    }
    const int64_t left = out.n - col;
    const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    const __m512 scale = _mm512_maskz_loadu_ps(mask, out.scale + col);
    const __m512 bias = out.bias ? _mm512_maskz_loadu_ps(mask, out.bias + col) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      const __m512 ts = _mm512_mul_ps(_mm512_set1_ps(out.t[i0 + r]), scale);
      const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(c[r][j], offset));
      _mm512_mask_storeu_ps(out.y + (i0 + r) * out.ldy + col, mask,
                            out.bias ? _mm512_fmadd_ps(v, ts, bias) : _mm512_mul_ps(v, ts));
    }
  }
}

// y[i0 + r, 16 (b + j) ..] = sum_k x[i0 + r, k] w[k, ..] for R rows and B blocks, columns below n.
template <int R, int B>
void bf16_tile(const uint16_t* packed, int64_t k, int64_t n, const float* x, int64_t ldx, int64_t i0, int64_t b,
               float* y, int64_t ldy) {
  __m512 c[R][B];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < B; ++j) c[r][j] = _mm512_setzero_ps();
  const uint16_t* panel = packed + lowp_panel_offset(b, k, 16);
  const int64_t stride = lowp_panel_width(b, (n + 15) / 16) * 16;
  for (int64_t kk = 0; kk < k; ++kk) {
    __m512 w[B];
    for (int j = 0; j < B; ++j) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + kk * stride + j * 16));
      w[j] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    for (int r = 0; r < R; ++r) {
      const __m512 xv = _mm512_set1_ps(x[(i0 + r) * ldx + kk]);
      for (int j = 0; j < B; ++j) c[r][j] = _mm512_fmadd_ps(xv, w[j], c[r][j]);
    }
  }
  for (int j = 0; j < B; ++j) {
    const int64_t col = (b + j) * 16, left = n - col;
    const __mmask16 mask = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
    for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + (i0 + r) * ldy + col, mask, c[r][j]);
  }
}

// Register tiles: R rows x B blocks of accumulators (16 at most of the 32 registers).
constexpr int blocks_for(int) { return 4; }

}  // namespace

void q8_blocks(const int8_t* packed, const int32_t* sums, int64_t k4, const int8_t* a, int64_t m, int64_t b0,
               int64_t b1, const Q8Out& out) {
  lowp_tiles<4, blocks_for>(m, b0, b1, lowp_group(16 * k4),
                                [&](auto r, auto b, int64_t i, int64_t blk) { q8_tile<decltype(r)::value, decltype(b)::value>(packed, sums, k4, a, i, blk, out); });
}

void bf16_blocks(const uint16_t* packed, int64_t k, int64_t n, const float* x, int64_t m, int64_t ldx, int64_t b0,
                 int64_t b1, float* y, int64_t ldy) {
  lowp_tiles<4, blocks_for>(m, b0, b1, lowp_group(32 * k),
                                [&](auto r, auto b, int64_t i, int64_t blk) { bf16_tile<decltype(r)::value, decltype(b)::value>(packed, k, n, x, ldx, i, blk, y, ldy); });
}

// Per row: the largest magnitude (a NaN or infinity marks the row), then round(x / s) by cvtps (nearest, ties to
// even, as std::nearbyint in the default rounding mode), clamped to [-127, 127], xor flip, stored as bytes.
void q8_quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t k4, int8_t* a, float* t,
                      int8_t flip) {
  const __m512 largest = _mm512_set1_ps(std::numeric_limits<float>::max());
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i flips = _mm512_set1_epi32(static_cast<uint8_t>(flip));
  auto mask_at = [&](int64_t c) { return k - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (k - c)) - 1); };
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * ldx;
    int8_t* out = a + i * k4;
    __m512 vmax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t c = 0; c < k; c += 16) {
      const __mmask16 mask = mask_at(c);
      const __m512 v = _mm512_abs_ps(_mm512_maskz_loadu_ps(mask, row + c));  // AVX-512F (and_ps needs DQ)
      bad |= _mm512_mask_cmp_ps_mask(mask, v, largest, _CMP_NLE_UQ);  // not <= FLT_MAX: NaN or infinity
      vmax = _mm512_max_ps(vmax, v);
    }
    if (bad) {
      unquantizable_row(out, k4, t + i, flip);
      continue;
    }
    const RowScale scale = row_scale(_mm512_reduce_max_ps(vmax));
    t[i] = scale.t;
    const __m512 vinv = _mm512_set1_ps(scale.inv), vs = _mm512_set1_ps(scale.t);
    for (int64_t c = 0; c < k; c += 16) {
      const __mmask16 mask = mask_at(c);
      const __m512 v = _mm512_maskz_loadu_ps(mask, row + c);
      const __m512i q = _mm512_cvtps_epi32(scale.divide ? _mm512_div_ps(v, vs) : _mm512_mul_ps(v, vinv));
      _mm512_mask_cvtepi32_storeu_epi8(out + c, mask, _mm512_xor_si512(_mm512_max_epi32(_mm512_min_epi32(q, hi), lo), flips));
    }
    if (k4 > k) std::memset(out + k, flip, static_cast<size_t>(k4 - k));
  }
}

}  // namespace attnkit::ops::detail::lowp_avx512
