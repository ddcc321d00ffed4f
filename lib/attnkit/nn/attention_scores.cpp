#include "attnkit/nn/attention_scores.hpp"

#include <limits>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

ops::ScoreWeights score_weights_from_bundle(const io::Value& bundle, ops::ScoreKind kind, std::string_view op) {
  ops::ScoreWeights w;
  if (kind != ops::ScoreKind::General && kind != ops::ScoreKind::Additive) return w;
  const std::string_view score = ops::score_kind_name(kind);
  AK_CHECK(bundle.is_bundle(), "{}: the {} score's weights must be a bundle of named tensors{}", op, score,
           bundle.is_tensor() ? "" : ": " + bundle.why());
  const std::string what = fmt::format("{}: the {} score's weights", op, score);
  auto get = [&](const char* name, bool required, const char* legend) {
    const Tensor* t = io::find_tensor(bundle, name, what);
    AK_CHECK(t || !required, "{}: the {} score needs weights member {} {} (the bundle has: {})", op, score, name, legend,
             fmt::join(bundle.names(), ", "));
    return t ? *t : Tensor();
  };
  if (kind == ops::ScoreKind::General) {
    w.W = get("W", true, "[Dq, Dk]");
  } else {
    w.W_q = get("W_q", true, "[Dq, A]");
    w.W_k = get("W_k", true, "[Dk, A]");
    w.v = get("v", true, "[A]");
    w.b = get("b", false, "[A]");
  }
  return w;
}

std::vector<int64_t> key_lengths_from(const Tensor& lengths, int64_t N, std::string_view op) {
  return io::lengths_from(lengths, N, std::numeric_limits<int32_t>::max(), fmt::format("{}: key lengths", op));
}

}  // namespace attnkit::nn
