// A check weight loaders share (docs/hardening.md): a bundle of weights holds no tensor the
// loader does not use. (NaN in weights: tools::refuse_nan_weights, the rule of every input.)
#pragma once
#include <set>
#include <string>
#include <string_view>

#include "attnkit/io/value.hpp"

namespace attnkit::io {

// Throws attnkit::Error for a tensor member of `bundle` (nested members as "outer.inner") that is
// not in `used`: a typo or a weight of another model must not be ignored silently. Members that
// are not tensors (metadata such as {"cell": "lstm"}) are allowed. With a prefix, only the tensors whose
// name starts with it are judged (the bundle may hold a whole model: "encoder.layers.0.self_attn.").
void check_no_extra_weights(const Value& bundle, const std::set<std::string>& used, std::string_view op,
                            std::string_view prefix = "");

}  // namespace attnkit::io
