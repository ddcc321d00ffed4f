// Thread count for Eigen's GEMMs and attnkit's OpenMP loops.
#pragma once
#include <cstdint>

namespace attnkit {

// n >= 1 threads; 0 means one per core.
void set_num_threads(int n);
int num_threads();

// Below this many floating-point operations a team costs more than it saves: starting and joining one
// takes microseconds on a quiet machine, and on a loaded one the second thread may wait a scheduler
// quantum (milliseconds) to run. (Decoding one token of a 6+6-layer Transformer would fork a dozen tiny
// attention teams, each paying that.)
constexpr int64_t kMinParallelFlops = int64_t{1} << 21;

// The thread teams of the library's kernels (a detail: may change in any release, docs/library.md).
namespace detail {

// The team for `tasks` independent tasks of `work` in all: min(num_threads(), tasks), or 1 below `min_work`
// (floating-point operations by default; ops/row_loop counts row elements against its own bound) and inside a
// parallel region (OpenMP would not nest it anyway). The one place that decides whether a kernel forks.
int team_for(int64_t tasks, double work, double min_work = double(kMinParallelFlops));

// Guided shares for tasks taken from a shared counter: `units` of work, task b takes max(min_units,
// ceil(left / (2 team))) of the units left, so tasks shrink toward the end and a team finishes together
// whatever each thread's speed (with equal tasks one thread waits at a stage's end whenever the other
// runs a little slower). The split depends on the arguments alone.
// guided_start: the first unit of task b (b = guided_tasks(..): units).
int64_t guided_tasks(int64_t units, int team, int64_t min_units);
int64_t guided_start(int64_t units, int team, int64_t min_units, int64_t b);

}  // namespace detail

}  // namespace attnkit
