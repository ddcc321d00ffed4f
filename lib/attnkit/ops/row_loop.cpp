#include "attnkit/ops/row_loop.hpp"

#include <algorithm>

#include <omp.h>

#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops::detail {

int row_team(int64_t rows, int64_t cols) {
  if (rows < 2 || rows * cols < kParallelMinWork || omp_in_parallel()) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), rows)));
}

}  // namespace attnkit::ops::detail
