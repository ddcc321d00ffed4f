// libFuzzer target: the weight loaders of attn-score: the general and additive score weights
// (nn::score_weights_from_bundle) and nn.MultiheadAttention weights (nn::MultiheadAttention::
// from_bundle, 1 and 2 heads), each followed by a forward pass over small inputs whose sizes
// come from the weights (and once with sizes that may not fit, to reach the shape checks).
// Property: only attnkit::Error is thrown; outputs have the shapes the inputs ask for.
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/attention_scores.hpp"
#include "attnkit/ops/attention_scores.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "fuzz_common.hpp"

using namespace attnkit;

namespace {
int64_t dim_or(const Tensor& t, int i, int64_t fallback) {
  return t.rank() == 2 && t.dim(i) > 0 && t.dim(i) <= 256 ? t.dim(i) : fallback;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  io::Value bundle;
  if (!fuzz::parse_weights(data, size, bundle)) return 0;
  Rng rng(1);
  for (auto kind : {ops::ScoreKind::General, ops::ScoreKind::Additive}) {
    try {
      ops::AttentionOptions o;
      o.score = kind;
      o.weights = nn::score_weights_from_bundle(bundle, kind, "attention");
      const Tensor& wq = kind == ops::ScoreKind::General ? o.weights.W : o.weights.W_q;
      const Tensor& wk = kind == ops::ScoreKind::General ? o.weights.W : o.weights.W_k;
      for (bool fitted : {true, false}) {
        const int64_t Dq = fitted ? dim_or(wq, 0, 3) : 3, Dk = fitted ? dim_or(wk, kind == ops::ScoreKind::General ? 1 : 0, 3) : 3;
        try {
          Tensor q = rand_normal({1, 2, Dq}, rng), k = rand_normal({1, 3, Dk}, rng), v = rand_normal({1, 3, 2}, rng);
          ops::AttentionResult r = ops::attention_forward(q, k, v, o);
          if (r.context.shape() != Shape{1, 2, 2}) fuzz::broken("context has the wrong shape");
        } catch (const Error&) {
        }
      }
    } catch (const Error&) {
    }
  }
  for (int64_t heads : {1, 2}) {
    try {
      nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(bundle, heads);
      const int64_t Dq = m.q_projection().in, Dk = m.k_projection().in, Dv = m.v_projection().in;  // the input sizes
      Tensor q = rand_normal({1, 2, Dq}, rng), k = rand_normal({1, 3, Dk}, rng), v = rand_normal({1, 3, Dv}, rng);
      ops::MhaOptions o;
      o.weights = ops::HeadWeights::PerHead;
      ops::MhaResult r = nn::multihead_attention_forward(m, q, k, v, o);
      if (r.output.rank() != 3 || r.output.dim(0) != 1 || r.output.dim(1) != 2) fuzz::broken("output has the wrong shape");
    } catch (const Error&) {
    }
  }
  return 0;
}
