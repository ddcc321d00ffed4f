#include "attnkit/ops/row_loop.hpp"

#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops::detail {

int row_team(int64_t rows, int64_t cols) { return attnkit::detail::team_for(rows, double(rows) * double(cols), double(kParallelMinWork)); }

}  // namespace attnkit::ops::detail
