// compare-arch, part 2: the layer types of arch/analytic.hpp built from the library's autograd ops,
// one interface: x [B, n, d] -> y [B, n, d]. The same code runs timed under autograd::NoGrad
// (arch/measure.hpp), and recorded for the gradient path and the learning experiment.
//
// Initialisation is PyTorch's default for each piece: convolution weight and bias
// U(-1/sqrt(d k), 1/sqrt(d k)); RNN/LSTM U(-1/sqrt(d), 1/sqrt(d)); Linear U(-1/sqrt(d), 1/sqrt(d)).
// All are causal except the attention layers (the paper's encoder self-attention sees both sides; the
// restricted one a centred window of r keys).
#pragma once
#include <memory>
#include <vector>

#include "attnkit/arch/analytic.hpp"
#include "attnkit/autograd/var.hpp"
#include "attnkit/tensor/parameter.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::arch {

class SequenceLayer {
 public:
  virtual ~SequenceLayer() = default;
  // x [B, n, d] -> [B, n, d]. Recorded unless under NoGrad; the layer must outlive the backward pass.
  virtual autograd::Var forward(const autograd::Var& x) = 0;
  virtual std::vector<Parameter*> parameters() = 0;
};

// A layer of type `layer` for model size s.d (s.k, s.r and, for the stack's depth, s.n as well).
std::unique_ptr<SequenceLayer> make_layer(Layer layer, const Sizes& s, Rng& rng);

}  // namespace attnkit::arch
