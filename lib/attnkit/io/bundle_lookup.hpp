// The two look-ups every loader shares: a weight in a bundle by its state_dict name, and integer
// lengths from a tensor. Messages name the tensor (and `what`), never a command-line flag.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnkit/io/value.hpp"

namespace attnkit::io {

// The tensor `name` in `bundle`, also found nested ("out_proj.weight" as the member out_proj/weight);
// nullptr when absent. A member that is there but is not a tensor is refused with the reason
// ("<what>: out_proj.weight is not a tensor: a string (line 1, column 9)"), not reported missing.
const Tensor* find_tensor(const Value& bundle, const std::string& name, std::string_view what);

// Integer lengths from a tensor of `count` values (shape [count], or a scalar when count is 1),
// each a whole number in [0, max]; `what` names the tensor in messages ("lengths", "key lengths").
std::vector<int64_t> lengths_from(const Tensor& t, int64_t count, int64_t max, std::string_view what);

}  // namespace attnkit::io
