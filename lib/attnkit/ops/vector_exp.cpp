#include "attnkit/ops/vector_exp.hpp"

// The 8-float vectors pass between this file's own internal functions only: the portable build's
// note that their ABI differs without AVX does not concern any caller.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <cstring>
#include <limits>

#ifdef __AVX__
#include <immintrin.h>
#endif

namespace attnkit::ops::detail {
namespace {

// 8 floats: one AVX register, two SSE ones in the portable build (GCC's vector extensions).
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));  // bit arithmetic that wraps (NaN's bits)

v8f load(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// max(lo, t) and min(hi, t) that pass NaN through (t's own value): one vmaxps / vminps with AVX, whose
// second operand is returned when either is NaN; GCC keeps a compare and a blend for the generic form.
inline v8f clamp_low(v8f t, float lo) {
#ifdef __AVX__
  return (v8f)_mm256_max_ps(_mm256_set1_ps(lo), (__m256)t);
#else
  return t < lo ? lo : t;
#endif
}
inline v8f clamp_high(v8f t, float hi) {
#ifdef __AVX__
  return (v8f)_mm256_min_ps(_mm256_set1_ps(hi), (__m256)t);
#else
  return t > hi ? hi : t;
#endif
}

// exp(t) for 8 values: t = n ln2 + r (|r| <= ln2/2, Cody-Waite), exp(r) by Cephes' degree-6 polynomial,
// times 2^n made from n's bits. n + 127 is clamped at 0: for n <= -127 (t below about -87.68, -inf
// included) the scale is 0 and so is the result; 2^-126 (n = -126) is the smallest normal float, and
// p * 2^-126 rounds correctly into the subnormals. t is clamped first to [-100, 88] (n in [-145, 127],
// the bit arithmetic's range); NaN passes both clamps and stays NaN (NaN times the scale).
inline v8f exp8(v8f t) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: t log2e + it rounds to an integer in the low bits
  t = clamp_high(clamp_low(t, -100.0f), 88.0f);
  const v8f z = t * kLog2e + kShifter;
  const v8f n = z - kShifter;
  v8f r = t - n * kLn2Hi;
  r = r - n * kLn2Lo;
  // exp(r) = 1 + r + r^2 P(r), P of degree 5 by Estrin's scheme: three short chains, not one of five FMAs
  // (with Horner's chain the loop waited on latency: 13.8 TSC cycles per 8 floats against 10.2-10.6)
  const v8f r2 = r * r, r4 = r2 * r2;
  const v8f c01 = r * 1.6666665459e-1f + 5.0000001201e-1f;   // p5 + p4 r
  const v8f c23 = r * 8.3334519073e-3f + 4.1665795894e-2f;   // p3 + p2 r
  const v8f c45 = r * 1.9875691500e-4f + 1.3981999507e-3f;   // p1 + p0 r
  const v8f P = r4 * c45 + (r2 * c23 + c01);
  const v8f p = (r2 * P + r) + 1.0f;
  v8i bits;
  std::memcpy(&bits, &z, sizeof bits);
  // z's bits minus kShifter's (0x4B400000) are n, for |n| < 2^22; NaN's bits wrap (unsigned), harmlessly
  v8i biased = (v8i)(((v8u)bits - 0x4B400000u) + 127u);
  biased = biased > 0 ? biased : 0;  // vpmaxsd
  const v8u scale_bits = (v8u)biased << 23;
  v8f scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return p * scale;
}

}  // namespace

float exp_shifted_sum(float* x, int64_t n, float shift) {
  v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const v8f y = exp8(load(x + i) - shift);
    store(x + i, y);
    acc += y;
  }
  if (i < n) {  // the tail through the same 8-wide code: its bits are the full blocks' bits
    float tail[8];
    const int64_t k = n - i;
    for (int j = 0; j < 8; ++j) tail[j] = j < k ? x[i + j] : -std::numeric_limits<float>::infinity();
    const v8f y = exp8(load(tail) - shift);
    store(tail, y);
    for (int64_t j = 0; j < k; ++j) x[i + j] = tail[j];
    acc += y;  // the padding's exp(-inf) is 0
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace attnkit::ops::detail
