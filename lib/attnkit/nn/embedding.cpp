// Legend: V num_embeddings, E embedding_dim.
#include "attnkit/nn/embedding.hpp"

#include <algorithm>

#include "attnkit/autograd/layers.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx,
                     const std::string& prefix)
    : what_(prefix.empty() ? "embedding" : prefix) {
  const int64_t V = num_embeddings, E = embedding_dim;
  AK_CHECK(V >= 0 && E >= 0, "{}: num_embeddings {} and embedding_dim {} must be >= 0", what_, V, E);
  weight = Parameter(qualified(prefix, "weight"), Tensor({V, E}));  // [V, E]
  if (padding_idx) {
    const int64_t p = *padding_idx;
    AK_CHECK(p >= -V && p < V, "{}: padding_idx {} is out of range for {} embeddings (expected [-{}, {}))", what_, p,
             V, V, V);
    options_.padding_idx = p < 0 ? p + V : p;
  }
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Rng& rng, std::optional<int64_t> padding_idx,
                     const std::string& prefix)
    : what_(prefix.empty() ? "embedding" : prefix) {
  const int64_t V = num_embeddings, E = embedding_dim;
  AK_CHECK(V >= 0 && E >= 0, "{}: num_embeddings {} and embedding_dim {} must be >= 0", what_, V, E);
  weight = Parameter(qualified(prefix, "weight"), rand_normal({V, E}, rng));  // [V, E] ~ N(0, 1)
  if (padding_idx) {
    const int64_t p = *padding_idx;
    AK_CHECK(p >= -V && p < V, "{}: padding_idx {} is out of range for {} embeddings (expected [-{}, {}))", what_, p,
             V, V, V);
    options_.padding_idx = p < 0 ? p + V : p;
    std::fill_n(weight.value.data() + *options_.padding_idx * E, E, 0.0f);  // PyTorch zeroes the padding row
  }
}

autograd::Var Embedding::forward(std::vector<int64_t> ids, Shape ids_shape) {
  return autograd::embedding(autograd::Var::param(weight), std::move(ids), std::move(ids_shape), options_,
                             what_.c_str());  // [..., E]
}

autograd::Var Embedding::forward(const Tensor& ids) {
  return forward(ops::indices_from(ids, what_, "ids"), ids.shape());
}

void Embedding::load(const io::Value& bundle) { load_parameters(*this, bundle, what_); }

}  // namespace attnkit::nn
