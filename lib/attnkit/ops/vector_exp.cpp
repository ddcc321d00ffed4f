#include "attnkit/ops/vector_exp.hpp"

// The W-float vectors pass between this file's own internal functions only: the portable build's
// note that their ABI differs without AVX does not concern any caller.
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // _mm512_max_ps / _mm512_min_ps, GCC 12 false positive
#pragma GCC diagnostic ignored "-Wuninitialized"       // the same

#include <algorithm>
#include <cstring>
#include <limits>

#ifdef __AVX__
#include <immintrin.h>
#endif

namespace attnkit::ops::detail {
namespace {

// W floats in one vector (GCC's vector extensions): 16 with AVX-512 (one zmm register), else 8 (one AVX
// register, two SSE ones in the portable build).
#ifdef __AVX512F__
constexpr int W = 16;
#else
constexpr int W = 8;
#endif
typedef float vf __attribute__((vector_size(4 * W)));
typedef int32_t vi __attribute__((vector_size(4 * W)));
typedef uint32_t vu __attribute__((vector_size(4 * W)));  // bit arithmetic that wraps (NaN's bits)

vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }

// Lane-wise max (vmaxps; any NaN lane gives b's value).
inline vf vmax(vf a, vf b) {
#ifdef __AVX512F__
  return (vf)_mm512_max_ps((__m512)a, (__m512)b);
#elif defined(__AVX__)
  return (vf)_mm256_max_ps((__m256)a, (__m256)b);
#else
  return a > b ? a : b;
#endif
}

// max(lo, t) and min(hi, t) that pass NaN through (t's own value): one vmaxps / vminps with AVX, whose
// second operand is returned when either is NaN; GCC keeps a compare and a blend for the generic form.
inline vf clamp_low(vf t, float lo) { return vmax(vf{} + lo, t); }
inline vf clamp_high(vf t, float hi) {
#ifdef __AVX512F__
  return (vf)_mm512_min_ps(_mm512_set1_ps(hi), (__m512)t);
#elif defined(__AVX__)
  return (vf)_mm256_min_ps(_mm256_set1_ps(hi), (__m256)t);
#else
  return t > hi ? hi : t;
#endif
}

// exp(t) for W values: t = n ln2 + r (|r| <= ln2/2, Cody-Waite), exp(r) = 1 + r + r^2 P(r) with P of
// degree 4 (minimax for relative error: 0.06 ulp from exp), times 2^n. n + 127 is clamped at 0: for n <= -127
// (t below about -87.68, -inf included) the result is 0; 2^-126 (n = -126) is the smallest normal float, and
// p * 2^-126 rounds correctly into the subnormals. t is clamped first to [-100, 88] (n in [-145, 127]); NaN
// passes both clamps and stays NaN. With AVX-512 only to 88: vscalefps's mask zeroes every n <= -127, -inf's
// (whose r is NaN) included, so the low clamp would change no result and only cost time.
// With AVX-512: P by Horner's rule and p = 1 + r (1 + r P), the fewest operations (the loops' independent
// iterations hide the chain), and 2^n by one vscalefps (zeroed where
// n <= -127). Else P by Estrin's scheme (with AVX2, Horner's chain leaves the loop waiting on latency), p = (r^2 P + r) + 1 (without FMA the other form rounds to 1.12 ulp),
// and 2^n made from n's bits (vscalefps gives these bits for the same p).
inline vf expv(vf t) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: t log2e + it rounds to an integer in the low bits
#ifdef __AVX512F__
  t = clamp_high(t, 88.0f);
#else
  t = clamp_high(clamp_low(t, -100.0f), 88.0f);
#endif
  const vf z = t * kLog2e + kShifter;
  const vf n = z - kShifter;
  vf r = t - n * kLn2Hi;
  r = r - n * kLn2Lo;
  constexpr float c2 = 4.9999994040e-1f, c3 = 1.6666521132e-1f, c4 = 4.1668388993e-2f, c5 = 8.3687100559e-3f,
                  c6 = 1.3814617414e-3f;
#ifdef __AVX512F__
  // FMAs spelled out: 1 + r (1 + r P) is within 1.1 ulp only fused (GCC fuses a * b + c from -O2; the
  // sanitizer build's -O1 rounded it to 1.12 ulp)
  const __m512 x = (__m512)r, one = _mm512_set1_ps(1.0f);
  __m512 P = _mm512_fmadd_ps(x, _mm512_set1_ps(c6), _mm512_set1_ps(c5));
  P = _mm512_fmadd_ps(P, x, _mm512_set1_ps(c4));
  P = _mm512_fmadd_ps(P, x, _mm512_set1_ps(c3));
  P = _mm512_fmadd_ps(P, x, _mm512_set1_ps(c2));
  const __m512 p = _mm512_fmadd_ps(_mm512_fmadd_ps(P, x, one), x, one);
  const __mmask16 normal = _mm512_cmp_ps_mask((__m512)n, _mm512_set1_ps(-127.0f), _CMP_NLE_UQ);  // or NaN
  return (vf)_mm512_maskz_scalef_ps(normal, p, (__m512)n);
#else
  const vf r2 = r * r;
  const vf P = (r * c3 + c2) + r2 * ((r * c5 + c4) + r2 * c6);
  const vf p = (r2 * P + r) + 1.0f;
  vi bits;
  std::memcpy(&bits, &z, sizeof bits);
  // z's bits minus kShifter's (0x4B400000) are n, for |n| < 2^22; NaN's bits wrap (unsigned), harmlessly
  vi biased = (vi)(((vu)bits - 0x4B400000u) + 127u);
  biased = biased > 0 ? biased : 0;  // vpmaxsd
  const vu scale_bits = (vu)biased << 23;
  vf scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  return p * scale;
#endif
}

// The W lanes' sum by a fixed tree: 16 lanes first halved to 8 (a[j] + a[j + 8]), then the 8-lane tree
// ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)).
inline float lanes_sum(vf acc) {
  float a[W];
  std::memcpy(a, &acc, sizeof a);
  if constexpr (W == 16)
    for (int j = 0; j < 8; ++j) a[j] += a[j + 8];
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

}  // namespace

float exp_shifted_sum(float* x, int64_t n, float shift) {
  vf acc = {};
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const vf y = expv(load(x + i) - shift);
    store(x + i, y);
    acc += y;
  }
  if (i < n) {  // the tail through the same W-wide code: its bits are the full blocks' bits
    float tail[W];
    const int64_t k = n - i;
    for (int j = 0; j < W; ++j) tail[j] = j < k ? x[i + j] : -std::numeric_limits<float>::infinity();
    const vf y = expv(load(tail) - shift);
    store(tail, y);
    for (int64_t j = 0; j < k; ++j) x[i + j] = tail[j];
    acc += y;  // the padding's exp(-inf) is 0
  }
  return lanes_sum(acc);
}

float row_max(const float* x, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  vf m[4];
  for (vf& v : m) v = vf{} + kNegInf;
  int64_t i = 0;
  for (; i + 4 * W <= n; i += 4 * W)
    for (int a = 0; a < 4; ++a) m[a] = vmax(m[a], load(x + i + a * W));
  for (; i + W <= n; i += W) m[0] = vmax(m[0], load(x + i));
  float r = kNegInf;
  for (; i < n; ++i) r = std::max(r, x[i]);
  float lanes[W];
  store(lanes, vmax(vmax(m[0], m[1]), vmax(m[2], m[3])));
  for (float v : lanes) r = std::max(r, v);
  return r;
}

void rescale_factors(const float* old_max, const float* new_max, float* alpha, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; i += W) {  // the tail through W-wide buffers: n is a tile's few rows
    float a[W], b[W];
    const int64_t k = std::min<int64_t>(W, n - i);
    for (int j = 0; j < W; ++j) a[j] = j < k ? old_max[i + j] : 0.0f, b[j] = j < k ? new_max[i + j] : 0.0f;
    float y[W];
    store(y, expv(load(a) - load(b)));
    for (int64_t j = 0; j < k; ++j) alpha[i + j] = b[j] == kNegInf ? 1.0f : y[j];
  }
}

}  // namespace attnkit::ops::detail
