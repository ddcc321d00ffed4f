// Human-readable tensors, exactly as numpy prints float32 arrays (repr's np.array2string defaults:
// precision 8, floatmode 'maxprec', line width 75, summarised past 1000 elements with 3 edge items).
//   tensor([[-0.4       , -0.25454545],
//           [ 0.18181819,  1.2       ]], shape=[2, 2])
#pragma once
#include <string>

#include "attnkit/io/value.hpp"

namespace attnkit::io {

// numpy's body: "[[-0.4, ...]]" (no prefix); `indent` is the column the first '[' stands at.
std::string format_array(const Tensor& t, int indent = 0);
// "tensor(<body>, shape=[..])"; bundles as "name: tensor(...)" lines, nested names joined by '/'.
std::string pretty_print(const Value& v);

}  // namespace attnkit::io
