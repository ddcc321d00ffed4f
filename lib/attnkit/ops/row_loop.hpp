// Internal (include from ops/*.cpp only): the row loop the row-wise kernels share (softmax and
// log-softmax backward, layer norm, cross-entropy). Rows are split over num_threads() threads
// (tensor/threads.hpp, the one thread policy) once the work is worth a team; small inputs run on
// the calling thread, and so does a call made from inside a parallel region.
// `body(r)` must neither allocate nor throw: it runs inside an OpenMP region (allocate before).
#pragma once
#include <algorithm>
#include <cstdint>

#include <omp.h>

#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops::detail {

// Below this many elements a team costs more than it saves (see docs in the commit that set it).
constexpr int64_t kParallelMinWork = 1 << 15;

// Threads for `rows` rows of `cols` elements each.
inline int row_team(int64_t rows, int64_t cols) {
  if (rows < 2 || rows * cols < kParallelMinWork || omp_in_parallel()) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), rows)));
}

template <typename Body>
void for_rows(int64_t rows, int64_t cols, Body&& body) {
  const int team = row_team(rows, cols);
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
  for (int64_t r = 0; r < rows; ++r) body(r);
}

}  // namespace attnkit::ops::detail
