// Recurrent layers: stacked, optionally bidirectional RNN / LSTM / GRU over padded batches, with
// weights in PyTorch's state_dict layout or the documents' (CS231n) layout (docs/lstm-run.md).
//
// Legend: N batch, T time steps, D input size, H hidden size, L layers, dirs 1 or 2, G gates.
//
// The weights are Parameters (the one source of truth: name, value, grad, version), one per
// PyTorch state_dict tensor, listed by named_parameters() in state_dict order. The kernels run on a
// derived internal layout: W_ih^T [D_k, G*H] and W_hh^T [H, G*H] with the columns in ops' blocked
// order, one bias row folding b_ih + b_hh (GRU keeps b_hn apart), and W_hh packed for the GEMM
// micro-kernel per team size. The derived copies are rebuilt when a parameter's version changes
// (Parameter::touch() after changing its value): a forward never runs on stale weights.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/ops/recurrent.hpp"
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

struct RecurrentConfig {
  CellKind cell = CellKind::Lstm;
  int64_t input_size = 0;   // D
  int64_t hidden_size = 0;  // H
  int layers = 1;           // L
  bool bidirectional = false;
  int directions() const { return bidirectional ? 2 : 1; }
};

// One layer and direction in PyTorch's layout (the constructor's input).
struct DirectionWeights {
  Tensor w_ih;  // [G*H, D_k]   D_0 = D, D_k = dirs*H for k > 0
  Tensor w_hh;  // [G*H, H]
  Tensor b_ih;  // [G*H]
  Tensor b_hh;  // [G*H]
};

// Threads: the library's policy, attnkit::num_threads() (tensor/threads.hpp), decides.
struct RunOptions {
  bool trace = false;       // keep the first layer's per-step values (RecurrentResult::trace)
  bool keep_cache = false;  // keep every layer's RecurrentCache (for a backward pass)
  // A time loop uses a second thread only with this many multiply-adds a step per thread; tests
  // set 1 to exercise the threaded loop. Forward: from 2^14 on, a team pays (N = 1, H = 128: a step
  // of 2^16 is bound by streaming W_hh from L2, and two cores stream it from two L2s; the steps meet
  // without a barrier, StepClaims in tensor/barrier.hpp); steps of 2^14..2^18 use the team only
  // for T >= 8 and not right after a team run that lost time to a descheduled thread (the next such
  // calls of the process run on one thread: same bits). Backward: its loop meets at a barrier a
  // step (about a microsecond) and keeps 2^18.
  int64_t min_macs_per_thread = int64_t(1) << 14;
  int64_t min_macs_per_thread_backward = int64_t(1) << 18;
};

struct RecurrentInputs {
  const Tensor* x = nullptr;           // [N, T, D]
  const Tensor* h0 = nullptr;          // [L*dirs, N, H] or nullptr (zeros)
  const Tensor* c0 = nullptr;          // LSTM: [L*dirs, N, H] or nullptr (zeros)
  const std::vector<int64_t>* lengths = nullptr;  // [N], 0 <= length <= T, or nullptr (all T)
};

struct RecurrentResult {
  Tensor output;  // [N, T, dirs*H] the last layer's h at every step (zero past a sequence's length)
  Tensor h_n;     // [L*dirs, N, H] the state at each sequence's last real step
  Tensor c_n;     // [L*dirs, N, H] LSTM only
  // Index layer*dirs + dir. With keep_cache every layer; with only trace, the first layer's.
  std::vector<ops::RecurrentCache> caches;
  // With keep_cache: the input of layer k (k >= 1) at index k-1, [N, T, dirs*H] (backward needs it).
  std::vector<Tensor> layer_inputs;
};

// Upstream gradients for backward, each shaped like the result it belongs to; nullptr: zero.
struct RecurrentGradOutputs {
  const Tensor* output = nullptr;  // [N, T, dirs*H] (entries at padded steps are ignored: those outputs are constant 0)
  const Tensor* h_n = nullptr;     // [L*dirs, N, H]
  const Tensor* c_n = nullptr;     // [L*dirs, N, H] LSTM
};

// Where backward ADDS the input gradients; nullptr: not wanted. Shapes as the inputs.
struct RecurrentGradInputs {
  Tensor* x = nullptr;   // [N, T, D]
  Tensor* h0 = nullptr;  // [L*dirs, N, H]
  Tensor* c0 = nullptr;  // [L*dirs, N, H] LSTM
};

class Recurrent : public Module {
 public:
  // From a bundle of named weight tensors. Throws attnkit::Error naming each missing or misshapen
  // weight with its shape and the expected one.
  static Recurrent from_bundle(const io::Value& bundle, CellKind cell, WeightLayout layout);
  // PyTorch's initialisation: every weight and bias U(-1/sqrt(H), 1/sqrt(H)), drawn in state_dict order.
  static Recurrent random(const RecurrentConfig& config, Rng& rng);
  // Checks every tensor's shape (biases included: a bias-free model passes zeros) and throws
  // attnkit::Error naming the first that is wrong.
  explicit Recurrent(RecurrentConfig config, std::vector<DirectionWeights> weights);
  Recurrent(const Recurrent& other);  // copies the parameters; the derived copies are rebuilt
  Recurrent& operator=(const Recurrent& other);
  Recurrent(Recurrent&&) noexcept;
  Recurrent& operator=(Recurrent&&) noexcept;
  ~Recurrent() override;

  const RecurrentConfig& config() const { return config_; }

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

  // The weights as a bundle in either layout (cs231n folds b_hh into b).
  io::Value to_bundle(WeightLayout layout) const;
  // The parameters' gradients named and laid out as to_bundle names and lays out the weights
  // (cs231n: d Wx, d Wh, d b in the cs231n gate order; zeros where no backward ran).
  io::Value grad_bundle(WeightLayout layout) const;

  // Runs the stack over x [N, T, D]. Throws attnkit::Error on shapes that disagree. Several
  // threads may run one model at once (as long as nobody changes its parameters meanwhile).
  RecurrentResult forward(const RecurrentInputs& inputs, const RunOptions& options = {}) const;
  // The backward of forward(inputs, keep_cache = true), which gave `result`: adds d loss / d x, h0
  // and c0 into `grads` and d loss / d (every weight) into each Parameter's grad (grad_buffer()).
  // Packed-sequence semantics: a padded step carried the state and output a constant zero.
  // Threads as forward (num_threads(); options.min_macs_per_thread_backward); the other options are unused.
  void backward(const RecurrentInputs& inputs, const RecurrentResult& result, const RecurrentGradOutputs& dy,
                const RecurrentGradInputs& grads, const RunOptions& options = {});

  struct Packed {  // internal layout (see the top of this file)
    Tensor wx;    // [D_k, G*H] blocked columns
    Tensor wh;    // [H, G*H] blocked columns
    Tensor bias;  // [G*H] blocked: b_ih + b_hh (GRU's n part: b_in only)
    Tensor b_hn;  // [H] GRU
    bool wh_finite = false;  // every W_hh value finite: a zero h_prev then makes h_prev W_hh exactly +0
  };
  struct Derived;  // recurrent_packed.hpp: the packed copies, their versions, the per-team packs

 private:
  // The derived layout of direction `index`, rebuilt first if a parameter's version moved.
  const Packed& packed(int index) const;
  void check_parameters() const;
  io::Value layout_bundle(WeightLayout layout, bool grads) const;

  RecurrentConfig config_;
  std::vector<DirectionParams> params_;
  std::unique_ptr<Derived> derived_;  // never null (except in a moved-from model)
};

}  // namespace attnkit::nn
