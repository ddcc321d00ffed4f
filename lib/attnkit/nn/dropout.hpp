// nn::Dropout (PyTorch's nn.Dropout, ops/dropout.hpp): inverted dropout in training mode, the
// identity in evaluation mode (eval()). No parameters. The mode, not autograd::NoGrad, decides,
// as in PyTorch: under NoGrad in training mode elements are still dropped.
// Randomness: the module owns an attnkit::Rng seeded at construction (the same seed gives the
// same masks with any compiler), or forward(x, rng) draws from the caller's.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::nn {

class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f, uint64_t seed = 0);  // p in [0, 1)

  float p() const { return p_; }
  bool training() const { return training_; }
  void train(bool on = true) { training_ = on; }
  void eval() { training_ = false; }

  autograd::Var forward(const autograd::Var& x);            // draws from the module's Rng
  autograd::Var forward(const autograd::Var& x, Rng& rng);  // draws from `rng`

  std::vector<Parameter*> named_parameters() override { return {}; }

 private:
  float p_;
  bool training_ = true;
  Rng rng_;
};

}  // namespace attnkit::nn
