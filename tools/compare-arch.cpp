// compare-arch: CNN vs RNN vs self-attention, computed (the analytic table), measured (time, GFLOP/s,
// peak memory over a sweep of n), traced (the gradient path at initialisation) and learned (a
// long-range recall task). The work is in lib/attnkit/arch; docs/compare-arch.md is the manual.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "attnkit/arch/report.hpp"
#include "attnkit/io/atomic_file.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"
#include "common/common.hpp"

using namespace attnkit;
using attnkit::tools::UsageError;

namespace {

// "16,64,256" -> {16, 64, 256}; every value an integer >= minimum.
std::vector<int64_t> parse_list(const std::string& text, const std::string& option, int64_t minimum) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    int64_t v = 0;
    if (!CLI::detail::lexical_cast(item, v) || v < minimum)
      throw UsageError(fmt::format("{} \"{}\": \"{}\" is not an integer >= {} (give a comma-separated list such as 16,64,256)",
                                   option, text, item, minimum));
    out.push_back(v);
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

std::vector<arch::Layer> parse_layers(const std::string& text) {
  std::vector<arch::Layer> out;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    try {
      out.push_back(arch::parse_layer(item));
    } catch (const Error& e) {
      throw UsageError(std::string("--layers: ") + e.what());
    }
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

void refuse_memory(double need, const std::string& what) {
  const double have = arch::available_memory_bytes();
  if (have > 0 && need > have)
    fail("{} needs about {:.2f} GB, more than the {:.2f} GB this machine has available", what, need / 1e9,
         have / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"", "compare-arch"};
  tools::describe(
      app,
      "Compare CNN, RNN and self-attention on this machine.\n"
      "CNN vs RNN vs self-attention on this machine: the analytic table of \"Attention Is All You Need\" (Table 1) "
      "evaluated for --n --d --k --r; with --measure the forward time, GFLOP/s and peak memory of each layer type "
      "over a sweep of n (1 thread and --threads), with the log-log slope; with --gradient-path the gradient norm "
      "against distance at initialisation; with --learn the accuracy on a long-range recall task against n "
      "(docs/compare-arch.md). JSON on standard output unless --format table.",
      "  compare-arch --n 512 --d 512 --format table\n"
      "  compare-arch --measure --sweep 16,64,256 --d 64 --repeats 3 --format table\n"
      "  compare-arch --gradient-path --n 64 --path-d 16 --plot grad.svg > report.json\n"
      "  compare-arch --learn --learn-n 8,16 --learn-steps 20 --layers rnn,attention-tiled --format table\n");
  arch::Sizes sizes;
  std::string sweep_text = "16,64,256,1024,4096", layers_text, learn_n_text = "8,32,128", format = "json", output = "-",
              plot_path;
  bool measure = false, gradient = false, learn = false, pretty = false, no_memory = false;
  int threads = 0, repeats = 5, learn_steps = 300;
  int64_t path_d = 32, learn_d = 32, learn_batch = 32;
  double lr = 3e-3;
  uint64_t seed = 0;
  app.add_option("--n", sizes.n, "Sequence length of the analytic table and the gradient path")
      ->transform(tools::whole_range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--d", sizes.d, "Model size (channels, hidden size, attention size)")
      ->transform(tools::whole_range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--k", sizes.k, "Convolution kernel size (>= 2)")->transform(tools::whole_range(int64_t{2}, int64_t{1} << 20))->capture_default_str();
  app.add_option("--r", sizes.r, "Restricted self-attention: keys per query (>= 2)")
      ->transform(tools::whole_range(int64_t{2}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--batch", sizes.batch, "Sequences per forward in --measure")->transform(tools::whole_range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  app.add_flag("--measure", measure, "Time each layer type over --sweep (and weigh its peak memory)");
  app.add_option("--sweep", sweep_text, "Sequence lengths to measure, comma-separated")->capture_default_str();
  app.add_option("--layers", layers_text,
                 "Layer types to measure / train, comma-separated: conv, conv-stack, rnn, lstm, attention, "
                 "attention-tiled, local-attention (default: all to measure; the gradient path and --learn have their own)");
  app.add_option("--repeats", repeats, "Timed runs per layer and n (median and min..max reported)")->transform(tools::whole_range(1, 1000))->capture_default_str();
  app.add_flag("--no-memory", no_memory, "Skip the peak-memory measurement");
  app.add_flag("--gradient-path", gradient, "Gradient norm of the last output against distance, at initialisation");
  app.add_option("--path-d", path_d, "Model size of the gradient path (exact Jacobian norms up to 64)")
      ->transform(tools::whole_range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();
  app.add_flag("--learn", learn, "Train each layer type on the recall task for each --learn-n");
  app.add_option("--learn-n", learn_n_text, "Sequence lengths of the recall task, comma-separated (>= 2)")->capture_default_str();
  app.add_option("--learn-steps", learn_steps, "Training steps per run (the same budget for each)")->transform(tools::whole_range(1, 1000000))->capture_default_str();
  app.add_option("--learn-d", learn_d, "Model size of the learning runs")->transform(tools::whole_range(int64_t{1}, int64_t{1} << 16))->capture_default_str();
  app.add_option("--learn-batch", learn_batch, "Batch of the learning runs")->transform(tools::whole_range(int64_t{1}, int64_t{1} << 16))->capture_default_str();
  app.add_option("--lr", lr, "Adam's learning rate in the learning runs")->transform(tools::positive())->capture_default_str();
  tools::add_threads_option(app, threads);
  app.add_option("--format", format, "json, or table (aligned text)")->check(CLI::IsMember({"json", "table"}))->capture_default_str();
  app.add_flag("--pretty", pretty, "Indent the JSON");
  app.add_option("-o,--output", output, "Write the report to FILE (atomically) instead of standard output")->type_name("FILE");
  app.add_option("--plot", plot_path, "Also draw time against n (log-log), the gradient curves and the accuracies")
      ->type_name("FILE.svg");
  app.add_option("--seed", seed, "Seed of the inputs, the weights and the learning data")
      ->transform(tools::non_negative())
      ->capture_default_str();

  return tools::run(app, argc, argv, [&]() -> int {
    // Everything is checked before any work starts.
    set_num_threads(threads);
    const int all_threads = num_threads();
    arch::check_sizes(sizes);
    arch::MeasureOptions mo;
    mo.sweep = parse_list(sweep_text, "--sweep", 1);
    mo.repeats = repeats;
    mo.memory = !no_memory;
    mo.seed = seed;
    mo.threads = all_threads > 1 ? std::vector<int>{1, all_threads} : std::vector<int>{1};
    arch::LearnOptions lo;
    lo.lengths = parse_list(learn_n_text, "--learn-n", 2);
    lo.steps = learn_steps;
    lo.d = learn_d;
    lo.batch = learn_batch;
    lo.lr = lr;
    lo.seed = seed;
    if (!layers_text.empty()) mo.layers = lo.layers = parse_layers(layers_text);
    if (!plot_path.empty() && !measure && !gradient && !learn)
      throw UsageError("--plot draws the measurement, the gradient path or the learning runs: add --measure, "
                       "--gradient-path or --learn");
    arch::Sizes path_sizes = sizes;
    path_sizes.d = path_d;
    const std::vector<arch::Layer> path_layers{arch::Layer::Rnn, arch::Layer::Lstm, arch::Layer::ConvStack,
                                               arch::Layer::AttentionTiled};
    if (measure) refuse_memory(arch::measure_memory_bound(sizes, mo), "--measure");
    // the gradient path holds P = min(d, 16)-or-d copies of the sequence, and the LSTM keeps ~12 of those per copy
    if (gradient) refuse_memory(4.0 * double(path_d <= 64 ? path_d : 16) * double(sizes.n) * double(path_d) * 16,
                                "--gradient-path");
    if (learn) {
      int64_t longest = 0;
      for (int64_t n : lo.lengths) longest = std::max(longest, n);
      refuse_memory(4.0 * double(learn_batch) * double(longest) * double(learn_d) * 64, "--learn");
    }

    const bool show = isatty(2) == 1;
    auto progress = [&](const std::string& what, int64_t done, int64_t total) {
      if (!show) return;
      // one line that fits the terminal (a wider one wraps, and each redraw scrolls), the rest cleared
      std::string line = fmt::format("compare-arch: {:3d}% {}", total ? int(100 * done / total) : 100, what);
      line.resize(std::min<size_t>(line.size(), static_cast<size_t>(tools::stderr_columns() - 1)));
      std::fprintf(stderr, "\r%s\x1b[K", line.c_str());
      std::fflush(stderr);
    };
    mo.progress = lo.progress = progress;

    arch::Report report;
    report.sizes = sizes;
    report.seed = seed;
    report.machine = arch::machine_info();
    report.analytic = arch::analytic_table(sizes);
    report.measure_options = mo;
    report.learn_options = lo;
    if (measure) report.measured = arch::measure(sizes, mo);
    if (gradient) {
      progress("gradient path", 0, 1);
      report.gradient = arch::gradient_path(path_sizes, path_layers, seed);
      report.gradient_sizes = path_sizes;
    }
    if (learn) report.learned = arch::learn(sizes, lo);
    if (show && (measure || gradient || learn)) std::fprintf(stderr, "\r\x1b[K");
    report.machine.load_after = arch::load_average();

    std::string text = format == "table" ? arch::report_table(report) : arch::report_json(report, pretty);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    if (!plot_path.empty()) io::write_file_atomic(plot_path, arch::report_svg(report));
    tools::OutputOptions out;
    out.path = output;
    tools::emit(out, std::move(text));
    return 0;
  });
}
