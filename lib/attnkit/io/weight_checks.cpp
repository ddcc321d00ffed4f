#include "attnkit/io/weight_checks.hpp"

#include "attnkit/tensor/error.hpp"

namespace attnkit::io {

namespace {
void collect_extra(const Value& bundle, const std::string& outer, const std::set<std::string>& used,
                   std::string_view prefix, std::vector<std::string>& extra) {
  for (const auto& [name, value] : bundle.members()) {
    std::string full = outer.empty() ? name : outer + "." + name;
    if (value.is_bundle()) collect_extra(value, full, used, prefix, extra);
    else if (value.is_tensor() && !used.count(full) && full.compare(0, prefix.size(), prefix) == 0)
      extra.push_back(full);
  }
}
}  // namespace

void check_no_extra_weights(const Value& bundle, const std::set<std::string>& used, std::string_view op,
                            std::string_view prefix) {
  std::vector<std::string> extra;
  collect_extra(bundle, "", used, prefix, extra);
  if (extra.empty()) return;
  fail("{}: unexpected weight{} {} (these weights use: {})", op, extra.size() > 1 ? "s" : "", fmt::join(extra, ", "),
       fmt::join(used, ", "));
}

}  // namespace attnkit::io
