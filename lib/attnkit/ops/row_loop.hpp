// Internal (include from ops/*.cpp only): the row loop the row-wise kernels share (softmax and
// log-softmax backward, layer norm, cross-entropy). Rows are split over num_threads() threads
// (tensor/threads.hpp, the one thread policy) once the work is worth a team; small inputs run on
// the calling thread, and so does a call made from inside a parallel region.
// `body(r)` must neither allocate nor throw: it runs inside an OpenMP region (allocate before).
#pragma once
#include <cstdint>

namespace attnkit::ops::detail {

// Below this many elements a team costs more than it saves: these row loops are memory-bound, and
// on cores shared with other work a second thread mostly waits to be scheduled.
// The team is kept for big exp-bound rows (a vocabulary-sized cross-entropy), behind a high
// threshold.
constexpr int64_t kParallelMinWork = int64_t{1} << 18;

// Threads for `rows` rows of `cols` elements each: min(num_threads(), rows) above the
// threshold, else 1 (also inside a parallel region). Defined in row_loop.cpp.
int row_team(int64_t rows, int64_t cols);

template <typename Body>
void for_rows(int64_t rows, int64_t cols, Body&& body) {
#ifdef _OPENMP
  const int team = row_team(rows, cols);
#pragma omp parallel for num_threads(team) schedule(static) if (team > 1)
  for (int64_t r = 0; r < rows; ++r) body(r);
#else
  for (int64_t r = 0; r < rows; ++r) body(r);
#endif
}

// The sum of f(0) .. f(n-1) in an order fixed by n alone, never by where the data lie: 8 interleaved
// partial sums (vectorised by the compiler), then a fixed tree. Eigen's .sum() on a Map starts its packets
// at the first aligned address, so its last bits depended on the heap, and a resumed training run drifted
// from an uninterrupted one (tests/cli/lib/misalign.cpp shows it).
// fixed_sum's last step: its 8 partial sums by a fixed tree, then the tail.
inline float fixed_tree(const float (&acc)[8], float tail) {
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

template <typename F>
inline float fixed_sum(int64_t n, F&& f) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += f(i + k);
  float tail = 0.0f;
  for (; i < n; ++i) tail += f(i);
  return fixed_tree(acc, tail);
}

// fixed_sum of f(x_q[i], q) for R rows x_q = x + q * ldx at once, into out[q]: fixed_sum's order, its 8 partial
// sums one 8-lane vector a row, the R rows in lockstep so that their chains of dependent additions overlap (one
// row alone waits on each addition's latency). Equal bits for any R need f compiled without contraction (a
// c * c + acc may be fused in one instantiation and not in another): layer_norm.cpp is.
template <int R, typename F>
inline void fixed_sums(int64_t n, int64_t ldx, const float* x, F&& f, float* out) {
  typedef float v8 __attribute__((vector_size(32)));
  v8 acc[R];
  for (int q = 0; q < R; ++q) acc[q] = v8{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int q = 0; q < R; ++q) {
      v8 v;
      for (int k = 0; k < 8; ++k) v[k] = f(x[q * ldx + i + k], q);
      acc[q] += v;
    }
  for (int q = 0; q < R; ++q) {
    float tail = 0.0f;
    for (int64_t j = i; j < n; ++j) tail += f(x[q * ldx + j], q);
    float lanes[8];
    for (int k = 0; k < 8; ++k) lanes[k] = acc[q][k];
    out[q] = fixed_tree(lanes, tail);
  }
}

}  // namespace attnkit::ops::detail
