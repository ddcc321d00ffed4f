// The tool side of attention (what attn-score computes): the references of a request in, a bundle
// out. The score form gives {scores, weights, context}; the multi-head forms (nn.MultiheadAttention
// weights, or split heads without projections) {output, weights?}; with a gradient of the output,
// also "grad": the inputs' and the weights' gradients. The layers (nn/attention.hpp,
// ops/attention.hpp) know nothing of references or bundles of results; the tool stays thin by
// calling this. Legend: N batch, T queries, S keys, NH heads.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "attnkit/io/reference.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::app {

// References (PATH[#NAME], read through io::Sources; messages name them) and the form asked for.
// query [T, D] or [N, T, D], keys/values [S, D] or [N, S, D]; a query [N, D] with keys [N, S, D] is
// one query per batch element (the T axis dropped from every result, and expected so in the output
// gradient and a [N, S] mask). `self` replaces query, keys and values (the multi-head forms).
struct ScoreRequest {
  std::string query, keys, values, self;
  std::string score = "scaled-dot";  // dot, scaled-dot, general, additive (the score form)
  std::string weights;               // score weights (general, additive) or nn.MultiheadAttention's
  std::string mask;                  // "", causal, causal-lower-right, or a 0/1 tensor's reference
  std::string key_lengths;           // valid keys per batch element [N]
  std::string grad_output;           // d loss / d output: a tensor, or a bundle holding output/context
  int64_t heads = 0;                 // NH > 0: multi-head attention
  bool split_heads = false;          // multi-head without projections
  bool need_weights = false;         // multi-head: add the weights averaged over heads [.., T, S]
  bool per_head = false;             // multi-head: add the weights per head [.., NH, T, S]
  bool heatmap = false;              // the weights are wanted for a heatmap (ScoreResult::shown_weights)
  // The multi-head forms (heads, split_heads or self); else the score form.
  bool multi_head() const { return heads > 0 || split_heads || !self.empty(); }
};

// Where the inputs come from: tensors by reference (a NaN refused unless allow_nan), and the two the
// tool reads by its own rules: the weights bundle of the current record (read per record: with
// NDJSON on standard input, -#NAME may differ from record to record) and the mask tensor.
struct ScoreInputs {
  io::Sources& sources;
  bool allow_nan = false;
  std::function<const io::Value&()> weights;
  std::function<Tensor()> mask;
};

struct ScoreResult {
  io::Value result;
  Tensor shown_weights;  // the weights as a heatmap draws them (per head unbatched: [1, NH, T, S])
};

// One record of the request; throws attnkit::Error naming the inputs for bad input.
ScoreResult run_score(const ScoreRequest& request, ScoreInputs& from);

}  // namespace attnkit::app
