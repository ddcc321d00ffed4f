// Legend: V vocabulary size, E embedding size, R = number of ids.
#include "attnkit/ops/embedding.hpp"

#include <algorithm>
#include <cmath>

#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {
namespace {

struct EmbeddingDims {
  int64_t V, E;
  std::optional<int64_t> padding;  // resolved to [0, V)
};

EmbeddingDims check(const std::vector<int64_t>& ids, const Shape& ids_shape, const Tensor& weight,
                    const EmbeddingOptions& o, const char* what) {
  AK_CHECK(weight.rank() == 2, "{}: weight has shape {}, expected [num_embeddings, embedding_dim]", what,
           weight.shape_str());
  const int64_t V = weight.dim(0), E = weight.dim(1);
  AK_CHECK(static_cast<int64_t>(ids.size()) == shape_numel(ids_shape), "{}: {} ids for an ids shape of {}", what,
           ids.size(), shape_str(ids_shape));
  AK_CHECK(static_cast<int>(ids_shape.size()) < kMaxRank, "{}: ids have shape {}, expected at most {} axes", what,
           shape_str(ids_shape), kMaxRank - 1);
  for (size_t i = 0; i < ids.size(); ++i)
    AK_CHECK(ids[i] >= 0 && ids[i] < V, "{}: ids{} = {} is out of range for weight {} (ids must be in [0, {}))", what,
             shape_str(unravel_index(static_cast<int64_t>(i), ids_shape)), ids[i], weight.shape_str(), V);
  EmbeddingDims d{V, E, std::nullopt};
  if (o.padding_idx) {
    const int64_t p = *o.padding_idx;
    AK_CHECK(p >= -V && p < V, "{}: padding_idx {} is out of range for weight {} (expected [-{}, {}))", what, p,
             weight.shape_str(), V, V);
    d.padding = p < 0 ? p + V : p;
  }
  return d;
}

}  // namespace

std::vector<int64_t> indices_from(const Tensor& t, std::string_view op, std::string_view what) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t[i];
    // |v| < 2^62 keeps the conversion defined; no float32 id near that is meaningful anyway
    AK_CHECK(std::isfinite(v) && std::trunc(v) == v && std::fabs(v) < 0x1p62f, "{}: {}{} = {} is not a whole number",
             op, what, shape_str(unravel_index(i, t.shape())), v);
    out[static_cast<size_t>(i)] = static_cast<int64_t>(v);
  }
  return out;
}

Tensor embedding_forward(const std::vector<int64_t>& ids, const Shape& ids_shape, const Tensor& weight,
                         const EmbeddingOptions& options, const char* what) {
  const EmbeddingDims d = check(ids, ids_shape, weight, options, what);
  Shape ys = ids_shape;
  ys.push_back(d.E);  // [..., E]
  Tensor y(ys);
  // y[i, :] = W[ids[i], :]  (the padding row is looked up like any other, as in PyTorch)
  for (size_t i = 0; i < ids.size(); ++i)
    std::copy_n(weight.data() + ids[i] * d.E, d.E, y.data() + static_cast<int64_t>(i) * d.E);
  return y;
}

Tensor embedding_forward(const Tensor& ids, const Tensor& weight, const EmbeddingOptions& options, const char* what) {
  return embedding_forward(indices_from(ids, what, "ids"), ids.shape(), weight, options, what);
}

void embedding_backward(const Tensor& dy, const std::vector<int64_t>& ids, const Shape& ids_shape, Tensor& dweight,
                        const EmbeddingOptions& options, const char* what) {
  const EmbeddingDims d = check(ids, ids_shape, dweight, options, what);
  Shape ys = ids_shape;
  ys.push_back(d.E);
  AK_CHECK(dy.shape() == ys, "{}: output gradient has shape {}, expected {}", what, dy.shape_str(), shape_str(ys));
  // forward: y[i, :] = W[ids[i], :]   ->   dW[ids[i], :] += dy[i, :]; the padding row is left alone.
  // Serial on purpose: repeated ids add into the same row (a scatter-add), and the loop is a
  // stream of row adds the compiler vectorises.
  for (size_t i = 0; i < ids.size(); ++i) {
    if (d.padding && ids[i] == *d.padding) continue;
    float* dst = dweight.data() + ids[i] * d.E;
    const float* src = dy.data() + static_cast<int64_t>(i) * d.E;
    for (int64_t e = 0; e < d.E; ++e) dst[e] += src[e];
  }
}

std::vector<double> embedding_reference(const std::vector<int64_t>& ids, const Tensor& weight) {
  AK_CHECK(weight.rank() == 2, "embedding: weight has shape {}, expected [num_embeddings, embedding_dim]",
           weight.shape_str());
  const int64_t V = weight.dim(0), E = weight.dim(1);
  std::vector<double> y;
  y.reserve(ids.size() * static_cast<size_t>(E));
  for (int64_t id : ids) {
    AK_CHECK(id >= 0 && id < V, "embedding: id {} is out of range for weight {}", id, weight.shape_str());
    for (int64_t e = 0; e < E; ++e) y.push_back(weight[id * E + e]);
  }
  return y;
}

}  // namespace attnkit::ops
