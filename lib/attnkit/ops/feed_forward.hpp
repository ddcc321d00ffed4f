// The fused products of a linear layer and of the feed-forward block, for inference (nothing recorded): the bias,
// the ReLU and a residual applied as the product kernel stores them (ops::GemmEpilogue), no pass over y after it.
// Legend: I in features, F hidden features, O out features.
//   linear_fused   y [rows, O] = act(x [rows, I] W^T + b) + add
//   feed_forward   y [rows, O2] = add + relu(x W1^T + b1) W2^T + b2
// The same bits as the recorded ops (linear, relu, add) on the same rows.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "attnkit/ops/lowp_weights.hpp"
#include "attnkit/ops/matmul.hpp"

namespace attnkit::ops {

// A linear layer's weights as the fused kernels read them: y = x W^T + b (PyTorch's layout).
struct LinearWeights {
  const float* W = nullptr;  // [O, I]
  int64_t out = 0, in = 0;
  const float* b = nullptr;  // [O], or null
  // W^T [I, O] packed for the product kernel, asked for only by products that read it packed (more than 4
  // rows, gemm_packed_matches) and only where the processor has a panel kernel: the owner keeps it and
  // repacks it after W changes (the same bits as packing it per call, in every thread).
  std::function<std::shared_ptr<const GemmPackedB>()> packed;
  // W in int8 or bfloat16 (ops/lowp_weights.hpp), or null: when set, the products read it instead of W (the bias,
  // the ReLU and the residual still float32, applied after the product).
  std::shared_ptr<const LowpWeights> lowp;
};

// y [rows, O] = act(x [rows, I] W^T + b) + add, add [rows, O] or nullptr; relu: act = ReLU, else the identity.
// Threads: the product's policy.
void linear_fused(const LinearWeights& l, const float* x, int64_t rows, float* y, bool relu, const float* add);

// The feed-forward block under inference: y [rows, O2] = add + relu(x [rows, I] W1^T + b1) W2^T + b2 (add [rows, O2]
// or nullptr), l2.in == l1.out. In tasks of 48 rows over the team, each task's hidden block [48, O1] in its thread's
// buffer (384 KB at O1 = 2048: L2) and straight into the second product: the whole hidden [rows, O1] (32 MB for a
// Transformer layer at 16 x 256, d_ff 2048) would go out to memory and back between two products. The
// bits of linear_fused(l1), then linear_fused(l2), on all rows.
void feed_forward(const LinearWeights& l1, const LinearWeights& l2, const float* x, int64_t rows, float* y,
                  const float* add);

}  // namespace attnkit::ops
