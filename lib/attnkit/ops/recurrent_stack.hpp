// The recurrent stack: a stacked, optionally bidirectional RNN / LSTM / GRU over a padded batch, run as
// fused kernels over the whole sequence (the cells of ops/recurrent.hpp inside a time loop per layer and
// direction, the hidden products on W_hh packed once), forward beside its backward.
//
// Legend: N batch, T time steps, D input size, H hidden size, L layers, dirs 1 or 2, G gates.
//
// The kernels read the weights through a view (RecurrentWeights): per layer and direction the
// PyTorch-layout W_ih [G*H, D_k] and W_hh [G*H, H], and their derived layout (RecurrentPacked,
// ops/recurrent_packed.hpp): W_ih^T [D_k, G*H] and W_hh^T [H, G*H] with the columns in ops' blocked
// order, one bias row folding b_ih + b_hh (GRU keeps b_hn apart), and W_hh packed for the GEMM
// micro-kernel per team size. Whoever owns the weights (nn::Recurrent) builds the derived layout with
// pack_recurrent_direction and rebuilds it when a weight changes.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "attnkit/ops/lowp_weights.hpp"
#include "attnkit/ops/recurrent.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

struct RecurrentConfig {
  CellKind cell = CellKind::Lstm;
  int64_t input_size = 0;   // D
  int64_t hidden_size = 0;  // H
  int layers = 1;           // L
  bool bidirectional = false;
  int directions() const { return bidirectional ? 2 : 1; }
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
  std::vector<RecurrentCache> caches;
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

struct RecurrentPacked;  // ops/recurrent_packed.hpp: the derived layout of one layer and direction

// One layer and direction as the kernels read it (a view: the tensors belong to the weights' owner).
struct RecurrentDirection {
  const Tensor* w_ih = nullptr;  // [G*H, D_k]   D_0 = D, D_k = dirs*H for k > 0 (backward: d x)
  const Tensor* w_hh = nullptr;  // [G*H, H] (backward: d h_prev)
  std::shared_ptr<const RecurrentPacked> packed;  // built from these weights and their biases
  // Inference in lower precision (make_recurrent_lowp), or null: float32. When set, x W_ih^T (all the steps at
  // once) and h_prev W_hh^T (a step) are ops::lowp_linear products of these copies; the biases, the gates'
  // nonlinearities and the cell state stay float32 (packed's bias rows and b_hn). Forward only: a forward that
  // keeps a cache for backward, and backward, refuse them.
  std::shared_ptr<const LowpWeights> lowp_ih;  // W_ih [G*H, D_k], rows in blocked order
  std::shared_ptr<const LowpWeights> lowp_hh;  // W_hh [G*H, H], rows in blocked order
};

// w [G*H, K] in PyTorch's layout (gate-major rows) in `precision` (Int8 or Bf16), its rows in the blocked
// column order of ops/recurrent.hpp (row blocked_column(u, g) = w[g*H + u]), so that a product lands in the
// layout the cells read. Per output channel: each row keeps its own int8 scale (the same rows as PyTorch's
// layout, reordered). `what` names the weight in messages (a NaN or infinity is refused).
LowpWeights make_recurrent_lowp(CellKind cell, int64_t H, const Tensor& w, Precision precision,
                                std::string_view what);
// The same layout from a copy stored in PyTorch's row order [G*H, K] (a quantized checkpoint): its rows reordered.
LowpWeights recurrent_lowp_from_stored(CellKind cell, int64_t H, const LowpWeights& stored, std::string_view what);

// The whole stack: directions[layer*dirs + dir].
struct RecurrentWeights {
  RecurrentConfig config;
  std::vector<RecurrentDirection> directions;
};

// Where backward ADDS one layer and direction's weight gradients (each shaped as its weight; one of
// another shape, e.g. an empty Parameter::grad, is first made zeros of that shape).
struct RecurrentWeightGrads {
  Tensor* w_ih = nullptr;  // [G*H, D_k]
  Tensor* w_hh = nullptr;  // [G*H, H]
  Tensor* b_ih = nullptr;  // [G*H]
  Tensor* b_hh = nullptr;  // [G*H]
};

// Runs the stack over inputs.x [N, T, D]. Throws attnkit::Error on shapes that disagree. Several
// threads may run one set of weights at once.
RecurrentResult recurrent_stack_forward(const RecurrentWeights& weights, const RecurrentInputs& inputs,
                                        const RunOptions& options = {});

// The backward of recurrent_stack_forward(weights, inputs, keep_cache = true), which gave `result`:
// adds d loss / d x, h0 and c0 into `grads` and d loss / d (the weights of direction i) into
// weight_grads[i] (one per direction, every pointer set).
// Packed-sequence semantics: a padded step carried the state and output a constant zero.
// Threads as forward (num_threads(); options.min_macs_per_thread_backward); the other options are unused.
void recurrent_stack_backward(const RecurrentWeights& weights, const RecurrentInputs& inputs,
                              const RecurrentResult& result, const RecurrentGradOutputs& dy,
                              const RecurrentGradInputs& grads, const std::vector<RecurrentWeightGrads>& weight_grads,
                              const RunOptions& options = {});

}  // namespace attnkit::ops
