// compare-arch, part 6: one report of the analytic table, the measurements, the gradient paths and
// the learning runs, written as JSON, as an aligned text table, or drawn as an SVG figure.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "attnkit/arch/analytic.hpp"
#include "attnkit/arch/gradient_path.hpp"
#include "attnkit/arch/learn.hpp"
#include "attnkit/arch/measure.hpp"

namespace attnkit::arch {

// Where the numbers were taken: the same figures mean little without the machine and its load.
struct MachineInfo {
  std::string cpu;           // model name from /proc/cpuinfo ("" when unknown)
  int cores = 0;             // online processors
  double load_before = -1;   // 1-minute load average when the run started (-1: unknown)
  double load_after = -1;    // and when it ended
};
MachineInfo machine_info();       // load_before filled
double load_average();            // 1-minute, from /proc/loadavg; -1 when unknown

struct Report {
  Sizes sizes;
  uint64_t seed = 0;
  MachineInfo machine;
  std::vector<AnalyticRow> analytic;
  std::optional<Measurement> measured;
  MeasureOptions measure_options;  // what `measured` was run with (repeats, threads)
  std::vector<GradientCurve> gradient;
  Sizes gradient_sizes;
  std::vector<LearnResult> learned;
  LearnOptions learn_options;
};

std::string report_json(const Report& r, bool pretty);
std::string report_table(const Report& r);
// The table's cells: bytes in the largest unit that holds them (B, KiB, MiB, GiB, TiB, PiB, EiB: "7.0 MiB",
// "6.94 EiB"); GFLOP to four significant digits, never in exponent notation ("1.611", "0.0001200").
std::string human_bytes(double bytes);
std::string gflop_text(double gflop);
// Panels: time against n (log-log; solid 1 thread, dashed the most threads; whiskers min..max),
// gradient norm against distance (log y), accuracy against n; only those the report has.
// Throws attnkit::Error when it has none of them.
std::string report_svg(const Report& r);

}  // namespace attnkit::arch
