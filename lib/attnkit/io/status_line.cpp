#include "attnkit/io/status_line.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace attnkit::io {

std::string fit_status_line(std::string_view head, double frac, const std::vector<std::string>& fields, int width) {
  frac = std::clamp(frac, 0.0, 1.0);
  const std::string percent = fmt::format("{:3.0f}%", 100 * frac);
  // bar: cells of the bar, 0 for none
  auto compose = [&](int bar, size_t nfields) {
    std::string line(head);
    if (bar > 0) {
      const int filled = static_cast<int>(frac * bar);
      line += " [" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(bar - filled), '.') + "]";
    }
    line += " " + percent;
    for (size_t i = 0; i < nfields; ++i) line += "  " + fields[i];
    return line;
  };
  constexpr int kBar = 20, kShortestBar = 5;
  if (width <= 0) return compose(kBar, fields.size());
  const size_t room = static_cast<size_t>(width - 1);
  for (size_t n = fields.size() + 1; n-- > 0;)
    for (int bar = kBar; bar >= kShortestBar; --bar)
      if (std::string line = compose(bar, n); line.size() <= room) return line;
  std::string line = compose(0, 0);
  if (line.size() > room) line.resize(room);
  return line;
}

}  // namespace attnkit::io
