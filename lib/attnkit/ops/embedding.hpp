// Embedding: a row look-up (PyTorch's F.embedding / nn.Embedding).
// Legend: V vocabulary size (rows of the weight), E embedding size; ids have any shape [...].
//   forward   y [..., E] = W [V, E] [ids [...]]         y[i, :] = W[ids[i], :]
//   backward  dW [V, E] += scatter-add of dy [..., E]    dW[ids[i], :] += dy[i, :]
//             except the padding row (padding_idx), which gets no gradient, as in PyTorch.
// Ids arrive as whole numbers in a float tensor (JSON carries them as numbers; float32 holds every
// id below 2^24 = 16,777,216 exactly) or as an int64 vector with its shape. Out-of-range ids are
// refused with their position: "embedding: ids[1, 2] = 12 is out of range for weight [10, 4]
// (ids must be in [0, 10))". Backward adds into the gradient it is given, as every backward does.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

struct EmbeddingOptions {
  // The row that gets no gradient (PyTorch's padding_idx); negative counts from the end (-1 = V - 1).
  std::optional<int64_t> padding_idx;
};

// Whole numbers from a float tensor, in row-major order. Refuses NaN, infinities and fractions
// with the position: "<op>: <what>[0, 2] = 1.5 is not a whole number". Ranges are the caller's.
std::vector<int64_t> indices_from(const Tensor& t, std::string_view op, std::string_view what);

// ids: int64 values of shape `ids_shape` (ids.size() == its numel); weight [V, E] -> [ids_shape..., E].
// `what` names the layer in messages ("embedding", "decoder.embed").
Tensor embedding_forward(const std::vector<int64_t>& ids, const Shape& ids_shape, const Tensor& weight,
                         const EmbeddingOptions& options = {}, const char* what = "embedding");
// ids as a float tensor of whole numbers [...] -> [..., E].
Tensor embedding_forward(const Tensor& ids, const Tensor& weight, const EmbeddingOptions& options = {},
                         const char* what = "embedding");
// dweight [V, E] += the rows of dy [ids_shape..., E] at the ids (the padding row skipped).
void embedding_backward(const Tensor& dy, const std::vector<int64_t>& ids, const Shape& ids_shape, Tensor& dweight,
                        const EmbeddingOptions& options = {}, const char* what = "embedding");

// Reference: the look-up in double, plain loops ([ids_shape..., E] row-major).
std::vector<double> embedding_reference(const std::vector<int64_t>& ids, const Tensor& weight);

}  // namespace attnkit::ops
