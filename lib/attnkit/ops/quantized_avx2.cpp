// The int8 and bfloat16 kernels of ops/quantized.hpp for AVX2 (int8: vpmaddubsw on |a| and sign(a) q, then
// vpmaddwd by ones: 4 products a channel each step, no pair sum past 2 127^2 = 32258, so nothing saturates;
// bf16: widened to float32 in registers). Compiled with -mavx2 -mfma whatever the build's -march
// (cmake/kernel_flags.cmake); called only when the processor has them.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "attnkit/ops/quantized.hpp"
#include "attnkit/ops/quantized_tiles.hpp"

namespace attnkit::ops::detail::lowp_avx2 {

namespace {

// A block of 16 channels is two halves of 8 (32 bytes of the packed group each).
template <int R, int B>
void q8_tile(const int8_t* packed, int64_t k4, const int8_t* a, int64_t i0, int64_t b, const Q8Out& out) {
  __m256i c[R][B][2];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < B; ++j) c[r][j][0] = c[r][j][1] = _mm256_setzero_si256();
  const int64_t groups = k4 / 4;
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* panel = packed + lowp_panel_offset(b, groups, 64);
  const int64_t blocks = out.y ? (out.n + 15) / 16 : out.n16 / 16;
  const int64_t stride = lowp_panel_width(b, blocks) * 64;
  for (int64_t g = 0; g < groups; ++g) {
    __m256i w[B][2];
    for (int j = 0; j < B; ++j)
      for (int h = 0; h < 2; ++h)
        w[j][h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + g * stride + j * 64 + h * 32));
    for (int r = 0; r < R; ++r) {
      int32_t four;
      std::memcpy(&four, a + (i0 + r) * k4 + g * 4, sizeof four);
      const __m256i av = _mm256_set1_epi32(four);
      const __m256i magnitude = _mm256_sign_epi8(av, av);
      for (int j = 0; j < B; ++j)
        for (int h = 0; h < 2; ++h) {
          const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(w[j][h], av));
          c[r][j][h] = _mm256_add_epi32(c[r][j][h], _mm256_madd_epi16(pairs, ones));
        }
    }
  }
  if (!out.y) {
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < B; ++j)
        for (int h = 0; h < 2; ++h)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.acc + (i0 + r) * out.n16 + (b + j) * 16 + h * 8), c[r][j][h]);
    return;
  }
  for (int j = 0; j < B; ++j) {
    const int64_t col = (b + j) * 16, left = out.n - col;
    for (int r = 0; r < R; ++r) {
      const float ti = out.t[i0 + r];
      float* y = out.y + (i0 + r) * out.ldy + col;
      if (left < 16) {  // the last block: its columns one by one
        alignas(32) int32_t sums[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(sums), c[r][j][0]);
        _mm256_store_si256(reinterpret_cast<__m256i*>(sums + 8), c[r][j][1]);
        for (int64_t q = 0; q < left; ++q) {
          const float ts = ti * out.scale[col + q];
          y[q] = out.bias ? std::fma(static_cast<float>(sums[q]), ts, out.bias[col + q]) : static_cast<float>(sums[q]) * ts;
        }
        continue;
      }
      for (int h = 0; h < 2; ++h) {
        const __m256 ts = _mm256_mul_ps(_mm256_set1_ps(ti), _mm256_loadu_ps(out.scale + col + h * 8));
        const __m256 v = _mm256_cvtepi32_ps(c[r][j][h]);
        _mm256_storeu_ps(y + h * 8, out.bias ? _mm256_fmadd_ps(v, ts, _mm256_loadu_ps(out.bias + col + h * 8))
                                             : _mm256_mul_ps(v, ts));
      }
    }
  }
}

template <int R, int B>
void bf16_tile(const uint16_t* packed, int64_t k, int64_t n, const float* x, int64_t ldx, int64_t i0, int64_t b,
               float* y, int64_t ldy) {
  __m256 c[R][B][2];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < B; ++j) c[r][j][0] = c[r][j][1] = _mm256_setzero_ps();
  const uint16_t* panel = packed + lowp_panel_offset(b, k, 16);
  const int64_t stride = lowp_panel_width(b, (n + 15) / 16) * 16;
  for (int64_t kk = 0; kk < k; ++kk) {
    __m256 w[B][2];
    for (int j = 0; j < B; ++j)
      for (int h = 0; h < 2; ++h) {
        const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(panel + kk * stride + j * 16 + h * 8));
        w[j][h] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
      }
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_set1_ps(x[(i0 + r) * ldx + kk]);
      for (int j = 0; j < B; ++j)
        for (int h = 0; h < 2; ++h) c[r][j][h] = _mm256_fmadd_ps(xv, w[j][h], c[r][j][h]);
    }
  }
  for (int j = 0; j < B; ++j) {
    const int64_t col = (b + j) * 16, left = n - col;
    for (int r = 0; r < R; ++r) {
      float* out = y + (i0 + r) * ldy + col;
      if (left >= 16) {
        _mm256_storeu_ps(out, c[r][j][0]);
        _mm256_storeu_ps(out + 8, c[r][j][1]);
      } else {
        alignas(32) float tmp[16];
        _mm256_store_ps(tmp, c[r][j][0]);
        _mm256_store_ps(tmp + 8, c[r][j][1]);
        std::memcpy(out, tmp, static_cast<size_t>(left) * sizeof(float));
      }
    }
  }
}

// Register tiles: R rows x B blocks x 2 halves of accumulators (8 at most of the 16 registers).
constexpr int blocks_for(int r) { return r == 1 ? 4 : r == 2 ? 2 : 1; }

}  // namespace

void q8_blocks(const int8_t* packed, const int32_t*, int64_t k4, const int8_t* a, int64_t m, int64_t b0, int64_t b1,
               const Q8Out& out) {
  lowp_tiles<3, blocks_for>(m, b0, b1, lowp_group(16 * k4),
                                [&](auto r, auto b, int64_t i, int64_t blk) { q8_tile<decltype(r)::value, decltype(b)::value>(packed, k4, a, i, blk, out); });
}

void bf16_blocks(const uint16_t* packed, int64_t k, int64_t n, const float* x, int64_t m, int64_t ldx, int64_t b0,
                 int64_t b1, float* y, int64_t ldy) {
  lowp_tiles<3, blocks_for>(m, b0, b1, lowp_group(32 * k),
                                [&](auto r, auto b, int64_t i, int64_t blk) { bf16_tile<decltype(r)::value, decltype(b)::value>(packed, k, n, x, ldx, i, blk, y, ldy); });
}

// As the AVX-512 one (ops/quantized_avx512.cpp), 8 lanes at a time; a row's last k % 8 values by the plain loop's
// arithmetic (the same bytes).
void q8_quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t k4, int8_t* a, float* t,
                      int8_t flip) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 largest = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  const __m256i flips = _mm256_set1_epi32(static_cast<uint8_t>(flip));
  // the low byte of each 32-bit lane to the first 4 bytes of its 128-bit half, then both halves' to the first 8
  const __m256i gather = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i halves = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
  const int64_t k8 = k / 8 * 8;
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * ldx;
    int8_t* out = a + i * k4;
    __m256 vmax = _mm256_setzero_ps();
    int bad = 0;
    for (int64_t c = 0; c < k8; c += 8) {
      const __m256 v = _mm256_and_ps(_mm256_loadu_ps(row + c), magnitude);
      bad |= _mm256_movemask_ps(_mm256_cmp_ps(v, largest, _CMP_NLE_UQ));
      vmax = _mm256_max_ps(vmax, v);
    }
    float amax = 0;
    {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, vmax);
      for (float v : lanes) amax = std::max(amax, v);
    }
    for (int64_t c = k8; c < k; ++c) {
      const float v = std::fabs(row[c]);
      bad |= !(v <= std::numeric_limits<float>::max());
      amax = std::max(amax, v);
    }
    if (bad) {
      unquantizable_row(out, k4, t + i, flip);
      continue;
    }
    const RowScale scale = row_scale(amax);
    t[i] = scale.t;
    const __m256 vinv = _mm256_set1_ps(scale.inv), vs = _mm256_set1_ps(scale.t);
    for (int64_t c = 0; c < k8; c += 8) {
      const __m256 v = _mm256_loadu_ps(row + c);
      __m256i q = _mm256_cvtps_epi32(scale.divide ? _mm256_div_ps(v, vs) : _mm256_mul_ps(v, vinv));
      q = _mm256_xor_si256(_mm256_max_epi32(_mm256_min_epi32(q, hi), lo), flips);
      q = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(q, gather), halves);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + c), _mm256_castsi256_si128(q));
    }
    for (int64_t c = k8; c < k; ++c) out[c] = quantize_value(row[c], scale, flip);
    if (k4 > k) std::memset(out + k, flip, static_cast<size_t>(k4 - k));
  }
}

}  // namespace attnkit::ops::detail::lowp_avx2
