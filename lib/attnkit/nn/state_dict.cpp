#include "attnkit/nn/state_dict.hpp"

#include <vector>

#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

std::string qualified(const std::string& prefix, const char* name) {
  return prefix.empty() ? std::string(name) : prefix + "." + name;
}

void load_parameters(Module& m, const io::Value& bundle, std::string_view what) {
  const std::vector<Parameter*> params = m.named_parameters();
  std::vector<const Tensor*> found;
  for (const Parameter* p : params) {  // check everything first: all or nothing
    const Tensor* t = io::find_tensor(bundle, p->name, what);
    AK_CHECK(t != nullptr, "{}: {} is missing from the bundle (expected shape {})", what, p->name,
             p->value.shape_str());
    AK_CHECK(t->shape() == p->value.shape(), "{}: {} has shape {}, expected {}", what, p->name, t->shape_str(),
             p->value.shape_str());
    found.push_back(t);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    params[i]->value = *found[i];
    params[i]->touch();
  }
}

}  // namespace attnkit::nn
