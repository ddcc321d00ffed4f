// Thread count for Eigen's GEMMs and attnkit's OpenMP loops.
#pragma once

namespace attnkit {

// n >= 1 threads; 0 means one per core.
void set_num_threads(int n);
int num_threads();

}  // namespace attnkit
