// Loading a module's parameters from a bundle of named tensors (a PyTorch state_dict exported as
// JSON: {k: v.tolist() for k, v in m.state_dict().items()}), shared by the layers of nn/.
#pragma once
#include <string>
#include <string_view>

#include "attnkit/io/value.hpp"
#include "attnkit/nn/parameter.hpp"

namespace attnkit::nn {

// "prefix.name", or "name" when the prefix is empty: how a layer inside a bigger model names its
// parameters (PyTorch's "encoder.norm1.weight").
std::string qualified(const std::string& prefix, const char* name);

// Every parameter of `m` from `bundle`, by its name (io::find_tensor: also nested "a.b" as a/b),
// checked for presence and shape before any is changed, so a refused bundle leaves the module as
// it was. Loaded parameters are touch()ed. Extra tensors in the bundle are left alone (a bundle
// may hold a whole model). Messages name the module (`what`), the parameter and both shapes:
//   "linear: weight has shape [3, 5], expected [4, 5]"
void load_parameters(Module& m, const io::Value& bundle, std::string_view what);

}  // namespace attnkit::nn
