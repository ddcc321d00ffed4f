// io::fit_status_line: a progress line fitted to the terminal's width (seq2seq-train's, via
// train::progress_line): the bar shrinks first, then fields go from the last, then the bar, then the cut.
#include <doctest/doctest.h>

#include "attnkit/io/status_line.hpp"
#include "attnkit/train/report.hpp"

using attnkit::io::fit_status_line;

TEST_CASE("status line: fitted to 40, 50, 80 and 200 columns") {
  const std::vector<std::string> fields = {"loss 0.2500", "500 tok/s", "ETA 0:02"};
  const std::string full = "step 500/1000 [##########..........]  50%  loss 0.2500  500 tok/s  ETA 0:02";
  CHECK(fit_status_line("step 500/1000", 0.5, fields, 0) == full);
  CHECK(fit_status_line("step 500/1000", 0.5, fields, 200) == full);
  CHECK(fit_status_line("step 500/1000", 0.5, fields, 80) == full);  // 73 columns
  // 50: no bar of 5 to 20 cells leaves room for every field: the last two go, and the bar takes what is left
  CHECK(fit_status_line("step 500/1000", 0.5, fields, 50) == "step 500/1000 [#######........]  50%  loss 0.2500");
  CHECK(fit_status_line("step 500/1000", 0.5, fields, 40) == "step 500/1000 [##...]  50%  loss 0.2500");
  for (int width : {40, 50, 80, 200}) CHECK(fit_status_line("step 500/1000", 0.5, fields, width).size() < static_cast<size_t>(width));
  // narrower than anything but the head: no bar, then the line is cut
  CHECK(fit_status_line("step 500/1000", 0.5, fields, 20) == "step 500/1000  50%");
  CHECK(fit_status_line("step 500/1000", 0.5, fields, 10) == "step 500/");
  attnkit::train::Progress p;
  p.step = 5, p.steps = 10, p.loss = 0.25, p.tokens = 1000, p.seconds = 2;
  for (int width : {40, 50, 80, 200}) CHECK(attnkit::train::progress_line(p, width).size() < static_cast<size_t>(width));
  CHECK(attnkit::train::progress_line(p, 50) == "step 5/10 [####....]  50%  loss 0.2500  500 tok/s");
}
