// lstm-run: run a stacked (bi)directional RNN / LSTM / GRU over JSON sequences (docs/lstm-run.md).
#include <iostream>
#include <optional>

#include "attnkit/app/recurrent_request.hpp"
#include "attnkit/io/atomic_file.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"
#include "common/common.hpp"

using namespace attnkit;
using attnkit::tools::UsageError;

int main(int argc, char** argv) {
  CLI::App app{"", "lstm-run"};
  tools::describe(
      app,
      "Run an RNN, LSTM or GRU over JSON tensors.\n"
      "Run an RNN, LSTM or GRU (layers, bidirectional, h0/c0, padded lengths) over x [N, T, D] or [T, D]; "
      "prints {output [N, T, dirs*H], h_n [layers*dirs, N, H], c_n} (docs/lstm-run.md).",
      "  lstm-run --init --input-size 3 --hidden-size 4 --seed 1 --save-weights w.json\n"
      "  tensor randn --shape 2,5,3 --seed 2 > x.json\n"
      "  lstm-run x.json --weights w.json --pretty\n"
      "  tensor transpose x.json --axes 1,0,2 > x_tnd.json   # [T, N, D]\n"
      "  lstm-run x_tnd.json --weights w.json --time-major | tensor show -#output\n"
      "  lstm-run x.json --weights w.json --trace | tensor show -#trace/i\n"
      "  tensor randn --shape 2,1,4 --seed 3 > q.json\n"
      "  lstm-run x.json --weights w.json | attn-score --query q.json --keys -#output\n"
      "  lstm-run --weights w.json --save-weights cs.json --save-layout cs231n\n"
      "  tensor randn --shape 1,2,4 --seed 4 > h0.json && tensor randn --shape 1,2,4 --seed 5 > c0.json && echo '[5, 3]' > len.json\n"
      "  lstm-run x.json --weights cs.json --layout cs231n --h0 h0.json --c0 c0.json --lengths len.json\n"
      "  lstm-run x.json --weights w.json > run.json\n"
      "  lstm-run x.json --weights w.json --grad-output run.json#output | tensor show -#grad/weight_hh_l0\n");
  std::string input_ref, weights_ref, h0_ref, c0_ref, lengths_ref, save_path, grad_ref;
  std::string cell_name = "lstm", layout_text = "torch", save_layout_text;
  bool trace = false, init = false, bidirectional = false, time_major = false;
  int64_t input_size = 0, hidden_size = 0;
  int layers = 1, threads = 0;
  uint64_t seed = 0;
  app.add_option("INPUT", input_ref, "Input x [N, T, D] or [T, D], a reference PATH[#NAME] (- for standard input)");
  auto* weights_opt = app.add_option("--weights", weights_ref, "Weights: a bundle reference (layout: --layout)")
                          ->type_name("REF");
  app.add_option("--cell", cell_name, "Cell")->check(CLI::IsMember({"lstm", "gru", "rnn", "rnn-relu"}))->capture_default_str();
  app.add_option("--layout", layout_text, "Weight names and gate order: torch (state_dict) or cs231n (Wx, Wh, b)")
      ->check(CLI::IsMember({"torch", "cs231n"}))
      ->capture_default_str();
  app.add_option("--h0", h0_ref, "Initial hidden state [layers*dirs, N, H] ([layers*dirs, H] for a [T, D] input)")->type_name("REF");
  app.add_option("--c0", c0_ref, "Initial cell state (LSTM), shaped like --h0")->type_name("REF");
  app.add_option("--lengths", lengths_ref, "Lengths of the sequences [N] (padded steps change nothing)")->type_name("REF");
  app.add_option("--grad-output", grad_ref,
                 "Upstream gradient: a tensor shaped like output, or a bundle of output, h_n, c_n (any of them); "
                 "adds grad {input, h0, c0, every weight by name} for loss = sum(DY * results)")
      ->type_name("REF");
  app.add_flag("--time-major", time_major,
               "INPUT, output, the trace, --grad-output's output and grad/input are [T, N, ..] (PyTorch's "
               "batch_first=False); h0, c0, h_n, c_n stay [layers*dirs, N, H]");
  app.add_flag("--trace", trace, "Add the first layer's per-step values (a, i, f, o, g, c, h / r, z, n, h)");
  auto* init_opt = app.add_flag("--init", init, "Make random weights, U(-1/sqrt(H), 1/sqrt(H)) as PyTorch");
  app.add_option("--input-size", input_size, "--init: input size D")->transform(tools::positive());
  app.add_option("--hidden-size", hidden_size, "--init: hidden size H")->transform(tools::positive());
  app.add_option("--layers", layers, "--init: number of layers")->transform(tools::whole_range(1, 64))->capture_default_str();
  app.add_flag("--bidirectional", bidirectional, "--init: two directions");
  app.add_option("--seed", seed, "--init: seed (the same seed gives the same weights everywhere)")
      ->transform(tools::non_negative())
      ->capture_default_str();
  auto* save_opt = app.add_option("--save-weights", save_path, "Write the weights (atomically) to FILE; - for standard output (without INPUT)")->type_name("FILE");
  app.add_option("--save-layout", save_layout_text, "Layout of --save-weights (default: --layout)")
      ->check(CLI::IsMember({"torch", "cs231n"}))
      ->needs(save_opt);
  weights_opt->excludes(init_opt);
  tools::OutputOptions out;
  tools::InputOptions in;
  tools::add_output_options(app, out);
  tools::add_input_options(app, in);
  tools::add_threads_option(app, threads);
  tools::PrecisionOptions precision;
  tools::add_precision_options(app, precision);
  std::string save_quantized;
  tools::add_save_quantized_option(app, save_quantized);

  return tools::run(app, argc, argv, [&]() -> int {
    set_num_threads(threads);  // the one thread policy: every kernel reads num_threads()
    nn::PrecisionPlan plan = tools::precision_plan(precision);
    tools::check_save_quantized(save_quantized, precision);
    if (plan.precision() != ops::Precision::Fp32 && !grad_ref.empty())
      throw UsageError("--grad-output needs the float32 weights (a backward pass); drop --precision " +
                       precision.precision);
    const ops::CellKind cell = *parse_name(ops::kCellNames, cell_name);  // one of them: --cell checks it
    auto layout_of = [](const std::string& s) { return s == "cs231n" ? nn::WeightLayout::Cs231n : nn::WeightLayout::Torch; };
    const nn::WeightLayout layout = layout_of(layout_text);
    const nn::WeightLayout save_layout = save_layout_text.empty() ? layout : layout_of(save_layout_text);
    if (cell == ops::CellKind::Gru && (layout == nn::WeightLayout::Cs231n || save_layout == nn::WeightLayout::Cs231n))
      throw UsageError("the cs231n layout covers rnn, rnn-relu and lstm (the documents have no GRU); use --layout torch");
    if (!init && weights_ref.empty()) throw UsageError("give --weights REF, or --init to make random weights");
    if (init && (input_size == 0 || hidden_size == 0))
      throw UsageError("--init needs --input-size D and --hidden-size H");
    if (!init && (input_size || hidden_size || layers != 1 || bidirectional))
      throw UsageError("--input-size, --hidden-size, --layers and --bidirectional go with --init (--weights sets them)");
    if (input_ref.empty() && !save_path.empty() && !grad_ref.empty())
      throw UsageError("--grad-output needs an INPUT to run (with --save-weights alone nothing runs)");
    if (input_ref.empty() && !save_path.empty() && time_major)
      throw UsageError("--time-major needs an INPUT to run (with --save-weights alone nothing runs)");
    if (input_ref.empty() && save_path.empty() && save_quantized.empty()) input_ref = "-";

    io::Sources sources(in.read_options());
    std::optional<nn::Recurrent> model;
    std::optional<models::StoredWeights> stored;  // --weights a quantized file (--save-quantized)
    if (init) {
      ops::RecurrentConfig config;
      config.cell = cell, config.input_size = input_size, config.hidden_size = hidden_size;
      config.layers = layers, config.bidirectional = bidirectional;
      const int64_t gates = cell == ops::CellKind::Lstm ? 4 : cell == ops::CellKind::Gru ? 3 : 1;
      for (int l = 0; l < layers; ++l)  // refused before anything is allocated
        tools::refuse_over_limit(fmt::format("--init: weight_ih_l{}", l), {gates * hidden_size, l ? hidden_size * (bidirectional ? 2 : 1) : input_size}, in.max_elements);
      tools::refuse_over_limit("--init: weight_hh_l0", {gates * hidden_size, hidden_size}, in.max_elements);
      Rng rng(seed);
      model = nn::Recurrent::random(config, rng);
    } else {
      const io::Value weights = models::take_quantized_weights(sources.single_value(weights_ref, "weights"),
                                                               weights_ref, stored);
      tools::refuse_nan_weights(weights, weights_ref, in.allow_nan);
      for (const auto& [name, w] : weights.members())  // PyTorch's nn.LSTM(proj_size=P) adds weight_hr_l*
        AK_CHECK(name.rfind("weight_hr_l", 0) != 0, "{}: {}: proj_size is not supported (an LSTM with projections)", weights_ref, name);
      model = tools::with_source(weights_ref, [&] { return nn::Recurrent::from_bundle(weights, cell, layout); });
    }
    tools::use_stored_weights(plan, stored, weights_ref, "lstm-run");
    model->set_precision(plan);  // the names --keep-fp32 matches: the torch state_dict names (weight_ih_l0, ...)
    tools::report_precision(plan, "lstm-run");
    if (!save_quantized.empty()) {  // the state_dict (torch layout) with the "quantized" section
      io::Value v;
      const std::map<std::string, std::string> dtypes = models::add_quantized_parameters(v, *model, plan);
      io::write_file_atomic(save_quantized, io::safetensors_bytes(v, save_quantized, dtypes));
      if (input_ref.empty() && save_path.empty()) return 0;  // --save-quantized alone
    }
    // --save-weights is written last: after the run succeeded and its result was written
    if (save_path == "-" && !input_ref.empty() && out.path == "-")
      throw UsageError("--save-weights - and the result would share standard output; give the weights a FILE, or -o FILE for the result");
    tools::OutputOptions save_to;
    save_to.path = save_path;
    auto save = [&] { if (!save_path.empty()) tools::emit_value(save_to, model->to_bundle(save_layout)); };
    if (input_ref.empty()) return save(), 0;  // --save-weights alone

    tools::per_record(sources, out, [&] {
      auto tensor = [&](const std::string& ref, const char* role) {
        return sources.tensor(ref, role, in.allow_nan);
      };
      std::optional<Tensor> h0, c0, lengths;
      if (!h0_ref.empty()) h0 = tensor(h0_ref, "h0");
      if (!c0_ref.empty()) c0 = tensor(c0_ref, "c0");
      if (!lengths_ref.empty()) lengths = tensor(lengths_ref, "lengths");
      app::SequenceRequest req;
      req.x = tensor(input_ref, "input");
      if (time_major && req.x.rank() == 2)
        fail("{}: input has shape {}: --time-major reads [T, N, D], and a [T, D] input has no batch axis to move "
             "(drop --time-major)", io::display_name(input_ref), req.x.shape_str());
      req.time_major = time_major;
      req.sources = {io::display_name(input_ref), h0_ref.empty() ? "" : io::display_name(h0_ref),
                     c0_ref.empty() ? "" : io::display_name(c0_ref), lengths_ref.empty() ? "" : io::display_name(lengths_ref)};
      req.h0 = h0 ? &*h0 : nullptr;
      req.c0 = c0 ? &*c0 : nullptr;
      req.lengths = lengths ? &*lengths : nullptr;
      req.trace = trace;
      req.layout = layout;
      if (!grad_ref.empty()) {
        req.grad_output = &sources.tensor_or_bundle(grad_ref);
        req.grad_output_source = io::display_name(grad_ref);
      }
      return app::run_sequence(*model, req);
    });
    save();
    return 0;
  });
}
