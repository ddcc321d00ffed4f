// nn::Embedding: a table of V vectors of size E (PyTorch's nn.Embedding, ops/embedding.hpp).
// Legend: V num_embeddings, E embedding_dim.
//   weight [V, E]  "weight" (or "<prefix>.weight")
// Init, as PyTorch: weight ~ N(0, 1) from the attnkit::Rng given (row-major), and the padding
// row, if any, set to zeros; it then receives no gradient. Built without an Rng, the table is zeros, to be
// filled by load_state_dict (nn/state_dict.hpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/value.hpp"
#include "attnkit/nn/parameter.hpp"
#include "attnkit/ops/embedding.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::nn {

class Embedding : public Module {
 public:
  // padding_idx: negative counts from the end, as PyTorch; checked against V. Zeros, to be loaded.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            const std::string& prefix = "");
  // N(0, 1) from `rng`, the padding row zeros.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Rng& rng, std::optional<int64_t> padding_idx = std::nullopt,
            const std::string& prefix = "");

  Parameter weight;  // [V, E]

  int64_t num_embeddings() const { return weight.value.dim(0); }
  int64_t embedding_dim() const { return weight.value.dim(1); }
  const ops::EmbeddingOptions& options() const { return options_; }

  // ids [...] (whole numbers) -> [..., E]; or int64 ids with their shape.
  autograd::Var forward(const Tensor& ids);
  autograd::Var forward(std::vector<int64_t> ids, Shape ids_shape);

  std::vector<Parameter*> named_parameters() override { return {&weight}; }
  using Module::named_parameters;
  void load(const io::Value& bundle);  // presence and shape checked (nn/state_dict.hpp)

 private:
  ops::EmbeddingOptions options_;
  std::string what_;
};

}  // namespace attnkit::nn
