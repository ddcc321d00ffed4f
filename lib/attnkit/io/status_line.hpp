// A one-line status display (a progress bar redrawn in place with '\r') fitted to a terminal's width.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::io {

// "HEAD [#####...............]  25%  FIELD  FIELD" in at most width - 1 columns (a line as wide as the
// terminal wraps on some, and every redraw then scrolls a new line); width <= 0: no limit. `frac` (0..1)
// fills the bar, 20 cells wide. What does not fit: the bar shrinks first (to 5 cells), then fields are
// dropped from the last, then the bar goes, then the line is cut. ASCII only (one byte, one column).
std::string fit_status_line(std::string_view head, double frac, const std::vector<std::string>& fields, int width);

}  // namespace attnkit::io
