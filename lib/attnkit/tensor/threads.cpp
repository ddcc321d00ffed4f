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

int team_for(int64_t tasks, double work, double min_work) {
  if (tasks < 2 || work < min_work || omp_in_parallel()) return 1;
  return static_cast<int>(std::min<int64_t>(num_threads(), tasks));
}

}  // namespace attnkit
