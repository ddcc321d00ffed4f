// attn-score: attention scores, weights and context (score functions, masks), and multi-head
// attention with PyTorch nn.MultiheadAttention weights. Manual: docs/attn-score.md.
#include <utility>

#include "attnkit/app/score_request.hpp"
#include "attnkit/io/svg_heatmap.hpp"
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
  app::ScoreRequest request;
  std::string heatmap;
  std::vector<std::string> query_labels, key_labels;
  app.add_option("--query", request.query, "Queries [T, Dq] or [N, T, Dq] (reference PATH[#NAME], - for stdin)")->type_name("REF");
  app.add_option("--keys", request.keys, "Keys [S, Dk] or [N, S, Dk]")->type_name("REF");
  app.add_option("--values", request.values, "Values [S, Dv] or [N, S, Dv] (default: the keys)")->type_name("REF");
  app.add_option("--self", request.self, "Self-attention input X: query = keys = values = X (multi-head forms)")->type_name("REF");
  auto* score_opt = app.add_option("--score", request.score, "Score function: dot, scaled-dot (/sqrt(Dk)), general (q W k), additive (v.tanh(q W_q + k W_k + b))")
                        ->check(CLI::IsMember({"dot", "scaled-dot", "general", "additive"}))
                        ->capture_default_str();
  app.add_option("--weights", request.weights,
                 "Weights bundle: W [Dq, Dk] (general); W_q [Dq, A], W_k [Dk, A], v [A], b [A] (additive); "
                 "nn.MultiheadAttention state_dict (in_proj_weight, out_proj.weight, ...) with --heads")
      ->type_name("REF");
  app.add_option("--mask", request.mask,
                 "causal (key s visible to query t when s <= t), causal-lower-right (s <= t + S - T), or a reference "
                 "to a 0/1 tensor [T, S] / [N, T, S] / [N, NH, T, S] with 1 = ATTEND, 0 = masked")->type_name("causal|causal-lower-right|REF");
  app.add_option("--key-lengths", request.key_lengths, "Valid keys per batch element, [N] integers (padded batches)")->type_name("REF");
  auto* heads_opt = app.add_option("--heads", request.heads, "Multi-head attention with NH heads (needs --weights, or --split-heads)")
      ->transform(tools::positive());
  app.add_flag("--split-heads", request.split_heads, "Multi-head without projections: split Q, K, V into NH equal parts (needs --heads)")
      ->needs(heads_opt);
  app.add_flag("--need-weights", request.need_weights, "Multi-head: add \"weights\" averaged over heads [.., T, S]");
  app.add_flag("--per-head", request.per_head, "Multi-head: add \"weights\" per head [.., NH, T, S]");
  app.add_option("--grad-output", request.grad_output,
                 "Backward pass: d loss / d output (shaped like \"output\", or \"context\" in the score form), or a bundle "
                 "with that member; adds \"grad\": the inputs' (query, keys, values, or self) and the weights' gradients, "
                 "named like the weights")
      ->type_name("REF");
  app.add_option("--heatmap", heatmap, "Also write the weights as an SVG heatmap to FILE.svg; {n} in the name: one file per "
                                     "record of a stream (1, 2, ...), else only one record is accepted")->type_name("FILE.svg");
  app.add_option("--query-labels", query_labels, "Heatmap row labels (comma-separated or several words)")->delimiter(',')->type_name("LABEL");
  app.add_option("--key-labels", key_labels, "Heatmap column labels")->delimiter(',')->type_name("LABEL");
  tools::add_threads_option(app, threads);
  tools::add_output_options(app, out);
  tools::add_input_options(app, in);

  return tools::run(app, argc, argv, [&]() -> int {
    const bool multi = request.multi_head();
    if (!request.self.empty() && (!request.query.empty() || !request.keys.empty() || !request.values.empty()))
      throw UsageError("--self X replaces --query, --keys and --values; give one or the other");
    if (request.self.empty() && (request.query.empty() || request.keys.empty()))
      throw UsageError("give --query and --keys (or --self X for self-attention)");
    if (!multi && (request.need_weights || request.per_head))
      throw UsageError("--need-weights and --per-head belong to the multi-head forms (--heads NH); the score form always prints weights");
    if (request.need_weights && request.per_head) throw UsageError("give --need-weights (averaged over heads) or --per-head, not both");
    if (multi && score_opt->count() && request.score != "scaled-dot")
      throw UsageError("the multi-head forms use the scaled-dot score; --score " + request.score + " needs the score form (no --heads)");
    if (multi && request.split_heads && !request.weights.empty()) throw UsageError("--split-heads uses no projections; drop --weights");
    if (multi && !request.split_heads && request.weights.empty())
      throw UsageError("multi-head attention needs --weights REF (nn.MultiheadAttention weights), or --split-heads");
    if (!multi && !request.weights.empty() && request.score != "general" && request.score != "additive")
      throw UsageError("--weights is for the general and additive scores, or the multi-head forms (--heads NH)");
    if ((!query_labels.empty() || !key_labels.empty()) && heatmap.empty())
      throw UsageError("--query-labels and --key-labels label the --heatmap; give --heatmap FILE.svg");
    request.heatmap = !heatmap.empty();
    set_num_threads(threads);

    io::Sources sources(in.read_options());
    app::ScoreInputs inputs{sources, in.allow_nan, {}, {}};
    inputs.weights = [&]() -> const io::Value& {
      const io::Value& w = sources.value(request.weights);
      tools::refuse_nan_weights(w, request.weights, in.allow_nan);
      return w;
    };
    inputs.mask = [&] {
      return tools::keyword_or_tensor(sources, request.mask, "--mask", {"causal", "causal-lower-right"}, in.allow_nan);
    };
    // One picture per record ({n} in the name: the record's number, 1, 2, ...), each written after its
    // record's result was (a run whose standard output fails leaves none): at the next record, or at the end.
    const size_t numbered = heatmap.find("{n}");
    std::string pending_path;
    Tensor pending_weights;
    auto draw_pending = [&] {
      if (pending_path.empty()) return;
      io::HeatmapOptions h;
      h.row_labels = query_labels;
      h.col_labels = key_labels;
      io::write_heatmap_svg(pending_path, pending_weights, h);
      pending_path.clear();
    };
    tools::per_record(sources, out, [&]() -> io::Value {
      draw_pending();
      app::ScoreResult r = app::run_score(request, inputs);
      if (!heatmap.empty()) {
        const size_t record = sources.record_index() + 1;
        if (numbered == std::string::npos && record > 1)
          throw UsageError("--heatmap " + heatmap + " has no {n} in its name, so it takes one record; got a second");
        pending_path = heatmap;
        if (numbered != std::string::npos) pending_path.replace(numbered, 3, std::to_string(record));
        pending_weights = std::move(r.shown_weights);
      }
      return std::move(r.result);
    });
    draw_pending();
    return 0;
  });
}
