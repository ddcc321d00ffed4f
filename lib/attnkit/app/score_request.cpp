// attn-score's request and result handling (score_request.hpp).
#include "attnkit/app/score_request.hpp"

#include <utility>

#include <fmt/format.h>

#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/attention_scores.hpp"
#include "attnkit/ops/attention_scores.hpp"
#include "attnkit/ops/mha.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/with_source.hpp"

namespace attnkit::app {


ScoreResult run_score(const ScoreRequest& request, ScoreInputs& from) {
  const std::string &query = request.query, &keys = request.keys, &values = request.values, &self = request.self;
  const std::string &score = request.score, &weights_ref = request.weights, &mask = request.mask;
  const std::string &key_lengths = request.key_lengths, &grad_output = request.grad_output;
  const int64_t heads = request.heads;
  const bool split_heads = request.split_heads, need_weights = request.need_weights, per_head = request.per_head;
  const bool multi = request.multi_head();
  io::Sources& sources = from.sources;
  auto tensor = [&](const std::string& ref, const char* role) { return sources.tensor(ref, role, from.allow_nan); };

  auto load_mha = [&](int64_t nh) {
    const io::Value& w = from.weights();
    return with_source(weights_ref, [&] { return nn::MultiheadAttention::from_bundle(w, nh); });
  };
  // d loss / d output from --grad-output: a tensor shaped like `out`, or a bundle holding `member`.
  auto output_gradient = [&](const Tensor& out, const char* member, bool per_element) {
    std::string ref = grad_output;
    const io::Value& v = sources.tensor_or_bundle(ref);
    if (v.is_bundle()) {
      AK_CHECK(v.find(member), "{}: the gradient bundle has no member {} (has: {})", grad_output, member,
               fmt::format("{}", fmt::join(v.names(), ", ")));
      ref += (ref.find('#') == std::string::npos ? "#" : "/") + std::string(member);
    }
    Tensor dy = tensor(ref, "output gradient");
    Shape want = out.shape();
    if (per_element) want.erase(want.begin() + 1);  // [N, 1, X] shown as [N, X]
    AK_CHECK(dy.shape() == want, "output gradient ({}): has shape {}, expected {}'s shape {}", ref,
             dy.shape_str(), member, shape_str(want));
    return dy.reshaped(out.shape());
  };
  // The weights' gradients under the weights' own names; out_proj nested when it came nested.
  auto add_weight_grads = [&](io::Value& grad, const std::vector<Parameter*>& params) {
    const io::Value& w = sources.value(weights_ref);
    const io::Value* outer = w.find("out_proj");
    const bool nested = outer && outer->is_bundle();
    io::Value out_proj = io::Value::bundle();
    for (Parameter* p : params) {
      if (nested && p->name.rfind("out_proj.", 0) == 0) out_proj.set(p->name.substr(9), std::move(p->grad));
      else grad.set(p->name, std::move(p->grad));
    }
    if (nested) grad.set("out_proj", std::move(out_proj));
  };
  Tensor shown;  // for the heatmap
  // With --self the three are one tensor (multi-head attention then projects with one GEMM).
  Tensor q_in = tensor(self.empty() ? query : self, self.empty() ? "query" : "self");
  const Tensor k_in = self.empty() ? tensor(keys, "keys") : Tensor();
  const Tensor v_in = self.empty() && !values.empty() ? tensor(values, "values") : Tensor();
  // One query per batch element: query [N, E] with keys [N, S, E] runs as [N, 1, E]; the T axis
  // is dropped from every result (and expected so in --grad-output and a [N, S] mask).
  const bool per_element = self.empty() && q_in.rank() == 2 && k_in.rank() == 3;
  if (per_element) {
    AK_CHECK(q_in.dim(0) == k_in.dim(0),
             "{} (query) has shape {} and {} (keys) {}: a query [N, E] with keys [N, S, E] is one query per batch "
             "element, and they disagree on N (a query [T, E] for every batch element: give it as [N, T, E])",
             io::display_name(query), q_in.shape_str(), io::display_name(keys), k_in.shape_str());
    q_in = q_in.reshaped({q_in.dim(0), 1, q_in.dim(1)});
  }
  auto drop_t = [&](Tensor t) {  // [N, 1, X] -> [N, X], [N, NH, 1, S] -> [N, NH, S]
    if (!per_element || t.rank() < 3) return t;
    Shape sh = t.shape();
    sh.erase(sh.begin() + (sh.size() == 4 ? 2 : 1));
    return t.reshaped(sh);
  };
  const Tensor& q = q_in;
  const Tensor& k = self.empty() ? k_in : q_in;
  const Tensor& v = !self.empty() ? q_in : values.empty() ? k_in : v_in;
  // the dot scores need one feature size: say how to get there (a bidirectional encoder's
  // output holds both directions, its h_n one per row)
  if (!multi && (score == "dot" || score == "scaled-dot") && q.rank() == k.rank() && q.dim(-1) != k.dim(-1)) {
    const int64_t Dq = q.dim(-1), Dk = k.dim(-1);
    const std::string bi =
        Dk == 2 * Dq ? fmt::format("; keys of 2 x {} are a bidirectional encoder's output (both directions), and "
                                   "h_n[-1] is its last layer's backward state: pair h_n[-2] with output[:,:,:{}] "
                                   "(forward), or h_n[-1] with output[:,:,{}:] (backward)", Dq, Dq, Dq)
                     : "";
    throw Error(fmt::format(
        "{} (query) has shape {} and {} (keys) {}: they disagree on the feature size ({} and {}; the {} score "
        "needs them equal): score with --score general --weights W.json (a bundle with W [{}, {}]) or --score "
        "additive{}",
        io::display_name(self.empty() ? query : self), per_element ? drop_t(q).shape_str() : q.shape_str(),
        io::display_name(keys), k.shape_str(), Dq, Dk, score, Dq, Dk, bi));
  }
  // the score form prints scores and weights [N, T, S]: past the library's bound, say what to
  // ask for instead (only the multi-head forms leave the weights out)
  if (!multi && q.rank() == k.rank() && q.dim(-2) * k.dim(-2) * (q.rank() == 3 ? q.dim(0) : 1) > ops::kMaxWeightElements) {
    const int64_t n = q.rank() == 3 ? q.dim(0) : 1, T = q.dim(-2), S = k.dim(-2);
    throw Error(fmt::format(
        "the score form prints scores and weights of [N, T, S] = [{}, {}, {}] ({:.1f} GiB each); {}", n, T, S,
        static_cast<double>(n) * T * S * 4.0 / (1 << 30),
        score == "scaled-dot" ? "for the context alone, run the same attention as --split-heads --heads 1 (its "
                                "\"output\" is the context; no weights unless asked for)"
                              : "give fewer queries per run (tensor get --index slices them)"));
  }
  // library errors (shapes that disagree) name the inputs they came from
  std::string inputs = self.empty() ? fmt::format("query {}, keys {}", io::display_name(query), io::display_name(keys))
                                    : fmt::format("self {}", io::display_name(self));
  if (!values.empty()) inputs += ", values " + io::display_name(values);
  if (!mask.empty() && mask != "causal" && mask != "causal-lower-right") inputs += ", mask " + io::display_name(mask);
  auto named = [&](auto&& f) {
    try {
      return f();
    } catch (const Error& e) {
      throw Error(inputs + ": " + e.what());
    }
  };
  ops::MaskSpec spec;
  const int64_t N = q.rank() == 3 ? q.dim(0) : 1;
  if (mask == "causal") spec.causal = ops::CausalKind::UpperLeft;
  else if (mask == "causal-lower-right") spec.causal = ops::CausalKind::LowerRight;
  else if (!mask.empty()) spec.mask = from.mask();
  if (per_element && spec.mask.rank() == 2 && spec.mask.dim(0) == N) spec.mask = spec.mask.reshaped({N, 1, spec.mask.dim(1)});
  if (!key_lengths.empty()) spec.key_lengths = nn::key_lengths_from(tensor(key_lengths, "key lengths"), N, io::display_name(key_lengths));
  io::Value result = io::Value::bundle();
  if (multi) {
    ops::MhaOptions o;
    o.mask = std::move(spec);
    o.weights = per_head ? ops::HeadWeights::PerHead
                : (need_weights || request.heatmap) ? ops::HeadWeights::Averaged
                                                     : ops::HeadWeights::None;
    const int64_t nh = heads > 0 ? heads : 1;
    const bool backward = !grad_output.empty();
    ops::MhaCache cache;
    nn::MultiheadAttention m;
    if (!split_heads) m = load_mha(nh);
    ops::MhaResult r = named([&] {
      return split_heads ? ops::split_heads_attention_forward(q, k, v, nh, o, backward ? &cache : nullptr)
                         : nn::multihead_attention_forward(m, q, k, v, o, backward ? &cache : nullptr);
    });
    io::Value grad = io::Value::bundle();
    if (backward) {
      const Tensor dy = output_gradient(r.output, "output", per_element);
      // One gradient per input given: --self X gets the sum over its three roles, keys without
      // --values the sum over two.
      Tensor dq(q.shape()), dk_own(k.shape()), dv_own(v.shape());
      Tensor* dk = !self.empty() ? &dq : &dk_own;
      Tensor* dv = !self.empty() ? &dq : values.empty() ? dk : &dv_own;
      if (split_heads) ops::split_heads_attention_backward(q, k, v, nh, o, cache, dy, &dq, dk, dv);
      else nn::multihead_attention_backward(m, q, k, v, o, cache, dy, &dq, dk, dv);
      if (!self.empty()) {
        grad.set("self", std::move(dq));
      } else {
        grad.set("query", drop_t(std::move(dq))).set("keys", std::move(dk_own));
        if (!values.empty()) grad.set("values", std::move(dv_own));
      }
      if (!split_heads) add_weight_grads(grad, m.named_parameters());
    }
    result.set("output", drop_t(std::move(r.output)));
    shown = drop_t(r.weights);
    // per head, unbatched: [NH, T, S] is drawn as [1, NH, T, S], so that its panels are titled by head
    // ("n = 0, head 1"), not as a batch
    if (per_head && !per_element && shown.rank() == 3)
      shown = shown.reshaped({1, shown.dim(0), shown.dim(1), shown.dim(2)});
    if (need_weights || per_head) result.set("weights", drop_t(std::move(r.weights)));
    if (backward) result.set("grad", std::move(grad));
  } else {
    ops::AttentionOptions o;
    o.score = ops::parse_score_kind(score);
    if (!weights_ref.empty()) {
      const io::Value& w = from.weights();
      o.weights = with_source(weights_ref, [&] { return nn::score_weights_from_bundle(w, o.score, "attention"); });
    }
    o.mask = std::move(spec);
    ops::AttentionResult r = named([&] { return ops::attention_forward(q, k, v, o); });
    io::Value grad = io::Value::bundle();
    if (!grad_output.empty()) {
      const Tensor dy = output_gradient(r.context, "context", per_element);
      ops::AttentionGrads g = ops::attention_backward(q, k, v, o, r, dy);
      grad.set("query", drop_t(std::move(g.query)));
      if (values.empty()) {  // the keys are the values too: the sum over both roles
        for (int64_t i = 0; i < g.keys.numel(); ++i) g.keys[i] += g.values[i];
        grad.set("keys", std::move(g.keys));
      } else {
        grad.set("keys", std::move(g.keys)).set("values", std::move(g.values));
      }
      for (auto [name, t] : {std::pair<const char*, Tensor*>{"W", &g.weights.W}, {"W_q", &g.weights.W_q},
                             {"W_k", &g.weights.W_k}, {"v", &g.weights.v}, {"b", &g.weights.b}})
        if (!t->empty()) grad.set(name, std::move(*t));
    }
    shown = drop_t(r.weights);
    result.set("scores", drop_t(std::move(r.scores)));
    result.set("weights", drop_t(std::move(r.weights)));
    result.set("context", drop_t(std::move(r.context)));
    if (!grad_output.empty()) result.set("grad", std::move(grad));
  }
  return {std::move(result), std::move(shown)};
}

}  // namespace attnkit::app
