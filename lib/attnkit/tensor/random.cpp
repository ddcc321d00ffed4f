#include "attnkit/tensor/random.hpp"

#include <cmath>

namespace attnkit {

Rng::Rng(uint64_t seed, uint64_t stream) {
  inc_ = (stream << 1u) | 1u;
  next_u32();
  state_ += seed;
  next_u32();
}

uint32_t Rng::next_u32() {
  uint64_t old = state_;
  state_ = old * 6364136223846793005ULL + inc_;
  auto xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
  auto rot = static_cast<uint32_t>(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

double Rng::uniform_double() {
  uint64_t hi = next_u32() >> 5;  // 27 bits
  uint64_t lo = next_u32() >> 6;  // 26 bits
  return static_cast<double>((hi << 26) | lo) * 0x1.0p-53;
}

float Rng::uniform() { return static_cast<float>(next_u32() >> 8) * 0x1.0p-24f; }

float Rng::uniform(float lo, float hi) {
  const float u = uniform();
  float x = lo + (hi - lo) * u;
  if (!std::isfinite(hi - lo))  // a range past float32 (-2e38, 2e38): the same formula in double
    x = static_cast<float>(static_cast<double>(lo) + (static_cast<double>(hi) - lo) * static_cast<double>(u));
  // rounding may reach hi; the draw stays in [lo, hi)
  return x < hi || !(lo < hi) ? x : std::nextafter(hi, lo);
}

float Rng::normal() {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  double u1 = uniform_double();
  double u2 = uniform_double();
  return static_cast<float>(std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(kTwoPi * u2));
}

Tensor rand_uniform(const Shape& shape, Rng& rng, float lo, float hi) {
  Tensor t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = rng.uniform(lo, hi);
  return t;
}

Tensor rand_normal(const Shape& shape, Rng& rng, float mean, float stddev) {
  Tensor t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = mean + stddev * rng.normal();
  return t;
}

}  // namespace attnkit
