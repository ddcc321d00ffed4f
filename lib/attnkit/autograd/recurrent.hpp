// Autograd wrapper of the recurrent stack (ops/recurrent_stack.hpp): the fused forward over the whole
// sequence, then one tape node whose backward is ops::recurrent_stack_backward.
// Legend: N batch, T steps, D input size, H hidden size, L layers, dirs 1 or 2.
//
//   nn::Recurrent lstm = nn::Recurrent::random(config, rng);   // the module (nn/recurrent.hpp)
//   Var x(input, /*requires_grad=*/true);
//   auto r = lstm.forward(x);                                  // r.output [N, T, dirs*H]
//   autograd::backward(autograd::sum(r.output));               // x.grad(), lstm's Parameters' grads
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/ops/recurrent_stack.hpp"
#include "attnkit/tensor/parameter.hpp"

namespace attnkit::autograd {

struct RecurrentVars {
  Var output;  // [N, T, dirs*H] (zero at padded steps)
  Var h_n;     // [L*dirs, N, H]
  Var c_n;     // [L*dirs, N, H] LSTM; undefined otherwise
};

// Runs the stack `weights` on x [N, T, D] with optional h0, c0 [L*dirs, N, H] (undefined Vars: zeros)
// and lengths (nullptr: every sequence is T long; copied). `params` are the weights' parameters in
// state_dict order, four per direction (layer*dirs + dir): w_ih, w_hh, b_ih, b_hh, whose values the
// view's w_ih and w_hh are. When recording, they are inputs of the node (so a frozen input still
// trains the weights): backward adds d loss / d W into each Parameter's grad and d loss / d x, h0, c0
// into theirs. The parameters and the tensors the view points to must outlive the backward pass and
// stay unchanged until then. Under NoGrad nothing is kept for backward.
RecurrentVars recurrent(const ops::RecurrentWeights& weights, const std::vector<Parameter*>& params, const Var& x,
                        const Var& h0 = {}, const Var& c0 = {}, const std::vector<int64_t>* lengths = nullptr);

}  // namespace attnkit::autograd
