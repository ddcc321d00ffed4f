// The tool side of the recurrent layer (what lstm-run computes): a request of tensors in, a bundle
// out, with the documents' per-step trace. The layer (nn/recurrent.hpp) knows nothing of bundles
// of results, traces or unbatched inputs; tools stay thin by calling this.
// Legend: N batch, T steps, D input size, H hidden size, G gates, dirs 1 or 2.
#pragma once
#include <string>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/nn/recurrent.hpp"

namespace attnkit::app {

// The documents' trace of one direction of the first layer, batch-first: a [N, T, G*H] in the
// layout's gate order; LSTM i, f, o, g, c, h; GRU r, z, n, h; RNN h — each [N, T, H]. Every value
// of a padded step (t >= lengths[n]) is zero.
io::Value trace_bundle(const ops::RecurrentCache& cache, nn::CellKind cell, nn::WeightLayout layout,
                       const std::vector<int64_t>* lengths = nullptr);

// x [N, T, D] or [T, D] (then N is dropped from every shape in and out, h0 and c0 are [L*dirs, H])
// -> {output, h_n, c_n (LSTM), trace (+ trace_reverse) with `trace`, grad with `grad_output`}.
// Threads: num_threads().
//
// time_major: x is [T, N, D] (PyTorch's batch_first=False), and so are output, the trace, the
// gradient of output and grad/input; h0, c0, h_n, c_n and lengths are unchanged. Needs a 3-D x.
//
// Messages name the tensor's file with its role ("x.json: input has shape [2, 5, 6], expected
// [N, T, 3] ..."): `sources` holds the references (empty: the role alone).
//
// grad_output: upstream gradients, a tensor shaped like `output`, or a bundle with any of
// `output`, `h_n`, `c_n` (shaped like those results; an absent one is zero; any other member is
// refused). Then the result holds `grad`: d loss / d `input`, `h0` and `c0` (when given), and one
// entry per weight named and laid out as the weights (`layout`: torch state_dict names, or cs231n
// Wx, Wh, b with its gate order), for loss = sum(grad_output ⊙ results). The model's parameter
// grads are overwritten (zero_grad, then backward). Messages name `grad_output_source`.
struct SequenceRequest {
  Tensor x;
  const Tensor* h0 = nullptr;
  const Tensor* c0 = nullptr;
  const Tensor* lengths = nullptr;
  bool trace = false;
  nn::WeightLayout layout = nn::WeightLayout::Torch;  // the gate order of the trace's `a` and of grad
  const io::Value* grad_output = nullptr;
  std::string grad_output_source = "grad output";  // the file it came from, for messages
  bool time_major = false;
  struct Names {
    std::string x, h0, c0, lengths;
  } sources;  // where x, h0, c0 and lengths came from, for messages
};
io::Value run_sequence(nn::Recurrent& model, const SequenceRequest& request);

}  // namespace attnkit::app
