// Selecting parts of tensors, as numpy does (docs/tensor.md, get --index; cat; stack).
//   index(t, "-1")        t[-1]: the last entry of axis 0, that axis dropped
//   index(t, "0,:,2:5")   t[0, :, 2:5]; "::-1" reverses, "1:-1:2" steps; axes not named stay whole
//   concatenate({a, b}, 1) numpy.concatenate along an existing axis; stack({a, b}, 0) along a new one
#pragma once
#include <string>
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit {

// numpy basic indexing from text: integers (negative from the end) drop their axis, slices
// START:STOP[:STEP] (each may be empty; negative from the end; STEP not 0) keep it.
Tensor index(const Tensor& t, const std::string& spec);
// numpy.concatenate / numpy.stack (axis may be negative); `names` label the inputs in messages.
Tensor concatenate(const std::vector<Tensor>& parts, int axis, const std::vector<std::string>& names = {});
Tensor stack(const std::vector<Tensor>& parts, int axis, const std::vector<std::string>& names = {});

}  // namespace attnkit
