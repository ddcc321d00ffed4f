// Recurrent layers: stacked, optionally bidirectional RNN / LSTM / GRU over padded batches, with
// weights in PyTorch's state_dict layout or the documents' (CS231n) layout (docs/lstm-run.md).
//
// Legend: N batch, T time steps, D input size, H hidden size, L layers, dirs 1 or 2, G gates.
//
// The module: its weights are Parameters (the one source of truth: name, value, grad, version), one per
// PyTorch state_dict tensor, listed by named_parameters() in state_dict order. The kernels (the
// recurrent stack, ops/recurrent_stack.hpp: its config, options, inputs and results) run on a derived
// layout of each layer and direction (ops/recurrent_packed.hpp), which the module keeps in a DerivedSlot
// and rebuilds when a parameter changed (Parameter::touch() after changing its value): a forward never
// runs on stale weights.
#pragma once
#include <string>
#include <vector>

#include "attnkit/autograd/recurrent.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/ops/recurrent_stack.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::nn {

using ops::CellKind;

// torch:  weight_ih_l{k}[_reverse] [G*H, D_k], weight_hh_l{k} [G*H, H], bias_ih_l{k} [G*H],
//         bias_hh_l{k} [G*H]; LSTM gates i, f, g, o; GRU r, z, n. Biases optional (bias=False).
// cs231n: Wx [D, G*H], Wh [H, G*H], b [G*H] for layer 0; Wx_l{k}, Wh_l{k}, b_l{k} deeper;
//         *_reverse for the backward direction; LSTM gates i, f, o, g. RNN and LSTM only.
enum class WeightLayout { Torch, Cs231n };
const char* layout_name(WeightLayout layout);
// The cs231n column block of PyTorch gate `torch_gate` (LSTM i, f, g, o -> i, f, o, g; else itself).
int cs231n_gate(CellKind cell, int torch_gate);

// One layer and direction in PyTorch's layout (the constructor's input).
struct DirectionWeights {
  Tensor w_ih;  // [G*H, D_k]   D_0 = D, D_k = dirs*H for k > 0
  Tensor w_hh;  // [G*H, H]
  Tensor b_ih;  // [G*H]
  Tensor b_hh;  // [G*H]
};

class Recurrent : public Module {
 public:
  // From a bundle of named weight tensors. Throws attnkit::Error naming each missing or misshapen
  // weight with its shape and the expected one.
  static Recurrent from_bundle(const io::Value& bundle, CellKind cell, WeightLayout layout);
  // PyTorch's initialisation: every weight and bias U(-1/sqrt(H), 1/sqrt(H)), drawn in state_dict order.
  static Recurrent random(const ops::RecurrentConfig& config, Rng& rng);
  // Zeros in PyTorch's shapes, to be filled by load_state_dict (nn/state_dict.hpp).
  explicit Recurrent(const ops::RecurrentConfig& config);
  // Checks every tensor's shape (biases included: a bias-free model passes zeros) and throws
  // attnkit::Error naming the first that is wrong.
  explicit Recurrent(ops::RecurrentConfig config, std::vector<DirectionWeights> weights);
  // A copy copies the parameters (its derived layout is rebuilt on first use).

  const ops::RecurrentConfig& config() const { return config_; }

  // One layer and direction's parameters (index layer*dirs + dir), named as in PyTorch's
  // state_dict: weight_ih_l{k}[_reverse], weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}.
  struct DirectionParams {
    Parameter w_ih;  // [G*H, D_k]
    Parameter w_hh;  // [G*H, H]
    Parameter b_ih;  // [G*H]
    Parameter b_hh;  // [G*H]
  };
  const DirectionParams& direction(int index) const { return params_.at(size_t(index)); }
  DirectionParams& direction(int index) { return params_.at(size_t(index)); }
  int direction_count() const { return static_cast<int>(params_.size()); }
  // All of them in state_dict order (layer, then direction, then w_ih, w_hh, b_ih, b_hh).
  std::vector<Parameter*> named_parameters() override;
  using Module::named_parameters;

  // The weights in either layout (cs231n folds b_hh into b).
  io::Value to_bundle(WeightLayout layout) const;
  // The parameters' gradients named and laid out as to_bundle names and lays out the weights
  // (cs231n: d Wx, d Wh, d b in the cs231n gate order; zeros where no backward ran).
  io::Value grad_bundle(WeightLayout layout) const;

  // The weights as the kernels read them: views of the parameters' values and their derived layout
  // (rebuilt first where a parameter changed). Valid while the model lives and its parameters stay.
  ops::RecurrentWeights weights() const;

  // Inference in lower precision: every W_ih and W_hh in the plan's precision for its parameter name (int8 or
  // bfloat16 copies, made now from the current values and remade after they change), or float32 (the default).
  // The biases, the gates and the cell state stay float32. With a copy set, a recorded forward (under the tape)
  // and backward are refused.
  void set_precision(PrecisionPlan& plan);
  bool lowered() const;  // some W_ih or W_hh is held in lower precision

  // Runs the stack over x [N, T, D] (ops::recurrent_stack_forward). Throws attnkit::Error on shapes
  // that disagree. Several threads may run one model at once (as long as nobody changes its
  // parameters meanwhile).
  ops::RecurrentResult forward(const ops::RecurrentInputs& inputs, const ops::RunOptions& options = {}) const;
  // The backward of forward(inputs, keep_cache = true), which gave `result`: adds d loss / d x, h0
  // and c0 into `grads` and d loss / d (every weight) into each Parameter's grad (grad_buffer()).
  void backward(const ops::RecurrentInputs& inputs, const ops::RecurrentResult& result,
                const ops::RecurrentGradOutputs& dy, const ops::RecurrentGradInputs& grads,
                const ops::RunOptions& options = {});
  // The same on Vars, recorded on the tape (autograd::recurrent): x [N, T, D], h0 and c0
  // [L*dirs, N, H] (undefined: zeros), lengths (nullptr: every sequence is T long). The model must
  // outlive the backward pass and keep its parameters unchanged until then.
  autograd::RecurrentVars forward(const autograd::Var& x, const autograd::Var& h0 = {}, const autograd::Var& c0 = {},
                                  const std::vector<int64_t>* lengths = nullptr);

 private:
  void check_parameters() const;
  io::Value layout_bundle(WeightLayout layout, bool grads) const;

  ops::RecurrentConfig config_;
  std::vector<DirectionParams> params_;
  std::vector<DerivedSlot<ops::RecurrentPacked>> packed_;  // per layer*dirs + dir
  // per layer*dirs + dir: the precision of W_ih and W_hh, and their copies in it (ops::make_recurrent_lowp)
  std::vector<ops::Precision> precision_ih_, precision_hh_;
  std::vector<DerivedSlot<ops::LowpWeights>> lowp_ih_, lowp_hh_;
};

}  // namespace attnkit::nn
