// compare-arch, part 3: the layers of arch/layers.hpp timed and weighed on this machine.
//
// Legend: n sequence length, d model size, B batch.
//
// Time: for each thread count and each n of the sweep, every layer is built (seeded), run once to
// warm up, then run `repeats` times under autograd::NoGrad, the layers interleaved round by round (a
// load spike on a shared machine hits all of them, not one); the median and the spread (min, max) of
// the forward's wall time are kept, GFLOP/s = layer_flops / median. The slope is the least-squares fit
// of log(median time) against log(n) over the sweep, per layer and thread count.
//
// Peak memory (Linux): the extra resident memory one forward needs, measured in this process:
// malloc_trim(0) returns the allocator's free pages to the system, "5" written to
// /proc/self/clear_refs resets the peak (VmHWM) to the current resident size (VmRSS), the forward
// runs, and peak = VmHWM - VmRSS before. The input and the weights exist before and are not counted;
// the output, the intermediates and the workspaces are. Resolution: one page; memory an earlier run
// left resident (a thread's stack, a GEMM's packing buffer kept for reuse) is not counted again.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/arch/analytic.hpp"

namespace attnkit::arch {

struct MeasureOptions {
  std::vector<int64_t> sweep{16, 64, 256, 1024, 4096};  // the n values
  std::vector<Layer> layers = all_layers();
  std::vector<int> threads{1};  // thread counts to time with (set_num_threads); the policy is restored after
  int repeats = 5;              // >= 1
  bool memory = true;           // also measure the peak memory (once per layer and n, with threads.back())
  uint64_t seed = 0;
  // Called before each (threads, n) group and each memory point with a short description ("n=256, 2
  // threads"), done and total in units of one layer run; may be empty.
  std::function<void(const std::string& what, int64_t done, int64_t total)> progress;
};

struct Timing {
  Layer layer;
  int64_t n = 0;
  int threads = 1;
  double flops = 0;
  std::vector<double> seconds;  // every repeat, in order
  double median = 0, min = 0, max = 0;
  double gflops_per_s = 0;  // flops / median / 1e9
};

struct MemoryPoint {
  Layer layer;
  int64_t n = 0;
  std::optional<double> peak_bytes;  // empty when the platform cannot measure it
  double analytic_bytes = 0;         // layer_activation_bytes
};

struct SlopeFit {
  Layer layer;
  int threads = 1;
  double slope = 0;      // d log(time) / d log(n)
  double intercept = 0;  // log(seconds) at n = 1
  double r2 = 0;         // coefficient of determination of the fit
};

struct Measurement {
  std::vector<Timing> timings;
  std::vector<MemoryPoint> memory;
  std::vector<SlopeFit> slopes;
  std::string memory_method;  // how peak memory was measured, or why it was not
};

// Sizes' d, k, r and batch are used; n comes from the sweep. Throws attnkit::Error on bad options.
Measurement measure(const Sizes& sizes, const MeasureOptions& options);

// Least-squares fit of log(y) against log(x) (x, y > 0, at least 2 distinct x).
SlopeFit fit_loglog(const std::vector<double>& x, const std::vector<double>& y);

// The most memory the measurement will hold at once: the largest input, weights and activation of
// any layer over the sweep, in bytes (for a refusal before any work starts).
double measure_memory_bound(const Sizes& sizes, const MeasureOptions& options);
// MemAvailable from /proc/meminfo in bytes, or the physical memory when that is unreadable; 0 when
// neither is known.
double available_memory_bytes();

// The peak-memory probe on its own: the extra resident bytes `run` needs (see the top of the file);
// empty when /proc/self/clear_refs cannot be written.
std::optional<double> peak_extra_bytes(const std::function<void()>& run);

}  // namespace attnkit::arch
