// attn-score: attention scores, weights and context (score functions, masks), and multi-head
// attention with PyTorch nn.MultiheadAttention weights. Manual: docs/attn-score.md.
#include <algorithm>

#include <fmt/format.h>

#include "attnkit/io/svg_heatmap.hpp"
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/attention_scores.hpp"
#include "attnkit/ops/attention_scores.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"
#include "common/common.hpp"

using namespace attnkit;
using attnkit::tools::UsageError;

int main(int argc, char** argv) {
  CLI::App app{"", "attn-score"};
  tools::describe(
      app,
      "Attention scores, weights and contexts from JSON tensors.\n"
      "Attention: scores between queries and keys, softmax weights over the keys, context = weights . values;\n"
      "and multi-head attention with nn.MultiheadAttention weights (docs/attn-score.md).\n"
      "Shapes: query [T, D] or [N, T, D], keys/values [S, D] or [N, S, D]. Mask tensors: 1 = attend, 0 = masked.",
      "  tensor randn --shape 4,3 --seed 1 > h.json && tensor randn --shape 1,3 --seed 2 > s0.json\n"
      "  attn-score --query s0.json --keys h.json --score dot --pretty\n"
      "  attn-score --query s0.json --keys h.json --heatmap w.svg --key-labels h1,h2,h3,h4 --query-labels s0\n"
      "  tensor randn --shape 5,8 --seed 3 | attn-score --self - --split-heads --heads 2 --mask causal\n"
      "  tensor randn --shape 24,8 --seed 4 > w_in.json && tensor randn --shape 8,8 --seed 5 > w_out.json\n"
      "  tensor pack in_proj_weight=w_in.json out_proj.weight=w_out.json > mha.json\n"
      "  tensor randn --shape 5,8 --seed 3 > x.json\n"
      "  attn-score --self x.json --heads 2 --weights mha.json --mask causal --need-weights\n"
      "  tensor randn --shape 5,8 --seed 6 > dy.json   # d loss / d output\n"
      "  attn-score --self x.json --heads 2 --weights mha.json --grad-output dy.json   # adds \"grad\"\n"
      "  tensor randn --shape 4,3 --seed 1 | lstm-run - --init --input-size 3 --hidden-size 4 |\n"
      "    attn-score --query -#h_n --keys -#output --score dot   # s0 = last state against h1..h4\n");
  tools::OutputOptions out;
  tools::InputOptions in;
  int threads = 0;
  std::string query, keys, values, self, score = "scaled-dot", weights_ref, mask, key_lengths, heatmap, grad_output;
  int64_t heads = 0;
  bool split_heads = false, need_weights = false, per_head = false;
  std::vector<std::string> query_labels, key_labels;
  app.add_option("--query", query, "Queries [T, Dq] or [N, T, Dq] (reference PATH[#NAME], - for stdin)")->type_name("REF");
  app.add_option("--keys", keys, "Keys [S, Dk] or [N, S, Dk]")->type_name("REF");
  app.add_option("--values", values, "Values [S, Dv] or [N, S, Dv] (default: the keys)")->type_name("REF");
  app.add_option("--self", self, "Self-attention input X: query = keys = values = X (multi-head forms)")->type_name("REF");
  auto* score_opt = app.add_option("--score", score, "Score function: dot, scaled-dot (/sqrt(Dk)), general (q W k), additive (v.tanh(q W_q + k W_k + b))")
                        ->check(CLI::IsMember({"dot", "scaled-dot", "general", "additive"}))
                        ->capture_default_str();
  app.add_option("--weights", weights_ref,
                 "Weights bundle: W [Dq, Dk] (general); W_q [Dq, A], W_k [Dk, A], v [A], b [A] (additive); "
                 "nn.MultiheadAttention state_dict (in_proj_weight, out_proj.weight, ...) with --heads")
      ->type_name("REF");
  app.add_option("--mask", mask,
                 "causal (key s visible to query t when s <= t), causal-lower-right (s <= t + S - T), or a reference "
                 "to a 0/1 tensor [T, S] / [N, T, S] / [N, NH, T, S] with 1 = ATTEND, 0 = masked")->type_name("causal|causal-lower-right|REF");
  app.add_option("--key-lengths", key_lengths, "Valid keys per batch element, [N] integers (padded batches)")->type_name("REF");
  auto* heads_opt = app.add_option("--heads", heads, "Multi-head attention with NH heads (needs --weights, or --split-heads)")
      ->check(tools::positive());
  app.add_flag("--split-heads", split_heads, "Multi-head without projections: split Q, K, V into NH equal parts (needs --heads)")
      ->needs(heads_opt);
  app.add_flag("--need-weights", need_weights, "Multi-head: add \"weights\" averaged over heads [.., T, S]");
  app.add_flag("--per-head", per_head, "Multi-head: add \"weights\" per head [.., NH, T, S]");
  app.add_option("--grad-output", grad_output,
                 "Backward pass: d loss / d output (shaped like \"output\", or \"context\" in the score form), or a bundle "
                 "with that member; adds \"grad\": the inputs' (query, keys, values, or self) and the weights' gradients, "
                 "named like the weights")
      ->type_name("REF");
  app.add_option("--heatmap", heatmap, "Also write the weights as an SVG heatmap to FILE.svg")->type_name("FILE.svg");
  app.add_option("--query-labels", query_labels, "Heatmap row labels (comma-separated or several words)")->delimiter(',')->type_name("LABEL");
  app.add_option("--key-labels", key_labels, "Heatmap column labels")->delimiter(',')->type_name("LABEL");
  tools::add_threads_option(app, threads);
  tools::add_output_options(app, out);
  tools::add_input_options(app, in);

  return tools::run(app, argc, argv, [&]() -> int {
    const bool multi = heads > 0 || split_heads || !self.empty();
    if (!self.empty() && (!query.empty() || !keys.empty() || !values.empty()))
      throw UsageError("--self X replaces --query, --keys and --values; give one or the other");
    if (self.empty() && (query.empty() || keys.empty()))
      throw UsageError("give --query and --keys (or --self X for self-attention)");
    if (!multi && (need_weights || per_head))
      throw UsageError("--need-weights and --per-head belong to the multi-head forms (--heads NH); the score form always prints weights");
    if (need_weights && per_head) throw UsageError("give --need-weights (averaged over heads) or --per-head, not both");
    if (multi && score_opt->count() && score != "scaled-dot")
      throw UsageError("the multi-head forms use the scaled-dot score; --score " + score + " needs the score form (no --heads)");
    if (multi && split_heads && !weights_ref.empty()) throw UsageError("--split-heads uses no projections; drop --weights");
    if (multi && !split_heads && weights_ref.empty())
      throw UsageError("multi-head attention needs --weights REF (nn.MultiheadAttention weights), or --split-heads");
    if (!multi && !weights_ref.empty() && score != "general" && score != "additive")
      throw UsageError("--weights is for the general and additive scores, or the multi-head forms (--heads NH)");
    if ((!query_labels.empty() || !key_labels.empty()) && heatmap.empty())
      throw UsageError("--query-labels and --key-labels label the --heatmap; give --heatmap FILE.svg");
    set_num_threads(threads);

    io::Sources sources(in.read_options());
    auto tensor = [&](const std::string& ref, const char* role) { return sources.tensor(ref, role, in.allow_nan); };

    // Weights are read per record (with NDJSON on stdin, -#NAME may differ from record to record).
    auto checked_weights = [&]() -> const io::Value& {
      const io::Value& w = sources.value(weights_ref);
      tools::refuse_nan_weights(w, weights_ref, in.allow_nan);
      return w;
    };
    auto load_mha = [&](int64_t nh) {
      const io::Value& w = checked_weights();
      return tools::with_source(weights_ref, [&] { return nn::MultiheadAttention::from_bundle(w, nh); });
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
    Tensor shown_weights;  // for the heatmap
    tools::per_record(sources, out, [&]() -> io::Value {
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
      else if (!mask.empty()) spec.mask = tools::keyword_or_tensor(sources, mask, "--mask", {"causal", "causal-lower-right"}, in.allow_nan);
      if (per_element && spec.mask.rank() == 2 && spec.mask.dim(0) == N) spec.mask = spec.mask.reshaped({N, 1, spec.mask.dim(1)});
      if (!key_lengths.empty()) spec.key_lengths = nn::key_lengths_from(tensor(key_lengths, "key lengths"), N, io::display_name(key_lengths));
      io::Value result = io::Value::bundle();
      if (multi) {
        ops::MhaOptions o;
        o.mask = std::move(spec);
        o.weights = per_head ? ops::HeadWeights::PerHead
                    : (need_weights || !heatmap.empty()) ? ops::HeadWeights::Averaged
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
        shown_weights = drop_t(r.weights);
        // per head, unbatched: [NH, T, S] is drawn as [1, NH, T, S], so that its panels are titled by head
        // ("n = 0, head 1"), not as a batch
        if (per_head && !per_element && shown_weights.rank() == 3)
          shown_weights = shown_weights.reshaped({1, shown_weights.dim(0), shown_weights.dim(1), shown_weights.dim(2)});
        if (need_weights || per_head) result.set("weights", drop_t(std::move(r.weights)));
        if (backward) result.set("grad", std::move(grad));
      } else {
        ops::AttentionOptions o;
        o.score = ops::parse_score_kind(score);
        if (!weights_ref.empty()) {
          const io::Value& w = checked_weights();
          o.weights = tools::with_source(weights_ref, [&] { return nn::score_weights_from_bundle(w, o.score, "attention"); });
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
        shown_weights = drop_t(r.weights);
        result.set("scores", drop_t(std::move(r.scores)));
        result.set("weights", drop_t(std::move(r.weights)));
        result.set("context", drop_t(std::move(r.context)));
        if (!grad_output.empty()) result.set("grad", std::move(grad));
      }
      return result;
    });
    if (!heatmap.empty()) {  // last: after the result was written (of the last record, for a stream)
      io::HeatmapOptions h;
      h.row_labels = query_labels;
      h.col_labels = key_labels;
      io::write_heatmap_svg(heatmap, shown_weights, h);
    }
    return 0;
  });
}
