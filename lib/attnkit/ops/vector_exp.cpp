#include "attnkit/ops/vector_exp.hpp"

#include <cstring>
#include <limits>

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

// exp(t) for 8 values: t clamped to [kLow, kHigh] (NaN passes), t = n ln2 + r, exp(r) by Cephes'
// polynomial, times 2^n (exponent bits n + 127); below kLow exactly 0.
inline v8f exp8(v8f t) {
  constexpr float kLow = -87.33f, kHigh = 88.0f;  // n in [-126, 127]: 2^n a normal float
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kShifter = 12582912.0f;  // 1.5 * 2^23: t log2e + it rounds to an integer in the low bits
  const v8i below = t < kLow;
  t = t < kLow ? kLow : t;
  t = t > kHigh ? kHigh : t;
  const v8f z = t * kLog2e + kShifter;
  const v8f n = z - kShifter;
  v8f r = t - n * kLn2Hi;
  r = r - n * kLn2Lo;
  v8f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  v8u bits;
  std::memcpy(&bits, &z, sizeof bits);
  const v8u scale_bits = ((bits - 0x4B400000u) + 127u) << 23;  // 0x4B400000: kShifter's bits; the difference is n
  v8f scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const v8f y = p * scale;
  v8u ybits;
  std::memcpy(&ybits, &y, sizeof ybits);
  ybits &= ~(v8u)below;  // a vector cast reinterprets the bits
  v8f out;
  std::memcpy(&out, &ybits, sizeof out);
  return out;
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
