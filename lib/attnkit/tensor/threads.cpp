#include "attnkit/tensor/threads.hpp"

#include <Eigen/Core>
#include <omp.h>
#include <thread>

namespace attnkit {

void set_num_threads(int n) {
  if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int num_threads() { return Eigen::nbThreads(); }

}  // namespace attnkit
