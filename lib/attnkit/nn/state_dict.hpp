// Loading a module's parameters from a bundle of named tensors (a PyTorch state_dict exported as
// JSON: {k: v.tolist() for k, v in m.state_dict().items()}, or saved as .safetensors / .npz), shared by
// the layers of nn/, and writing them back.
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

// PyTorch's module.load_state_dict(strict=True) on the entries of `state` under `prefix`: each parameter
// of `m` is read from the tensor named prefix + its name ("encoder.layers.0." + "linear1.weight"; the
// prefix is prepended as given, so PyTorch's prefixes end with a dot). Refused, before any value changes
// (a refused state leaves `m` as it was), with attnkit::Error naming the tensors:
//   - a parameter with no tensor in `state` (missing), or whose tensor's shape differs (both shapes);
//   - a tensor of `state` whose name starts with `prefix` and is no parameter's (unexpected; with an
//     empty prefix every tensor of `state` must be a parameter's).
//   - two parameters of `m` of one name (layers built without prefixes).
// Tensors outside the prefix are left alone: `state` may hold a whole model. Nested bundles count as their
// names joined by '.' ({"linear1": {"weight": ..}} is "linear1.weight"). Loaded parameters are touch()ed.
void load_state_dict(Module& m, const io::Value& state, const std::string& prefix = "");

// The parameters of `m` (copies of their values) as a bundle, each under prefix + its name, in
// named_parameters() order: what io::write_value_file writes as .safetensors, .npz or JSON and
// load_state_dict reads back.
io::Value state_dict(const Module& m, const std::string& prefix = "");

}  // namespace attnkit::nn
