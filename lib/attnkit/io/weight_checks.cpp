#include "attnkit/io/weight_checks.hpp"

#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

namespace {
void collect_extra(const Value& bundle, const std::string& prefix, const std::set<std::string>& used,
                   std::vector<std::string>& extra) {
  for (const auto& [name, value] : bundle.members()) {
    std::string full = prefix.empty() ? name : prefix + "." + name;
    if (value.is_bundle()) collect_extra(value, full, used, extra);
    else if (value.is_tensor() && !used.count(full)) extra.push_back(full);
  }
}
}  // namespace

void check_no_extra_weights(const Value& bundle, const std::set<std::string>& used, std::string_view op) {
  std::vector<std::string> extra;
  collect_extra(bundle, "", used, extra);
  if (extra.empty()) return;
  fail("{}: unexpected weight{} {} (these weights use: {})", op, extra.size() > 1 ? "s" : "", fmt::join(extra, ", "),
       fmt::join(used, ", "));
}

}  // namespace attnkit::io
