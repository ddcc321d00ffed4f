// The tool side of the recurrent layer (what lstm-run computes): a request of tensors in, a bundle
// out, with the documents' per-step trace. The layer (nn/recurrent.hpp) knows nothing of bundles
// of results, traces or unbatched inputs; tools stay thin by calling this.
// Legend: N batch, T steps, D input size, H hidden size, G gates, dirs 1 or 2.
#pragma once
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
// -> {output, h_n, c_n (LSTM), trace (+ trace_reverse) with `trace`}. Threads: num_threads().
struct SequenceRequest {
  Tensor x;
  const Tensor* h0 = nullptr;
  const Tensor* c0 = nullptr;
  const Tensor* lengths = nullptr;
  bool trace = false;
  nn::WeightLayout layout = nn::WeightLayout::Torch;  // the gate order of the trace's `a`
};
io::Value run_sequence(const nn::Recurrent& model, const SequenceRequest& request);

}  // namespace attnkit::app
