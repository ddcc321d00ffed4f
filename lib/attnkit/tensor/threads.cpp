#include "attnkit/tensor/threads.hpp"

#include <Eigen/Core>
#include <omp.h>
#include <algorithm>
#include <thread>

namespace attnkit {

void set_num_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int num_threads() { return Eigen::nbThreads(); }

namespace detail {

int team_for(int64_t tasks, double work, double min_work) {
  if (tasks < 2 || work < min_work || omp_in_parallel()) return 1;
  return static_cast<int>(std::min<int64_t>(num_threads(), tasks));
}

namespace {
int64_t guided_share(int64_t left, int team, int64_t min_units) {
  const int64_t share = (left + 2 * team - 1) / (2 * int64_t{team});
  return std::min(left, std::max(min_units, share));
}
}  // namespace

int64_t guided_tasks(int64_t units, int team, int64_t min_units) {
  int64_t tasks = 0;
  for (int64_t start = 0; start < units; ++tasks)
    start += guided_share(units - start, std::max(team, 1), std::max<int64_t>(min_units, 1));
  return tasks;
}

int64_t guided_start(int64_t units, int team, int64_t min_units, int64_t b) {
  int64_t start = 0;
  for (int64_t t = 0; t < b && start < units; ++t)
    start += guided_share(units - start, std::max(team, 1), std::max<int64_t>(min_units, 1));
  return start;
}

}  // namespace detail

}  // namespace attnkit
