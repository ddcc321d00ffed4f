// Portable, seeded random numbers: the same seed gives the same bits with any compiler and
// standard library (std::normal_distribution is implementation-defined, so we never use it).
//
//   engine   PCG32 (XSH-RR, 64-bit state, O'Neill 2014), seeded as pcg32_srandom(seed, 54)
//   uniform  u = (next_u32() >> 8) * 2^-24                  in [0, 1), 24 random bits = float32's mantissa
//   normal   Box-Muller in double: u1, u2 from 53 bits each; z = sqrt(-2 ln(1 - u1)) * cos(2 pi u2),
//            rounded to float32 (one draw uses two u32 pairs; the sine half is discarded for simplicity)
#pragma once
#include <cstdint>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit {

class Rng {
 public:
  explicit Rng(uint64_t seed, uint64_t stream = 54);
  uint32_t next_u32();
  double uniform_double();            // [0, 1), 53 bits
  float uniform();                    // [0, 1), 24 bits
  float uniform(float lo, float hi);  // lo + (hi - lo) * uniform(), in [lo, hi) (double when hi - lo overflows)
  float normal();                     // N(0, 1)

  // The engine's whole state (for checkpoints): set_state(state()) continues the same sequence.
  struct State {
    uint64_t state = 0, inc = 1;
  };
  State state() const { return {state_, inc_}; }
  void set_state(const State& s) {
    state_ = s.state;
    inc_ = s.inc | 1u;  // PCG's increment is odd
  }

 private:
  uint64_t state_ = 0;
  uint64_t inc_ = 0;
};

Tensor rand_uniform(const Shape& shape, Rng& rng, float lo = 0.0f, float hi = 1.0f);
Tensor rand_normal(const Shape& shape, Rng& rng, float mean = 0.0f, float stddev = 1.0f);

}  // namespace attnkit
