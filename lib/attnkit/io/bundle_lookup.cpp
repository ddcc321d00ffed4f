#include "attnkit/io/bundle_lookup.hpp"

#include <cmath>

#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

const Tensor* find_tensor(const Value& bundle, const std::string& name, std::string_view what) {
  const Value* v = bundle.find(name);
  if (!v) {
    const size_t dot = name.find('.');
    if (dot != std::string::npos) {
      const Value* outer = bundle.find(name.substr(0, dot));
      if (outer && outer->is_bundle()) v = outer->find(name.substr(dot + 1));
    }
  }
  if (!v) return nullptr;
  if (v->is_bundle()) fail("{}: {} is a bundle, not a tensor", what, name);
  AK_CHECK(v->is_tensor(), "{}: {} is not a tensor: {}", what, name, v->why());
  return &v->tensor();
}

std::vector<int64_t> lengths_from(const Tensor& t, int64_t count, int64_t max, std::string_view what) {
  AK_CHECK(t.rank() <= 1 && t.numel() == count, "{} has shape {}, expected [{}] (one length per sequence{})", what,
           t.shape_str(), count, count == 1 ? ", or a single number" : "");
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t n = 0; n < count; ++n) {
    const float v = t[n];
    // finite and whole before the cast (a cast of infinity or 1e30 to int64_t is undefined)
    AK_CHECK(std::isfinite(v) && v == std::floor(v), "{}[{}] is {}, expected a whole number", what, n, v);
    AK_CHECK(v >= 0 && v <= static_cast<float>(max), "{}[{}] is {}, expected 0 <= length <= {}", what, n, v, max);
    out[static_cast<size_t>(n)] = static_cast<int64_t>(v);
  }
  return out;
}

}  // namespace attnkit::io
