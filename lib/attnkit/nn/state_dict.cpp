#include "attnkit/nn/state_dict.hpp"

#include <map>
#include <set>
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

namespace {

// The tensors of a bundle under their names joined by '.', depth first.
void collect_tensors(const io::Value& bundle, const std::string& outer,
                     std::vector<std::pair<std::string, const Tensor*>>& out) {
  for (const auto& [name, value] : bundle.members()) {
    const std::string full = outer.empty() ? name : outer + "." + name;
    if (value.is_bundle()) collect_tensors(value, full, out);
    else if (value.is_tensor()) out.emplace_back(full, &value.tensor());
  }
}

// "a, b, c" for the first few names, "and N more" after them.
std::string name_list(const std::vector<std::string>& names) {
  constexpr size_t kShown = 6;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShown) out += fmt::format(" and {} more", names.size() - kShown);
  return out;
}

}  // namespace

void load_state_dict(Module& m, const io::Value& state, const std::string& prefix) {
  constexpr std::string_view what = "load_state_dict";
  AK_CHECK(state.is_bundle(), "{}: the state is not a bundle of named tensors{}", what,
           state.is_tensor() ? " (a single tensor)" : ": " + state.why());
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  collect_tensors(state, "", tensors);
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [n, tensor] : tensors)
    AK_CHECK(by_name.emplace(n, tensor).second, "{}: the state names {} twice (nested and flat)", what, n);
  const std::vector<Parameter*> params = m.named_parameters();
  std::set<std::string> wanted;
  std::vector<std::string> missing;
  std::vector<const Tensor*> found;
  for (const Parameter* p : params) {  // check everything first: all or nothing
    const std::string name = prefix + p->name;
    AK_CHECK(wanted.insert(name).second, "{}: two parameters of the module are named {} (give its layers prefixes)",
             what, name);
    const auto it = by_name.find(name);
    const Tensor* t = it == by_name.end() ? nullptr : it->second;
    if (t == nullptr) {
      missing.push_back(fmt::format("{} {}", name, p->value.shape_str()));
      continue;
    }
    AK_CHECK(t->shape() == p->value.shape(), "{}: {} has shape {}, expected {}", what, name, t->shape_str(),
             p->value.shape_str());
    found.push_back(t);
  }
  AK_CHECK(missing.empty(), "{}: missing {} tensor{} (name and expected shape): {}", what, missing.size(),
           missing.size() > 1 ? "s" : "", name_list(missing));
  std::vector<std::string> unexpected;
  for (const auto& [n, tensor] : tensors)
    if (n.compare(0, prefix.size(), prefix) == 0 && !wanted.count(n)) unexpected.push_back(n);
  AK_CHECK(unexpected.empty(), "{}: {} unexpected tensor{}{}: {} (not a parameter of the module; its parameters: {})",
           what, unexpected.size(), unexpected.size() > 1 ? "s" : "",
           prefix.empty() ? "" : fmt::format(" under \"{}\"", prefix), name_list(unexpected),
           name_list(std::vector<std::string>(wanted.begin(), wanted.end())));
  for (size_t i = 0; i < params.size(); ++i) {
    params[i]->value = *found[i];
    params[i]->touch();
  }
}

io::Value state_dict(const Module& m, const std::string& prefix) {
  io::Value out;
  for (const Parameter* p : m.named_parameters()) {
    AK_CHECK(out.find(prefix + p->name) == nullptr, "state_dict: two parameters are named {}", prefix + p->name);
    out.set(prefix + p->name, p->value);
  }
  return out;
}

}  // namespace attnkit::nn
