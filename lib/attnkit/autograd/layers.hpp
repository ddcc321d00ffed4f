// Autograd wrappers of the non-recurrent, non-attention kernels (ops/embedding, layer_norm,
// dropout, activation, softmax, cross_entropy). Each one runs the forward kernel and records ONE
// node whose closure calls the backward kernel; the closure reads its inputs (and, for softmax,
// log-softmax and relu, its own output) through the Vars' impls instead of copying tensors, and
// keeps only what the kernel saved (layer-norm statistics, the dropout mask, the row log-sum-exp).
// Shapes and semantics are the kernels'; see their headers.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/ops/activation.hpp"
#include "attnkit/ops/cross_entropy.hpp"
#include "attnkit/ops/dropout.hpp"
#include "attnkit/ops/embedding.hpp"
#include "attnkit/ops/layer_norm.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::autograd {

// y [..., E] = weight [V, E] [ids]: ids a float tensor of whole numbers [...], or int64 values
// with their shape. The gradient goes to the weight only (the padding row gets none).
Var embedding(const Var& weight, const Tensor& ids, const ops::EmbeddingOptions& options = {},
              const char* what = "embedding");
Var embedding(const Var& weight, std::vector<int64_t> ids, Shape ids_shape, const ops::EmbeddingOptions& options = {},
              const char* what = "embedding");

// Over the last axis; weight and bias [E] may be undefined (no affine part).
Var layer_norm(const Var& x, const Var& weight, const Var& bias, float eps = ops::kLayerNormEps,
               const char* what = "layer_norm");

// Draws from `rng` when training with p > 0; otherwise the identity (still one node, so that a
// gradient flows through unchanged).
Var dropout(const Var& x, const ops::DropoutOptions& options, Rng& rng);

Var relu(const Var& x);
Var tanh(const Var& x);
Var gelu(const Var& x, ops::GeluApproximate approximate = ops::GeluApproximate::None);
Var softmax(const Var& x);      // along the last axis
Var log_softmax(const Var& x);  // along the last axis

// logits [..., C] -> the loss (a scalar for mean and sum, [..] for none); targets a float tensor of
// whole numbers shaped like the logits without the class axis, or R int64 class indices.
Var cross_entropy(const Var& logits, const Tensor& targets, const ops::CrossEntropyOptions& options = {});
Var cross_entropy(const Var& logits, std::vector<int64_t> targets, const ops::CrossEntropyOptions& options = {});

}  // namespace attnkit::autograd
