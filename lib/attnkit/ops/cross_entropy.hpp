// Cross-entropy of class-index targets, fused with the log-softmax (PyTorch's F.cross_entropy with
// the classes on the LAST axis: logits [N, C], or [N, T, C] taken as N*T rows; PyTorch's
// [N, C, T] layout is logits.transpose(1, 2) here).
// Legend: R rows (every leading axis of the logits), C classes, eps = label_smoothing.
//   forward   lse_r = log sum_j exp(x_rj)                    [R]
//             nll_r = lse_r - x_r,t_r                        (-log p of the target)
//             smooth_r = lse_r - mean_j x_rj                 (mean over classes of -log p_j)
//             loss_r = (1 - eps) nll_r + eps smooth_r        (PyTorch's label smoothing)
//             a row whose target is ignore_index has loss 0 and is not counted;
//             mean = sum_r loss_r / (number of counted rows), sum = sum_r loss_r, none = loss [..]
//   backward  dx_rj += g_r (p_rj - q_rj),  p = softmax(x_r),  q_rj = (1 - eps) [j = t_r] + eps / C
//             g_r = dloss / counted (mean), dloss (sum), dloss_r (none); 0 for an ignored row
// Every row ignored: the mean is 0 with zero gradients. PyTorch returns NaN there (0 / 0); a batch
// made entirely of padding (the tail of a bucketed data set, a fully masked chunk) would then turn
// the parameters into NaN at the next optimizer step, whereas 0 makes that step a no-op. The
// sum is 0 in both.
// Targets: class indices in [0, C), or ignore_index; anything else is refused with its position.
// A target whose logit is -inf gives an infinite loss, as in PyTorch.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

enum class Reduction { Mean, Sum, None };

struct CrossEntropyOptions {
  int64_t ignore_index = -100;   // PyTorch's default
  float label_smoothing = 0.0f;  // in [0, 1)
  Reduction reduction = Reduction::Mean;
};

// What backward needs: the row log-sum-exp and the number of rows counted by the mean.
struct CrossEntropySaved {
  Tensor row_lse;       // [R]
  int64_t counted = 0;  // rows whose target is not ignore_index
};

// logits [..., C], targets: R = numel / C class indices (row-major) -> loss: a scalar (mean, sum)
// or [..] (none: logits' shape without the last axis).
Tensor cross_entropy_forward(const Tensor& logits, const std::vector<int64_t>& targets,
                             const CrossEntropyOptions& options = {}, CrossEntropySaved* saved = nullptr);
// targets as a float tensor of whole numbers, shaped like the logits without the last axis.
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {},
                             CrossEntropySaved* saved = nullptr);
// dloss: the loss's gradient (a scalar for mean and sum, [..] for none); dlogits [..., C].
void cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const std::vector<int64_t>& targets,
                            const CrossEntropyOptions& options, const CrossEntropySaved& saved, Tensor& dlogits);

// Reference: the forward in double with plain loops (one value for mean and sum, R for none).
std::vector<double> cross_entropy_reference(const Tensor& logits, const std::vector<int64_t>& targets,
                                            const CrossEntropyOptions& options = {});

}  // namespace attnkit::ops
