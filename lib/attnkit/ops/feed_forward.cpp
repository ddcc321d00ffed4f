// Legend: I in features, F hidden features, O out features.
#include "attnkit/ops/feed_forward.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>

#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/parallel_errors.hpp"
#include "attnkit/tensor/scratch_pool.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {

namespace {

GemmEpilogue epilogue(const LinearWeights& l, bool relu, const float* add) {  // + b, ReLU, + add [rows, O]
  GemmEpilogue e;
  e.bias = l.b;
  e.relu = relu;
  e.add = add, e.ldadd = l.out;
  return e;
}

// The product on this thread with W^T packed, nothing allocated or locked: the bits of linear_fused on any rows
// of a product of more than 4.
void linear_packed(const LinearWeights& l, const GemmPackedB& w, const float* x, int64_t rows, float* y, bool relu,
                   const float* add) {
  gemm_packed(Trans::No, rows, 1.0f, x, l.in, w, 0.0f, y, l.out, GemmThreads::This, epilogue(l, relu, add));
}

}  // namespace

void linear_fused(const LinearWeights& l, const float* x, int64_t rows, float* y, bool relu, const float* add) {
  if (l.lowp) {  // y = act(x W^T + b) + add, the product in lower precision
    lowp_linear(*l.lowp, x, rows, l.in, l.b, y, l.out);
    if (relu || add)
      for (int64_t i = 0; i < rows * l.out; ++i) {
        const float v = relu ? std::max(y[i], 0.0f) : y[i];
        y[i] = add ? add[i] + v : v;
      }
    return;
  }
  // y [rows, O] = x [rows, I] W^T, then the epilogue: with W^T packed once where that gives gemm's bits (which
  // would pack it on every call, in every thread)
  if (gemm_packed_matches(rows)) {
    const std::shared_ptr<const GemmPackedB> w = l.packed();
    gemm_packed(Trans::No, rows, 1.0f, x, l.in, *w, 0.0f, y, l.out, GemmThreads::Policy, epilogue(l, relu, add));
    return;
  }
  gemm(Trans::No, Trans::Yes, rows, l.out, l.in, 1.0f, x, l.in, l.W, l.in, 0.0f, y, l.out, GemmThreads::Policy,
       epilogue(l, relu, add));
}

void feed_forward(const LinearWeights& l1, const LinearWeights& l2, const float* x, int64_t rows, float* y,
                  const float* add) {
  const int64_t I = l1.in, F = l1.out, O = l2.out;
  AK_CHECK(l2.in == F, "feed_forward: linear1 [{}, {}] then linear2 [{}, {}] do not chain", F, I, O, l2.in);
  if (!gemm_packed_matches(rows) || l1.lowp || l2.lowp) {
    // linear_fused's own products through the hidden [rows, F]: up to 4 rows (no packed weights), no panel
    // kernel, or lower-precision weights
    const std::shared_ptr<float> h = ScratchPool::get(rows * F);  // [rows, F]
    linear_fused(l1, x, rows, h.get(), true, nullptr);
    linear_fused(l2, h.get(), rows, y, false, add);
    return;
  }
  const std::shared_ptr<const GemmPackedB> w1 = l1.packed(), w2 = l2.packed();
  constexpr int64_t kRows = 48;  // whole register blocks; the hidden block [48, O1] stays in L2
  const int64_t tasks = (rows + kRows - 1) / kRows;
  const int team = attnkit::detail::team_for(tasks, 4.0 * double(rows) * double(I) * double(F));
  const std::shared_ptr<float> hidden = ScratchPool::get(team * kRows * F);  // [team][kRows, F]
  std::atomic<int64_t> next{0};
  ParallelErrors errors;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    float* h = hidden.get() + omp_get_thread_num() * kRows * F;
    for (int64_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks;)
      errors.run([&] {
        const int64_t r0 = t * kRows, n = std::min(kRows, rows - r0);
        linear_packed(l1, *w1, x + r0 * I, n, h, true, nullptr);                              // relu(x W1^T + b1)
        linear_packed(l2, *w2, h, n, y + r0 * O, false, add ? add + r0 * O : nullptr);  // add + h W2^T + b2
      });
  }
  errors.rethrow();
}

}  // namespace attnkit::ops
