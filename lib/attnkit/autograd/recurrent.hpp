// Autograd wrapper of the recurrent layer (nn/recurrent.hpp): the fused forward over the whole
// sequence, then one tape node whose backward is Recurrent::backward.
// Legend: N batch, T steps, D input size, H hidden size, L layers, dirs 1 or 2.
//
//   nn::Recurrent lstm = nn::Recurrent::random(config, rng);
//   Var x(input, /*requires_grad=*/true);
//   auto r = autograd::recurrent(lstm, x);                 // r.output [N, T, dirs*H]
//   autograd::backward(autograd::sum(r.output));           // x.grad(), lstm's Parameters' grads
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/nn/recurrent.hpp"

namespace attnkit::autograd {

struct RecurrentVars {
  Var output;  // [N, T, dirs*H] (zero at padded steps)
  Var h_n;     // [L*dirs, N, H]
  Var c_n;     // [L*dirs, N, H] LSTM; undefined otherwise
};

// Runs `layer` on x [N, T, D] with optional h0, c0 [L*dirs, N, H] (undefined Vars: zeros) and
// lengths (nullptr: every sequence is T long; copied). When recording, the layer's parameters are
// inputs of the node (so a frozen input still trains the weights): backward adds d loss / d W into
// each Parameter's grad and d loss / d x, h0, c0 into theirs. `layer` must outlive the backward
// pass and keep its parameters unchanged until then. Under NoGrad nothing is kept for backward.
RecurrentVars recurrent(nn::Recurrent& layer, const Var& x, const Var& h0 = {}, const Var& c0 = {},
                        const std::vector<int64_t>* lengths = nullptr);

}  // namespace attnkit::autograd
