// The int8 and bfloat16 kernels of ops/quantized.hpp for AVX2 (int8: vpmaddubsw on |a| and sign(a) q, then
// vpmaddwd by ones: 4 products a channel each step, no pair sum past 2 127^2 = 32258, so nothing saturates;
// bf16: widened to float32 in registers). Compiled with -mavx2 -mfma whatever the build's -march
// (cmake/kernel_flags.cmake); called only when the processor has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "attnkit/ops/quantized.hpp"

namespace attnkit::ops::detail::lowp_avx2 {

namespace {

constexpr int64_t kRowChunk = 64;

// A block of 16 channels is two halves of 8 (32 bytes of the packed group each).
template <int R, int B>
void q8_tile(const int8_t* packed, int64_t k4, const int8_t* a, int64_t i0, int64_t b, int32_t* acc, int64_t n16) {
  __m256i c[R][B][2];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < B; ++j) c[r][j][0] = c[r][j][1] = _mm256_setzero_si256();
  const int64_t groups = k4 / 4;
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < groups; ++g) {
    __m256i w[B][2];
    for (int j = 0; j < B; ++j)
      for (int h = 0; h < 2; ++h)
        w[j][h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed + ((b + j) * groups + g) * 64 + h * 32));
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
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < B; ++j)
      for (int h = 0; h < 2; ++h)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc + (i0 + r) * n16 + (b + j) * 16 + h * 8), c[r][j][h]);
}

template <int R>
void q8_rows(const int8_t* packed, int64_t k4, const int8_t* a, int64_t i0, int64_t b0, int64_t b1, int32_t* acc,
             int64_t n16) {
  constexpr int B = R == 1 ? 4 : R == 2 ? 2 : 1;
  int64_t b = b0;
  for (; b + B <= b1; b += B) q8_tile<R, B>(packed, k4, a, i0, b, acc, n16);
  for (; b < b1; ++b) q8_tile<R, 1>(packed, k4, a, i0, b, acc, n16);
}

template <int R, int B>
void bf16_tile(const uint16_t* packed, int64_t k, int64_t n, const float* x, int64_t ldx, int64_t i0, int64_t b,
               float* y, int64_t ldy) {
  __m256 c[R][B][2];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < B; ++j) c[r][j][0] = c[r][j][1] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    __m256 w[B][2];
    for (int j = 0; j < B; ++j)
      for (int h = 0; h < 2; ++h) {
        const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + ((b + j) * k + kk) * 16 + h * 8));
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

template <int R>
void bf16_rows(const uint16_t* packed, int64_t k, int64_t n, const float* x, int64_t ldx, int64_t i0, int64_t b0,
               int64_t b1, float* y, int64_t ldy) {
  constexpr int B = R == 1 ? 4 : R == 2 ? 2 : 1;
  int64_t b = b0;
  for (; b + B <= b1; b += B) bf16_tile<R, B>(packed, k, n, x, ldx, i0, b, y, ldy);
  for (; b < b1; ++b) bf16_tile<R, 1>(packed, k, n, x, ldx, i0, b, y, ldy);
}

}  // namespace

void q8_blocks(const int8_t* packed, const int32_t*, int64_t k4, const int8_t* a, int64_t m, int64_t b0, int64_t b1,
               int32_t* acc, int64_t n16) {
  // Rows in chunks whose activations stay in L2, blocks in groups whose weights stay in L1 / L2 while every
  // row of the chunk passes over them (one row, decoding: the weights stream once).
  const int64_t group = std::max<int64_t>(4, 32768 / (16 * k4) / 4 * 4);
  for (int64_t c0 = 0; c0 < m; c0 += kRowChunk) {
    const int64_t c1 = std::min(m, c0 + kRowChunk);
    for (int64_t g = b0; g < b1; g += group) {
      const int64_t g1 = std::min(b1, g + group);
      int64_t i = c0;
      for (; i + 3 <= c1; i += 3) q8_rows<3>(packed, k4, a, i, g, g1, acc, n16);
      switch (c1 - i) {
        case 2: q8_rows<2>(packed, k4, a, i, g, g1, acc, n16); break;
        case 1: q8_rows<1>(packed, k4, a, i, g, g1, acc, n16); break;
        default: break;
      }
    }
  }
}

void bf16_blocks(const uint16_t* packed, int64_t k, int64_t n, const float* x, int64_t m, int64_t ldx, int64_t b0,
                 int64_t b1, float* y, int64_t ldy) {
  // Rows in chunks whose activations stay in L2, blocks in groups whose weights stay in L1 / L2 while every
  // row of the chunk passes over them (one row, decoding: the weights stream once).
  const int64_t group = std::max<int64_t>(4, 32768 / (32 * k) / 4 * 4);
  for (int64_t c0 = 0; c0 < m; c0 += kRowChunk) {
    const int64_t c1 = std::min(m, c0 + kRowChunk);
    for (int64_t g = b0; g < b1; g += group) {
      const int64_t g1 = std::min(b1, g + group);
      int64_t i = c0;
      for (; i + 3 <= c1; i += 3) bf16_rows<3>(packed, k, n, x, ldx, i, g, g1, y, ldy);
      switch (c1 - i) {
        case 2: bf16_rows<2>(packed, k, n, x, ldx, i, g, g1, y, ldy); break;
        case 1: bf16_rows<1>(packed, k, n, x, ldx, i, g, g1, y, ldy); break;
        default: break;
      }
    }
  }
}

}  // namespace attnkit::ops::detail::lowp_avx2
