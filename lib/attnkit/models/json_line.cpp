#include "attnkit/models/json_line.hpp"

#include <set>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnkit::models {

std::string repeated_key(std::string_view json_text) {
  std::vector<std::set<std::string>> open;  // the keys seen so far in each object being read
  std::string repeated;
  const auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) open.emplace_back();
    else if (event == E::object_end && !open.empty()) open.pop_back();
    else if (event == E::key && !open.empty() && repeated.empty() && !open.back().insert(parsed.get<std::string>()).second)
      repeated = parsed.get<std::string>();
    return true;
  };
  const nlohmann::json parsed = nlohmann::json::parse(json_text.begin(), json_text.end(), callback, false);
  (void)parsed;
  return repeated;
}

}  // namespace attnkit::models
