// Loading the attention score's inputs from bundles and tensors (one floor above ops/, which
// loads nothing): the general / additive score weights by name, and key lengths.
// Legend: N batch, S keys, Dq / Dk feature sizes, A additive size.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/ops/attention_scores.hpp"

namespace attnkit::nn {

// Score weights from a bundle: general W [Dq, Dk]; additive W_q [Dq, A], W_k [Dk, A], v [A] and
// optional b [A] (nested names are found too, through io::find_tensor). Other score kinds need
// none (an empty ScoreWeights). `op` prefixes messages, which name the bundle's members.
ops::ScoreWeights score_weights_from_bundle(const io::Value& bundle, ops::ScoreKind kind, std::string_view op);

// Key lengths from a tensor of whole numbers: [N], or a scalar / [1] for unbatched input
// (io::lengths_from). The bound against S is check_mask's ("outside [0, S]").
std::vector<int64_t> key_lengths_from(const Tensor& lengths, int64_t N, std::string_view op);

}  // namespace attnkit::nn
