// seq2seq-train: train a recurrent encoder-decoder (with or without attention) on a built-in task or on
// TSV / JSONL files; checkpoints that resume exactly (docs/seq2seq-train.md).
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "attnkit/io/atomic_file.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/checkpoint.hpp"
#include "attnkit/models/fields.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/models/size_estimate.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/train/distributed.hpp"
#include "attnkit/train/lm_trainer.hpp"
#include "attnkit/train/report.hpp"
#include "attnkit/train/spm_models.hpp"
#include "attnkit/train/trainer.hpp"
#include "common/common.hpp"

using namespace attnkit;
using attnkit::tools::UsageError;

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) { g_signal = sig; }
// SIGINT / SIGTERM: the run finishes its step, saves and exits 130 / 143; the handler is reset after the first
// signal, so a second Ctrl-C stops at once (the checkpoint on disk is still a complete one).
// Refuses (exit 1, naming the option) a destination that cannot be written, before any training: a
// temporary file is made beside it and removed (what the atomic write at the end will need), and a file
// that exists must open for appending (the metrics file is appended to).
void check_destination(const char* option, const std::string& path) {
  if (path.empty()) return;
  try {
    io::AtomicFileWriter probe(path);  // not committed: its temporary is removed, `path` is untouched
    std::ifstream exists(path);
    if (exists.good()) {
      exists.close();
      std::ofstream f(path, std::ios::app | std::ios::binary);
      AK_CHECK(f.good(), "{}: cannot open for appending", path);
    }
  } catch (const Error& e) {
    fail("{} {}: {}", option, path, e.what());
  }
}

// The metrics file's lines for --plot; a torn file (a last line without its newline, a line that is not a
// JSON object with a step) is refused, naming the file and the line.
std::vector<std::string> read_metrics_for_plot(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  AK_CHECK(f.good(), "--plot: {}: cannot read the metrics", path);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const size_t n = lines.size() + 1;
    AK_CHECK(end != std::string::npos, "--plot: {}: line {} has no newline (a torn metrics file)", path, n);
    std::string line = text.substr(at, end - at);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    AK_CHECK(j.is_object() && j.contains("step") && j["step"].is_number(),
             "--plot: {}: line {} is not a metrics line (a torn or foreign metrics file)", path, n);
    lines.push_back(std::move(line));
    at = end + 1;
  }
  return lines;
}

// Before a fresh model is allocated: its parameters counted from the options (models/size_estimate.hpp), times
// 4 floats each (the value, its gradient, Adam's two moments), must fit in kMaxTrainingBytes.
constexpr double kMaxTrainingBytes = 8.0 * 1024 * 1024 * 1024;

void refuse_oversized(double params, CLI::App& app) {
  const double bytes = params * 4 * sizeof(float);
  if (bytes <= kMaxTrainingBytes) return;
  std::string sizes;
  for (const char* name : {"--layers", "--hidden", "--embed", "--d-model", "--ff"})
    if (app.get_option(name)->count() > 0) sizes += fmt::format(" {} {}", name, app.get_option(name)->as<std::string>());
  throw UsageError(fmt::format(
      "the model would have about {:.3g} parameters: {:.3g} bytes ({:.1f} GiB) with gradients and optimizer state, "
      "more than the limit of 8 GiB (from{})",
      params, bytes, bytes / 1024 / 1024 / 1024, sizes.empty() ? " the defaults" : sizes));
}

// --resume: the options the checkpoint was trained with (its "training" section's "options") that the command
// line does not give are set as if given; one given with another value is refused unless --override (the
// vocabulary options excepted, below).
// A checkpoint saved without them keeps today's behaviour: the command line gives the data and the rates.
// A value given again on resume is the checkpoint's when the texts agree, or when both are numbers of the same
// value (--lr 0.010 is --lr 0.01, --steps 1e3 is 1000).
bool same_option_value(const std::string& given, const std::string& saved) {
  if (given == saved) return true;
  const auto number = [](const std::string& text, double& x) {
    char* end = nullptr;
    x = std::strtod(text.c_str(), &end);
    return !text.empty() && end == text.c_str() + text.size() && std::isfinite(x);
  };
  double a = 0, b = 0;
  return number(given, a) && number(saved, b) && a == b;
}

void restore_options(CLI::App& app, const std::string& path, const std::vector<std::string>& names, bool override) {
  const io::Value v = io::read_value_file(path);
  const io::Value* training = v.is_bundle() ? v.find("training") : nullptr;
  const io::Value* saved = training && training->is_bundle() ? training->find("options") : nullptr;
  if (!saved || !saved->is_bundle()) {
    std::cerr << "seq2seq-train: " << path
              << ": saved without its training options: the data, rates and schedule come from this command line\n";
    return;
  }
  const models::Fields fields(*saved, path + ": training: options");
  for (const std::string& name : names) {
    const std::optional<std::string> value = fields.text_if(name);
    if (!value) continue;
    CLI::Option* opt = app.get_option(name);
    if (opt->count() > 0) {
      // The vocabulary options are judged by what they give: the checkpoint's vocabulary is compared with
      // the one they build (the same tokens from another file, the checkpoint itself, go on; others are
      // refused naming the difference).
      if (name == "--vocab" || name == "--vocab-size") continue;
      std::string given = opt->as<std::string>();
      if (name == "--skip-bad-lines" || name == "--deterministic-reduce" || name == "--right-left") given = "true";
      if (!same_option_value(given, *value)) {
        if (!override)
          throw UsageError(fmt::format("{} {}: the checkpoint {} was trained with {} {}; give --override to change it",
                                       name, given, path, name, *value));
        std::cerr << fmt::format("seq2seq-train: {} {} replaces the checkpoint's {} {} (--override)\n", name, given,
                                 name, *value);
      }
      continue;
    }
    if (name == "--skip-bad-lines" && *value == "false") continue;
    opt->add_result(*value);
    opt->run_callback();
  }
}

// --schedule, --lr and --warmup as the trainers take them (translation models and language models alike): --lr is
// the peak rate under every schedule. Noam: with d = 1 and factor sqrt(W) the formula
// factor * d^-0.5 * min(s^-0.5, s * W^-1.5) becomes min(sqrt(W / s), s / W), 1 at s = W. Cosine: over the run.
train::ScheduleOptions schedule_options(const std::string& name, double lr, int64_t warmup) {
  train::ScheduleOptions o;
  o.kind = train::parse_schedule_kind(name);
  o.lr = lr;
  o.warmup_steps = warmup;
  if (o.kind == train::ScheduleKind::Cosine) o.t_max = 0;  // the run's length
  if (o.kind == train::ScheduleKind::Noam) {
    if (warmup == 0) throw UsageError("--schedule noam needs --warmup N (N >= 1)");
    o.d_model = 1;
    o.factor = std::sqrt(static_cast<double>(warmup));
  }
  return o;
}

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"", "seq2seq-train"};
  tools::describe(
      app,
      "Train a recurrent or Transformer encoder-decoder.\n"
      "Train a recurrent encoder-decoder (rnn, lstm, gru; attention none, dot, scaled-dot, general or additive, "
      "Luong or Bahdanau style) or a Transformer (--layers encoder and decoder layers, --heads, --d-model, --ff, "
      "--norm-first) with teacher forcing or scheduled sampling, optionally dropout; writes a checkpoint "
      "(a JSON bundle) and prints a summary. SIGINT / SIGTERM finish the step, save and exit 130 / 143 "
      "(docs/seq2seq-train.md).",
      "  seq2seq-train --task reverse --model lstm --attention dot --hidden 32 --steps 100 --save model.json\n"
      "  seq2seq-train --task reverse --model lstm --attention dot --hidden 32 --steps 150 --resume model.json "
      "--save model.json\n"
      "  printf 'cat\\tkat\\ndog\\tdog\\n' > pairs.tsv; seq2seq-train --train pairs.tsv --valid pairs.tsv --model gru \\\n"
      "      --attention additive --hidden 16 --steps 20 --save g.json\n"
      "  seq2seq-train --train pairs.tsv --tokenizer spm --vocab-size 12 --model gru --hidden 16 --steps 20 \\\n"
      "      --save s.json; transformer-decode s.json --src cat\n"
      "  seq2seq-train --task dates --model lstm --attention additive --hidden 32 --train-size 200 --epochs 2 \\\n"
      "      --save-every 5 --log-every 2 --save d.json --metrics d.jsonl --plot d.svg\n"
      "  seq2seq-train --task copy --model transformer --layers 2 --d-model 32 --heads 4 --ff 64 --schedule noam \\\n"
      "      --warmup 40 --lr 0.005 --steps 50 --save t.json\n"
      "  tensor randn --shape 2x5x32 > x.json; lstm-run x.json --weights model.json#encoder\n"
      "  printf 'to be or not to be, that is the question\\n%.0s' 1 2 3 4 5 6 > text.txt\n"
      "  seq2seq-train --model transformer-lm --train text.txt --valid text.txt --context 16 --layers 2 --d-model 32 \\\n"
      "      --heads 4 --ff 64 --steps 30 --lr 0.003 --save lm.json\n");
  std::string task, train_path, valid_path, model_name, attention = "none", optimizer = "adam",
                                                       schedule = "constant", save_path, resume_path, metrics_path,
                                                       tokenizer = "char", target_tokenizer;
  int64_t maxi_batch = 0;
  int64_t hidden = 64, embed = 32, steps = 1000, batch = 32, warmup = 0, log_every = 100, max_len = 0;
  int64_t vocab_size = 10, min_len = 1, task_max_len = 10, train_size = 1000, valid_size = 100;
  int layers = 1, threads = 0;
  bool bidirectional = false, skip_bad_lines = false;
  double lr = 1e-3, label_smoothing = 0.0, clip = 1.0;
  uint64_t seed = 1;
  auto* task_opt = app.add_option("--task", task, "Built-in task")->check(CLI::IsMember({"copy", "reverse", "sort", "dates"}));
  auto* train_opt = app.add_option("--train", train_path, "Training file: TSV (source TAB target) or JSONL {src, tgt}")
                        ->type_name("FILE");
  app.add_option("--valid", valid_path, "Validation file (same format)")->type_name("FILE");
  app.add_option("--tokenizer", tokenizer, "Files: tokenizer of the source (and target); spm: SentencePiece "
                                          "subwords (--vocab-size or --spm-model)")
      ->check(CLI::IsMember({"char", "space", "ids", "byte", "spm"}))
      ->capture_default_str();
  app.add_option("--target-tokenizer", target_tokenizer, "Files: the target's tokenizer (default: --tokenizer); "
                                                        "spm: its own SentencePiece model (--target-vocab-size or "
                                                        "--target-spm-model)")
      ->check(CLI::IsMember({"char", "space", "ids", "byte", "spm"}));
  app.add_flag("--skip-bad-lines", skip_bad_lines, "Files: skip (and count) bad lines instead of failing");
  app.add_option("--max-len", max_len, "Files: longest sequence accepted; tasks: longest sequence generated")
      ->transform(tools::non_negative());
  app.add_option("--vocab-size", vocab_size, "Task: tokens 0 .. N-1 (copy, reverse, sort); --tokenizer spm: the "
                                            "SentencePiece model's pieces, trained on --train")
      ->transform(tools::positive())
      ->capture_default_str();
  std::string spm_model_path, spm_type = "unigram";
  int64_t spm_sentences = 1000000;
  app.add_option("--spm-model", spm_model_path, "--tokenizer spm: use this SentencePiece model instead of training "
                                                "one (with --resume: must be the checkpoint's)")
      ->type_name("FILE.model");
  app.add_option("--spm-type", spm_type, "--tokenizer spm: the SentencePiece model trained")
      ->check(CLI::IsMember({"unigram", "bpe"}))
      ->capture_default_str();
  app.add_option("--spm-sentences", spm_sentences, "--tokenizer spm: lines sampled from --train to train SentencePiece")
      ->transform(tools::positive())
      ->capture_default_str();
  int64_t target_vocab_size = 0;
  std::string target_spm_model_path;
  app.add_option("--target-vocab-size", target_vocab_size, "--target-tokenizer spm: the target's SentencePiece "
                                                           "model's pieces, trained on --train's targets (default: "
                                                           "the source's --vocab-size or --spm-model)")
      ->transform(tools::positive());
  app.add_option("--target-spm-model", target_spm_model_path, "--target-tokenizer spm: use this SentencePiece model "
                                                              "for the target (with --resume: must be the "
                                                              "checkpoint's)")
      ->type_name("FILE.model");
  app.add_option("--min-len", min_len, "Task: shortest sequence")->transform(tools::positive())->capture_default_str();
  app.add_option("--train-size", train_size, "Task: training examples")->transform(tools::positive())->capture_default_str();
  app.add_option("--valid-size", valid_size, "Task: held-out examples")->transform(tools::non_negative())->capture_default_str();
  auto* model_opt = app.add_option("--model", model_name, "Cell of encoder and decoder, or transformer; "
                                                          "a language model on a text file: transformer-lm (decoder-only), "
                                                          "lstm-lm, gru-lm, rnn-lm")
                        ->check(CLI::IsMember({"lstm", "gru", "rnn", "transformer", "transformer-lm", "lstm-lm",
                                               "gru-lm", "rnn-lm"}));
  app.add_option("--attention", attention, "Luong attention's score, or none (the fixed context)")
      ->check(CLI::IsMember({"none", "dot", "scaled-dot", "general", "additive"}))
      ->capture_default_str();
  app.add_option("--hidden", hidden, "Hidden size per direction")->transform(tools::positive())->capture_default_str();
  app.add_option("--embed", embed, "Embedding size")->transform(tools::positive())->capture_default_str();
  app.add_option("--layers", layers, "Layers of encoder and decoder")->transform(tools::whole_range(1, 16))->capture_default_str();
  app.add_flag("--bidirectional", bidirectional, "Bidirectional encoder (the decoder's hidden size doubles)");
  int64_t attention_dim = 0, decoder_hidden = 0;
  app.add_option("--decoder-hidden", decoder_hidden,
                 "The decoder's hidden size (default the encoder's output: --hidden, twice it with --bidirectional); "
                 "another size bridges the encoder's final state to it")
      ->transform(tools::whole_range(1, 65536));
  app.add_option("--attention-dim", attention_dim,
                 "Additive attention's projection size A (W_q, W_k [Hd, A], v [A]; default Hd, the decoder's size)")
      ->transform(tools::whole_range(1, 65536));
  std::string attention_style = "luong";
  double dropout = 0.0, teacher_forcing = 1.0;
  app.add_option("--attention-style", attention_style,
                 "luong: the current decoder state attends; bahdanau: the previous one, context fed into the cell")
      ->check(CLI::IsMember({"luong", "bahdanau"}))
      ->capture_default_str();
  app.add_option("--dropout", dropout,
                 "Dropout on embeddings, between layers and before the output layer (default 0; transformer: 0.1, "
                 "nn.Transformer's, on every sublayer)")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--teacher-forcing", teacher_forcing,
                 "Probability of feeding the reference token; below 1 the model's own argmax otherwise")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  int64_t heads = 4, d_model = 128, ff = 512;
  bool norm_first = false;
  app.add_option("--heads", heads, "Transformer: attention heads (divide --d-model)")->transform(tools::positive())->capture_default_str();
  app.add_option("--d-model", d_model, "Transformer: model size")->transform(tools::positive())->capture_default_str();
  app.add_option("--ff", ff, "Transformer: feed-forward size")->transform(tools::positive())->capture_default_str();
  app.add_flag("--norm-first", norm_first, "Transformer: pre-LN layers (default post-LN, the paper's)");
  // the language model's (docs/language-models.md)
  int64_t context = 64;
  bool tied = false, post_ln = false;
  std::string positional = "learned", activation = "gelu";
  app.add_option("--context", context, "Language models: tokens per training window (transformer-lm: also its "
                                       "learned positions; the recurrent ones: the truncated BPTT length)")
      ->transform(tools::positive())
      ->capture_default_str();
  app.add_flag("--tied", tied, "Language models: the output projection shares the embedding's weights");
  app.add_flag("--post-ln", post_ln, "transformer-lm: post-LN layers (default pre-LN, GPT-2's)");
  app.add_option("--positional", positional, "transformer-lm: position encoding")
      ->check(CLI::IsMember({"learned", "sinusoidal"}))
      ->capture_default_str();
  app.add_option("--activation", activation, "transformer-lm: feed-forward activation")
      ->check(CLI::IsMember({"gelu", "relu"}))
      ->capture_default_str();
  auto* steps_opt = app.add_option("--steps", steps, "Total optimizer steps (with --resume: up to this total)")
                        ->transform(tools::whole_range(0, train::kMaxSteps))
                        ->capture_default_str();
  app.add_option("--batch", batch, "Batch size")->transform(tools::positive())->capture_default_str();
  app.add_option("--maxi-batch", maxi_batch,
                 "Batches of similar lengths: sort the shuffled examples by length in windows of N batches, then "
                 "shuffle the batches (0 or 1: no sorting)")
      ->transform(tools::whole_range(0, train::kMaxMaxiBatch))
      ->capture_default_str();
  app.add_option("--lr", lr, "Peak learning rate (every schedule: the rate reached after --warmup)")->transform(tools::non_negative())->capture_default_str();
  app.add_option("--optimizer", optimizer, "Optimizer")->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  app.add_option("--schedule", schedule, "Learning-rate schedule")
      ->check(CLI::IsMember({"constant", "cosine", "noam"}))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "Linear warmup steps")->transform(tools::non_negative())->capture_default_str();
  app.add_option("--label-smoothing", label_smoothing, "Label smoothing in [0, 1)")->check(CLI::Range(0.0, 0.999))->capture_default_str();
  bool right_left = false;
  app.add_flag("--right-left", right_left,
               "Learn every target reversed, last token first: a right-to-left model, to rescore a left-to-right "
               "model's beam with (seq2seq-eval --rescore); its outputs read left to right again when decoded");
  app.add_option("--clip", clip, "Max gradient norm (0: no clipping)")->transform(tools::non_negative())->capture_default_str();
  app.add_option("--seed", seed, "Seed of the task, the initialisation and the data order")
      ->transform(tools::non_negative())
      ->capture_default_str();
  tools::add_threads_option(app, threads);
  std::string matmul_precision = "float32";
  app.add_option("--matmul-precision", matmul_precision,
                 "Multiplications of the products: float32, or bf16 (operands rounded to bfloat16, sums in float32: "
                 "about 1.5 times the training rate; processors with AVX512_BF16, docs/seq2seq-train.md)")
      ->check(CLI::IsMember({"float32", "bf16"}))
      ->capture_default_str();
  auto* save_opt = app.add_option("--save", save_path, "Checkpoint to write (atomically): JSON, or .safetensors / .npz by extension")->type_name("MODEL.json");
  app.add_option("--resume", resume_path, "Continue this checkpoint (.json, .safetensors, .npz) up to --steps")->type_name("MODEL.json");
  app.add_option("--metrics", metrics_path, "Append one JSON line per logged step")->type_name("FILE.jsonl");
  app.add_option("--log-every", log_every, "Steps between metrics lines (and validations)")->transform(tools::positive())->capture_default_str();
  // operations: epochs, periodic checkpoints, a plot, a given vocabulary
  int64_t epochs = 0, save_every = 0;
  std::string plot_path, vocab_path;
  auto* epochs_opt = app.add_option("--epochs", epochs, "Train this many epochs in all (instead of --steps)")
                         ->transform(tools::whole_range(1, train::kMaxSteps));
  app.add_option("--save-every", save_every, "Also save the checkpoint every N steps")->transform(tools::positive());
  int64_t keep_last = 0;
  app.add_option("--keep-last", keep_last, "With --save-every: also keep those saves and the last as numbered "
                                           "checkpoints MODEL.stepS.json, the newest N (for --average)")
      ->transform(tools::positive());
  std::vector<std::string> average_paths;
  app.add_option("--average", average_paths, "Average the parameters of these checkpoints of one model into --save "
                                             "(checkpoint averaging; no training)")
      ->type_name("MODEL.json ...");
  app.add_option("--plot", plot_path, "Draw training and validation loss against step (SVG)")->type_name("FILE.svg");
  app.add_option("--vocab", vocab_path, "Vocabulary file: one token per line, or JSON (docs/seq2seq-train.md)")
      ->type_name("FILE");
  epochs_opt->excludes(steps_opt);
  task_opt->excludes(train_opt);
  save_opt->required();

  // Data parallelism (docs/distributed.md): mpirun -n K seq2seq-train ... trains one model on K processes.
  int64_t grad_shards = 0;
  bool deterministic_reduce = false;
  app.add_option("--grad-shards", grad_shards,
                 "Cut each batch into N shards whose gradients are summed (default: one per MPI process; "
                 "a multiple of them, dividing --batch); with --train each shard trains on its own part of the file")
      ->transform(tools::positive());
  app.add_flag("--deterministic-reduce", deterministic_reduce,
               "Sum the shards' gradients in a fixed order: the same bits for every process count");
  train::Communicator& comm = train::world();  // MPI's world under mpirun, else this process alone
  const bool lead = comm.rank() == 0;           // prints the summary, writes the checkpoint and metrics

  bool override_options = false;
  app.add_flag("--override", override_options,
               "With --resume: let options given again change the checkpoint's training configuration");
  // The training configuration a checkpoint stores and --resume restores (the run's length, its outputs and
  // the model's shape aside: the checkpoint's config holds the model).
  const std::vector<std::string> restored = {
      "--task", "--train", "--valid", "--tokenizer", "--target-tokenizer", "--skip-bad-lines", "--max-len",
      "--vocab-size", "--min-len", "--train-size", "--valid-size", "--vocab", "--optimizer", "--lr", "--schedule",
      "--warmup", "--label-smoothing", "--clip", "--dropout", "--teacher-forcing", "--batch", "--maxi-batch",
      "--seed", "--model", "--context", "--deterministic-reduce", "--right-left", "--matmul-precision"};
  // Of those, the ones a language model's checkpoint stores.
  const std::vector<std::string> lm_restored = {"--model", "--train", "--valid", "--tokenizer", "--context",
                                                "--optimizer", "--lr", "--schedule", "--warmup", "--clip",
                                                "--dropout", "--batch", "--seed", "--matmul-precision"};

  // seq2seq-train --model transformer-lm|lstm-lm|gru-lm|rnn-lm: a language model on a text file
  // (train/lm_trainer.hpp).
  // --tokenizer spm: the checkpoint's SentencePiece model on --resume, else --spm-model's, else one trained on
  // --train (models/spm.hpp).
  auto spm_model = [&]() -> models::SpmModel {
    if (!models::SpmModel::available())
      throw UsageError("--tokenizer spm: this build has no SentencePiece (install libsentencepiece-dev, e.g. with "
                       "scripts/setup.sh, and build again)");
    const bool sized = app.get_option("--vocab-size")->count() > 0;
    auto agree = [&](const models::SpmModel& m, const std::string& name) {
      if (sized && vocab_size != m.pieces())
        throw UsageError(fmt::format("--vocab-size {} disagrees with {}, a SentencePiece model of {} pieces (leave "
                                     "--vocab-size out)", vocab_size, name, m.pieces()));
    };
    const char* training[] = {"--spm-type", "--spm-sentences"};
    if (!resume_path.empty() || !spm_model_path.empty())
      for (const char* name : training)
        if (app.get_option(name)->count() > 0)
          throw UsageError(fmt::format("{} goes with training a SentencePiece model, not with {}", name,
                                       resume_path.empty() ? "--spm-model" : "--resume (the checkpoint's model)"));
    if (!resume_path.empty()) {
      std::optional<models::SpmModel> stored = train::LmTrainer::stored_spm(resume_path);
      if (!stored) throw UsageError("--tokenizer spm: the checkpoint " + resume_path + " has no SentencePiece model");
      if (!spm_model_path.empty())
        models::check_same_spm(*stored, resume_path, models::SpmModel::read_file(spm_model_path), spm_model_path);
      agree(*stored, "the checkpoint " + resume_path + "'s");
      return *stored;
    }
    if (!spm_model_path.empty()) {
      models::SpmModel m = models::SpmModel::read_file(spm_model_path);
      agree(m, spm_model_path);
      return m;
    }
    if (!sized)
      throw UsageError("--tokenizer spm needs --vocab-size N (a SentencePiece model of N pieces is trained on --train) "
                       "or --spm-model FILE.model");
    if (vocab_size < models::SpmModel::kMinVocabSize || vocab_size > models::SpmModel::kMaxVocabSize)
      throw UsageError(fmt::format("--vocab-size {} with --tokenizer spm: a SentencePiece model's is in [{}, {}]",
                                   vocab_size, models::SpmModel::kMinVocabSize, models::SpmModel::kMaxVocabSize));
    if (spm_sentences < models::SpmModel::kMinSentences)
      throw UsageError(fmt::format("--spm-sentences {}: SentencePiece samples at least {} lines", spm_sentences,
                                   models::SpmModel::kMinSentences));
    models::SpmTrainOptions so;
    so.vocab_size = vocab_size;
    so.type = spm_type;
    so.max_sentences = spm_sentences;
    models::SpmTrainReport report;
    models::SpmModel m = models::SpmModel::train(train_path, so, &report);
    if (report.sampled < report.lines)
      std::cerr << "seq2seq-train: SentencePiece trained on a random sample of " << report.sampled << " of the "
                << report.lines << " lines of " << train_path << " (--spm-sentences)\n";
    return m;
  };

  // An encoder-decoder's --tokenizer spm / --target-tokenizer spm: each such side's model options, checked
  // (train/spm_models.hpp chooses the models). The target's defaults are the source's when both are spm (on
  // --resume the checkpoint holds each side's model, and each option is checked against its own side's).
  auto spm_sides = [&](bool vocab_size_given) {
    const auto has = [&](const char* name) { return app.get_option(name)->count() > 0; };
    train::SpmModelsSpec spec;
    const std::string target_name = target_tokenizer.empty() ? tokenizer : target_tokenizer;
    if (!task.empty() && (tokenizer == "spm" || target_name == "spm"))
      throw UsageError("--tokenizer spm goes with --train FILE (a built-in task has its own tokens)");
    spec.source.spm = tokenizer == "spm";
    spec.target.spm = target_name == "spm";
    if (has("--spm-model") && !spec.source.spm)
      throw UsageError("--spm-model goes with --tokenizer spm (the source's model; the target's: --target-spm-model)");
    for (const char* name : {"--target-vocab-size", "--target-spm-model"})
      if (has(name) && !spec.target.spm) throw UsageError(fmt::format("{} goes with --target-tokenizer spm", name));
    for (const char* name : {"--spm-type", "--spm-sentences"})
      if (has(name) && !spec.source.spm && !spec.target.spm)
        throw UsageError(fmt::format("{} goes with --tokenizer spm or --target-tokenizer spm", name));
    if (!train_path.empty() && vocab_size_given && !spec.source.spm)
      throw UsageError("--vocab-size goes with a built-in --task or --tokenizer spm (a training file's vocabulary is "
                       "the tokens it holds, or --vocab FILE; a target's SentencePiece model: --target-vocab-size)");
    if (!spec.source.spm && !spec.target.spm) return spec;
    if (!models::SpmModel::available())
      throw UsageError("--tokenizer spm: this build has no SentencePiece (install libsentencepiece-dev, e.g. with "
                       "scripts/setup.sh, and build again)");
    if (!vocab_path.empty())
      throw UsageError("--vocab: a side whose tokenizer is spm has its SentencePiece model's vocabulary");
    spec.source.model_path = spm_model_path;
    spec.source.vocab_size = spec.source.spm && vocab_size_given ? vocab_size : 0;
    spec.target.size_option = "--target-vocab-size";
    spec.target.model_option = "--target-spm-model";
    if (has("--target-spm-model") || has("--target-vocab-size")) {
      spec.target.model_path = target_spm_model_path;
      spec.target.vocab_size = target_vocab_size;
    } else if (spec.source.spm && spec.target.spm && resume_path.empty()) {
      spec.target.model_path = spec.source.model_path;
      spec.target.vocab_size = spec.source.vocab_size;
      spec.target.size_option = "--vocab-size";
      spec.target.model_option = "--spm-model";
    }
    bool trains = false;
    for (const train::SpmSide* side : {&spec.source, &spec.target}) {
      if (!side->spm) continue;
      const char* name = side == &spec.source ? "--tokenizer spm" : "--target-tokenizer spm";
      if (resume_path.empty() && side->model_path.empty() && side->vocab_size == 0)
        throw UsageError(fmt::format("{} needs {} N (a SentencePiece model of N pieces trained on --train's {}s) or "
                                     "{} FILE.model", name, side->size_option,
                                     side == &spec.source ? "source" : "target", side->model_option));
      if (side->vocab_size != 0 &&
          (side->vocab_size < models::SpmModel::kMinVocabSize || side->vocab_size > models::SpmModel::kMaxVocabSize))
        throw UsageError(fmt::format("{} {} with {}: a SentencePiece model's is in [{}, {}]", side->size_option,
                                     side->vocab_size, name, models::SpmModel::kMinVocabSize,
                                     models::SpmModel::kMaxVocabSize));
      trains = trains || (resume_path.empty() && side->model_path.empty());
    }
    if (!trains)
      for (const char* name : {"--spm-type", "--spm-sentences"})
        if (has(name))
          throw UsageError(fmt::format("{} goes with training a SentencePiece model, not with {}", name,
                                       resume_path.empty() ? "a model file" : "--resume (the checkpoint's models)"));
    if (trains && spm_sentences < models::SpmModel::kMinSentences)
      throw UsageError(fmt::format("--spm-sentences {}: SentencePiece samples at least {} lines", spm_sentences,
                                   models::SpmModel::kMinSentences));
    if (trains && comm.size() > 1)
      throw UsageError("--tokenizer spm under mpirun: train the SentencePiece model once (a run in one process, or "
                       "spm_train) and give it with --spm-model / --target-spm-model");
    spec.train_path = train_path;
    spec.data.skip_bad_lines = skip_bad_lines;
    spec.resume_path = resume_path;
    spec.type = spm_type;
    spec.max_sentences = spm_sentences;
    return spec;
  };

  auto train_language_model = [&]() -> int {
    const bool transformer = model_name == "transformer-lm";
    std::vector<const char*> refused = {"--task", "--target-tokenizer", "--target-vocab-size", "--target-spm-model",
                                        "--skip-bad-lines", "--max-len",
                                        "--min-len", "--train-size", "--valid-size", "--attention",
                                        "--bidirectional", "--attention-style", "--attention-dim", "--decoder-hidden",
                                        "--teacher-forcing",
                                        "--label-smoothing", "--epochs", "--vocab", "--norm-first",
                                        "--maxi-batch", "--right-left"};
    for (const char* name : transformer ? std::vector<const char*>{"--hidden", "--embed"}
                                        : std::vector<const char*>{"--heads", "--d-model", "--ff", "--post-ln",
                                                                   "--positional", "--activation"})
      refused.push_back(name);
    for (const char* name : refused)
      if (app.get_option(name)->count() > 0)
        throw UsageError(fmt::format("{} does nothing with --model {}{}", name, model_name,
                                     std::string(name) == "--norm-first" ? " (pre-LN is its default; --post-ln "
                                                                           "for post-LN)" : ""));
    if (train_path.empty()) throw UsageError("--model " + model_name + " needs --train FILE.txt");
    // Data parallelism covers the encoder-decoders: K processes would each train their own copy of the model.
    if (comm.size() > 1 || grad_shards > 0 || deterministic_reduce)
      throw UsageError(fmt::format("--model {} trains in one process: data parallelism (mpirun{}, --grad-shards, "
                                   "--deterministic-reduce) is for the encoder-decoders", model_name,
                                   comm.size() > 1 ? fmt::format(" -n {}", comm.size()) : std::string()));
    if (tokenizer != "char" && tokenizer != "byte" && tokenizer != "spm")
      throw UsageError("--tokenizer " + tokenizer + ": a language model reads char, byte or spm tokens");
    const bool spm = tokenizer == "spm";
    for (const char* name : {"--vocab-size", "--spm-model", "--spm-type", "--spm-sentences"})
      if (!spm && app.get_option(name)->count() > 0)
        throw UsageError(fmt::format("{} goes with --tokenizer spm (a language model's)", name));
    if (transformer && d_model % heads != 0) throw UsageError(fmt::format("--heads {} does not divide --d-model {}", heads, d_model));
    set_num_threads(threads);
    check_destination("--save", save_path);
    check_destination("--metrics", metrics_path);
    check_destination("--plot", plot_path);
    train::TextDataSpec spec;
    spec.train_path = train_path;
    spec.valid_path = valid_path;
    spec.tokenizer = models::tokenizer_from_name(tokenizer);
    spec.context = context;
    if (spm) spec.spm = spm_model();
    train::TextData data = train::load_text_data(spec);
    if (data.train.unknown > 0)
      std::cerr << "seq2seq-train: " << train_path << ": " << data.train.unknown
                << " tokens are not in the SentencePiece model's vocabulary (read as <unk>)\n";
    if (data.valid.unknown > 0)
      std::cerr << "seq2seq-train: " << valid_path << ": " << data.valid.unknown
                << " tokens are not in the training text's vocabulary (read as <unk>)\n";
    train::LmTrainerOptions o;
    o.family = transformer ? "transformer-lm" : "recurrent-lm";
    if (!transformer) o.recurrent.cell = models::parse_cell_kind(model_name.substr(0, model_name.size() - 3));
    o.recurrent.embed = embed;
    o.recurrent.hidden = hidden;
    o.recurrent.layers = layers;
    o.recurrent.dropout = static_cast<float>(dropout);
    o.recurrent.tied_output = tied;
    if (!transformer && tied && embed != hidden)
      throw UsageError(fmt::format("--tied needs --embed {} equal to --hidden {}", embed, hidden));
    o.model.layers = layers;
    o.model.heads = heads;
    o.model.d_model = d_model;
    o.model.ff = ff;
    o.model.dropout = static_cast<float>(dropout);
    o.model.norm_first = !post_ln;
    o.model.activation = nn::parse_ffn_activation(activation);
    o.model.positional = nn::parse_positional_kind(positional);
    o.model.max_positions = context;
    o.model.tied_output = tied;
    o.context = context;
    o.steps = steps;
    o.batch_size = batch;
    o.optimizer = train::parse_optimizer_kind(optimizer);
    o.schedule = schedule_options(schedule, lr, warmup);
    o.clip = clip;
    o.seed = seed;
    o.log_every = log_every;
    o.save_every = save_every;
    o.keep_last = keep_last;
    o.save_path = save_path;
    o.metrics_path = metrics_path;
    for (const std::string& name : lm_restored) {
      CLI::Option* opt = app.get_option(name);
      const std::string value = opt->count() > 0 ? opt->as<std::string>() : opt->get_default_str();
      if (!value.empty()) o.command_options.emplace_back(name, value);
    }
    catch_stop_signals();
    o.stop_requested = [] { return g_signal != 0; };
    const bool bar = isatty(STDERR_FILENO);
    double drawn = -1;
    if (bar)
      o.progress = [&](const train::Progress& p) {
        if (p.seconds - drawn < 0.2 && p.step < p.steps) return;
        drawn = p.seconds;
        std::cerr << '\r' << train::progress_line(p, tools::stderr_columns()) << "\x1b[K" << std::flush;
      };
    if (resume_path.empty()) {
      const int64_t vocab = data.vocab.size();
      if (transformer) {
        models::TransformerLMConfig c = o.model;
        c.vocab = vocab;
        refuse_oversized(models::parameter_count(c), app);
      } else {
        models::RecurrentLMConfig c = o.recurrent;
        c.vocab = vocab;
        refuse_oversized(models::parameter_count(c), app);
      }
    }
    std::unique_ptr<train::LmTrainer> trainer = resume_path.empty()
                                                    ? std::make_unique<train::LmTrainer>(o, std::move(data))
                                                    : train::LmTrainer::resume(resume_path, o, std::move(data));
    if (trainer->step() >= trainer->total_steps())
      std::cerr << "seq2seq-train: nothing trained: at step " << trainer->step() << " of --steps "
                << trainer->total_steps() << '\n';
    if (const std::string note = trainer->schedule_note(); !note.empty())
      std::cerr << "seq2seq-train: " << note << '\n';
    if (resume_path.empty() && !metrics_path.empty()) std::ofstream(metrics_path, std::ios::trunc | std::ios::binary);
    std::vector<std::string> lines;
    train::LmSummary summary;
    try {
      summary = trainer->run([&](const std::string& l) { lines.push_back(l); });
    } catch (...) {
      if (bar && drawn >= 0) std::cerr << '\n';
      throw;
    }
    if (bar && drawn >= 0) std::cerr << '\n';
    if (!plot_path.empty()) {
      if (!metrics_path.empty()) lines = read_metrics_for_plot(metrics_path);
      io::write_file_atomic(plot_path, train::loss_plot_svg(lines, metrics_path.empty() ? save_path : metrics_path));
    }
    if (summary.interrupted) {
      const int sig = g_signal;
      std::cerr << "seq2seq-train: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ": stopped after step "
                << summary.step << "; the checkpoint " << save_path << " continues with --resume " << save_path
                << '\n';
      return 128 + sig;
    }
    tools::emit(tools::OutputOptions{}, summary.to_json());
    return 0;
  };

  // seq2seq-train --average A.json B.json ... --save avg.json (models/checkpoint.hpp, average_checkpoints)
  auto average = [&]() -> int {
    for (const CLI::Option* opt : app.get_options()) {
      const std::string name = opt->get_name();
      if (opt->count() > 0 && name != "--average" && name != "--save")
        throw UsageError(fmt::format("{} does nothing with --average (it averages checkpoints; it does not train)",
                                     name));
    }
    if (comm.size() > 1) throw UsageError("--average runs in one process, not under mpirun");
    if (average_paths.size() < 2)
      throw UsageError(fmt::format("--average needs two or more checkpoints (given {})", average_paths.size()));
    check_destination("--save", save_path);
    const models::AveragedCheckpoints avg = models::average_checkpoints(average_paths);
    io::write_value_file(save_path, avg.checkpoint);
    nlohmann::json j;
    j["checkpoint"] = save_path;
    j["averaged"] = average_paths.size();
    nlohmann::json steps = nlohmann::json::array();  // each input's step; null for one without (an average)
    for (const std::optional<int64_t>& s : avg.steps) steps.push_back(s ? nlohmann::json(*s) : nlohmann::json());
    j["steps"] = steps;
    tools::emit(tools::OutputOptions{}, j.dump());
    return 0;
  };

  const int code = tools::run(app, argc, argv, [&]() -> int {
    if (!average_paths.empty()) return average();
    if (keep_last > 0 && save_every == 0)
      throw UsageError("--keep-last N keeps the saves of --save-every: give --save-every STEPS");
    const bool vocab_size_given = app.get_option("--vocab-size")->count() > 0;  // --resume may restore it
    if (!resume_path.empty()) restore_options(app, resume_path, restored, override_options);
    // (after --resume, which restores the checkpoint's precision: a resumed run multiplies as it did)
    const ops::MatmulPrecision precision = ops::parse_matmul_precision(matmul_precision);
    if (!ops::matmul_precision_available(precision))
      throw UsageError("--matmul-precision bf16: this processor has no AVX512_BF16 (bfloat16 products); "
                       "--matmul-precision float32 trains on any");
    ops::set_matmul_precision(precision);
    if (model_name.size() > 3 && model_name.compare(model_name.size() - 3, 3, "-lm") == 0) return train_language_model();
    if (task.empty() && train_path.empty()) throw UsageError("give --task NAME or --train FILE");
    const train::SpmModelsSpec spm = spm_sides(vocab_size_given);
    if (!valid_path.empty() && train_path.empty()) throw UsageError("--valid goes with --train");
    if (resume_path.empty() && model_opt->count() == 0) throw UsageError("give --model lstm|gru|rnn|transformer");
    // Under mpirun each process's threads default to the cores it was given (--bind-to, docs/distributed.md).
    set_num_threads(threads == 0 && comm.size() > 1 ? train::cores_given() : threads);
    const int64_t shards = grad_shards > 0 ? grad_shards : comm.size();
    if (shards % comm.size() != 0)
      throw UsageError(fmt::format("--grad-shards {} is not a multiple of the {} processes", shards, comm.size()));
    if (resume_path.empty() && batch % shards != 0)
      throw UsageError(fmt::format("--batch {} (the global batch) is not a multiple of the {} gradient shards{}", batch,
                                   shards, grad_shards > 0 ? "" : " (one per process)"));
    check_destination("--save", save_path);
    check_destination("--metrics", metrics_path);
    check_destination("--plot", plot_path);
    train::SpmModels spm_models;
    if (spm.source.spm || spm.target.spm) {
      spm_models = train::spm_models(spm);
      if (lead)
        for (const std::string& note : spm_models.notes) std::cerr << "seq2seq-train: " << note << '\n';
    }

    train::DataSpec spec;
    if (!task.empty()) {
      train::TaskOptions t;
      t.name = task;
      t.vocab_size = vocab_size;
      t.min_len = min_len;
      t.max_len = max_len > 0 ? max_len : task_max_len;
      t.train_size = train_size;
      t.valid_size = valid_size;
      t.seed = seed;
      spec.task = t;
    } else {
      spec.train_path = train_path;
      spec.valid_path = valid_path;
      spec.data.tokenizer = train::tokenizer_from_name(tokenizer);
      if (!target_tokenizer.empty()) spec.data.target_tokenizer = train::tokenizer_from_name(target_tokenizer);
      spec.data.src_spm = spm_models.source;
      spec.data.tgt_spm = spm_models.target;
      spec.data.max_len = max_len;
      spec.data.skip_bad_lines = skip_bad_lines;
    }
    spec.vocab_path = vocab_path;
    // With a training file and several gradient shards, each shard trains on its own part of the file and a
    // process reads only its shards' parts (docs/distributed.md, "Data").
    const int64_t data_shards = resume_path.empty() || !task.empty()
                                    ? shards
                                    : train::Trainer::resume_grad_shards(resume_path, grad_shards, comm.size());
    train::TrainingData data = task.empty() && data_shards > 1 ? train::load_training_parts(spec, comm, data_shards)
                                                               : train::load_training_data(spec);
    if (data.part_count > 0) {
      std::vector<std::string> mine;
      for (int64_t p = 0; p < int64_t(data.parts.size()); ++p) mine.push_back(std::to_string(data.first_part + p));
      std::cerr << fmt::format("seq2seq-train: rank {}: reads bytes {}..{} of {} (shard{} {})\n", comm.rank(),
                               data.bytes.first, data.bytes.second - 1, train_path, mine.size() > 1 ? "s" : "",
                               fmt::join(mine, ", "));
    }
    for (const train::Corpus* c : {&data.train, &data.valid})
      if (c->bad_lines > 0) std::cerr << "seq2seq-train: " << c->bad_lines_summary() << '\n';
    for (const train::Corpus& c : data.parts)  // each process its own parts'
      if (c.bad_lines > 0) std::cerr << "seq2seq-train: " << c.bad_lines_summary() << '\n';
    if (spm.source.spm || spm.target.spm)  // characters a SentencePiece model lacks are its <unk> piece
      for (const train::Corpus* c : {&data.train, &data.valid}) {
        int64_t unknown[2] = {0, 0};
        for (const train::Example& ex : c->examples) {
          unknown[0] += std::count(ex.src.begin(), ex.src.end(), models::Vocab::specials()[models::Vocab::kUnk]);
          unknown[1] += std::count(ex.tgt.begin(), ex.tgt.end(), models::Vocab::specials()[models::Vocab::kUnk]);
        }
        if (lead && unknown[0] + unknown[1] > 0)
          std::cerr << "seq2seq-train: " << c->name << ": " << unknown[0] << " source and " << unknown[1]
                    << " target pieces are <unk> (characters the SentencePiece models lack)\n";
      }
    if (vocab_path.empty() && !data.valid.examples.empty()) {
      // The vocabularies are built from the training data: validation tokens outside them read as <unk>.
      int64_t missing = 0;
      std::vector<std::string> shown;  // the first few distinct ones
      auto scan = [&](const std::vector<std::string>& tokens, const train::Vocab& vocab, const char* side) {
        for (const std::string& t : tokens)
          if (!vocab.contains(t)) {
            ++missing;
            const std::string named = fmt::format("\"{}\" ({})", t, side);
            if (shown.size() < 5 && std::find(shown.begin(), shown.end(), named) == shown.end()) shown.push_back(named);
          }
      };
      for (const train::Example& ex : data.valid.examples) {
        scan(ex.src, data.src_vocab, "source");
        scan(ex.tgt, data.tgt_vocab, "target");
      }
      if (missing > 0)
        std::cerr << "seq2seq-train: " << data.valid.name << ": " << missing
                  << " tokens are not in the training data's vocabulary (read as <unk>), e.g. "
                  << fmt::format("{}", fmt::join(shown, ", ")) << '\n';
    }
    if (!vocab_path.empty()) {
      for (const train::Corpus* c : {&data.train, &data.valid}) {
        const train::EncodedCorpus e = train::encode(*c, data.src_vocab, data.tgt_vocab);
        if (e.unknown_src + e.unknown_tgt > 0)
          std::cerr << "seq2seq-train: " << c->name << ": " << e.unknown_src << " source and " << e.unknown_tgt
                    << " target tokens are not in " << vocab_path << " (read as <unk>)\n";
      }
      if (data.part_count > 0) {  // the parts' counts summed over the processes
        uint64_t unknown[2] = {0, 0};
        for (const train::Corpus& c : data.parts) {
          const train::EncodedCorpus e = train::encode(c, data.src_vocab, data.tgt_vocab);
          unknown[0] += uint64_t(e.unknown_src), unknown[1] += uint64_t(e.unknown_tgt);
        }
        std::vector<uint64_t> all(size_t(2 * comm.size()));
        comm.allgather(unknown, 2, all.data());
        unknown[0] = unknown[1] = 0;
        for (int r = 0; r < comm.size(); ++r) unknown[0] += all[size_t(2 * r)], unknown[1] += all[size_t(2 * r + 1)];
        if (lead && unknown[0] + unknown[1] > 0)
          std::cerr << "seq2seq-train: " << train_path << ": " << unknown[0] << " source and " << unknown[1]
                    << " target tokens are not in " << vocab_path << " (read as <unk>)\n";
      }
    }

    train::TrainerOptions o;
    const bool transformer = model_name == "transformer";
    if (!model_name.empty() && !transformer) o.model.cell = models::parse_cell_kind(model_name);
    o.family = transformer ? "transformer" : "recurrent";
    o.transformer.encoder_layers = o.transformer.decoder_layers = layers;
    o.transformer.heads = heads;
    o.transformer.d_model = d_model;
    o.transformer.ff = ff;
    o.transformer.norm_first = norm_first;
    if (transformer && d_model % heads != 0)
      throw UsageError(fmt::format("--heads {} does not divide --d-model {}", heads, d_model));
    // An option of the other family would do nothing: refused.
    auto given = [&](const char* name) { return app.get_option(name)->count() > 0; };
    const std::vector<const char*> recurrent_only = {"--attention", "--attention-style", "--hidden",       "--embed",
                                                     "--bidirectional", "--teacher-forcing", "--attention-dim",
                                                     "--decoder-hidden"};
    const std::vector<const char*> transformer_only = {"--heads", "--d-model", "--ff", "--norm-first"};
    for (const char* name : {"--context", "--tied", "--post-ln", "--positional", "--activation"})
      if (given(name)) throw UsageError(fmt::format("{} goes with a language model (--model transformer-lm, lstm-lm, ...)", name));
    if (model_opt->count() > 0)
      for (const char* name : transformer ? recurrent_only : transformer_only)
        if (given(name))
          throw UsageError(fmt::format("{} does nothing with --model {}{}", name, model_name,
                                       transformer ? " (a recurrent seq2seq option)" : " (a transformer option)"));
    o.transformer.dropout = given("--dropout") ? static_cast<float>(dropout) : 0.1f;
    o.model.attention = models::parse_attention_kind(attention);
    o.model.style = models::parse_attention_style(attention_style);
    o.model.hidden = hidden;
    o.model.embed = embed;
    o.model.layers = layers;
    o.model.bidirectional = bidirectional;
    o.model.attention_dim = attention_dim;
    o.model.decoder_size = decoder_hidden;
    if (given("--attention-dim") && resume_path.empty() && o.model.attention != models::AttentionKind::Additive)
      throw UsageError(fmt::format("--attention-dim goes with --attention additive (the other scores have no "
                                   "projection of their own), not {}", attention));
    if (given("--decoder-hidden") && resume_path.empty() && o.model.bridged() &&
        (o.model.attention == models::AttentionKind::Dot || o.model.attention == models::AttentionKind::ScaledDot))
      throw UsageError(fmt::format("--decoder-hidden {} differs from the encoder's output ({}): the {} score needs "
                                   "them equal (general and additive take any)",
                                   decoder_hidden, o.model.encoder_output(), attention));
    // With --resume the checkpoint fixes the model; model options given as well must agree with it.
    o.model_given = {given("--model") && !transformer, given("--attention"), given("--embed"),
                     given("--hidden"), given("--layers"),   given("--bidirectional"),
                     given("--attention-style"), given("--attention-dim"), given("--decoder-hidden"),
                     given("--model")};
    o.dropout = static_cast<float>(dropout);
    o.teacher_forcing = static_cast<float>(teacher_forcing);
    o.dropout_given = given("--dropout");
    o.teacher_forcing_given = given("--teacher-forcing");
    o.steps = steps;
    o.batch_size = batch;
    o.maxi_batch = maxi_batch;
    o.optimizer = train::parse_optimizer_kind(optimizer);
    o.schedule = schedule_options(schedule, lr, warmup);
    if (lr < 1e-5)
      std::cerr << "seq2seq-train: warning: the peak learning rate --lr " << lr
                << " is below 1e-05: the model will barely learn\n";
    o.label_smoothing = static_cast<float>(label_smoothing);
    o.right_left = right_left;
    o.clip = clip;
    o.seed = seed;
    o.log_every = log_every;
    o.save_path = save_path;
    o.metrics_path = metrics_path;
    o.epochs = epochs;
    for (const std::string& name : restored) {
      CLI::Option* opt = app.get_option(name);
      std::string value = opt->count() > 0 ? opt->as<std::string>() : opt->get_default_str();
      if (name == "--skip-bad-lines") value = skip_bad_lines ? "true" : "false";
      if (name == "--deterministic-reduce") value = deterministic_reduce ? "true" : "";  // saved when given
      if (name == "--right-left") value = right_left ? "true" : "";                     // saved when given
      if (name == "--teacher-forcing" && o.family == "transformer") continue;  // a recurrent option
      if (name == "--model" || name == "--context") continue;                  // a language model's
      if (!value.empty()) o.command_options.emplace_back(name, value);
    }
    o.save_every = save_every;
    o.keep_last = keep_last;
    o.communicator = &comm;
    o.grad_shards = grad_shards;
    o.deterministic_reduce = deterministic_reduce;
    catch_stop_signals();
    o.stop_requested = [] { return g_signal != 0; };
    // A progress bar on a terminal only (not on a pipe or a file), redrawn at most 5 times a second.
    const bool bar = lead && isatty(STDERR_FILENO);
    double drawn = -1;
    if (bar)
      o.progress = [&](const train::Progress& p) {
        if (p.seconds - drawn < 0.2 && p.step < p.steps) return;
        drawn = p.seconds;
        std::cerr << '\r' << train::progress_line(p, tools::stderr_columns()) << "\x1b[K" << std::flush;
      };

    if (epochs > 0) {  // the trainer's own check, said as a usage error before any work
      const int64_t examples = static_cast<int64_t>(data.train.size());
      const int64_t per_epoch = std::max<int64_t>((examples + batch - 1) / batch, 1);
      if (epochs > train::kMaxSteps / per_epoch)
        throw UsageError(fmt::format("--epochs {}: {} batches an epoch make more than {} steps; at most {} epochs",
                                     epochs, per_epoch, train::kMaxSteps, train::kMaxSteps / per_epoch));
    }
    if (resume_path.empty()) {
      if (o.family == "transformer") {
        models::TransformerConfig c = o.transformer;
        c.src_vocab = data.src_vocab.size(), c.tgt_vocab = data.tgt_vocab.size();
        refuse_oversized(models::parameter_count(c), app);
      } else {
        models::Seq2SeqConfig c = o.model;
        c.src_vocab = data.src_vocab.size(), c.tgt_vocab = data.tgt_vocab.size();
        refuse_oversized(models::parameter_count(c), app);
      }
    }
    std::unique_ptr<train::Trainer> trainer = resume_path.empty()
                                                  ? std::make_unique<train::Trainer>(o, std::move(data))
                                                  : train::Trainer::resume(resume_path, o, std::move(data));
    // --steps is the run's total counted from its start (with --resume: from the first part's step 0); at or
    // below the checkpoint's step nothing is trained: said here, and the summary has no train_loss.
    if (trainer->step() >= trainer->total_steps()) {
      if (resume_path.empty()) std::cerr << "seq2seq-train: --steps " << trainer->total_steps() << ": nothing trained\n";
      else
        std::cerr << "seq2seq-train: nothing trained: the checkpoint " << resume_path << " is at step "
                  << trainer->step() << " and --steps " << trainer->total_steps()
                  << " is the total counted from the start of the run (give --steps above " << trainer->step()
                  << " to train on)\n";
    }
    if (const std::string note = trainer->schedule_note(); lead && !note.empty())
      std::cerr << "seq2seq-train: " << note << '\n';
    if (lead && !resume_path.empty() && trainer->grad_shards() != trainer->checkpoint_grad_shards())
      std::cerr << "seq2seq-train: the checkpoint " << resume_path << " cut each batch into "
                << trainer->checkpoint_grad_shards() << " gradient shard(s); this run cuts it into "
                << trainer->grad_shards()
                << (trainer->data_order_restarted()
                        ? " (each shard's data order starts afresh on its part of the file: the run goes on, not "
                          "as the checkpoint's would have)\n"
                        : " (the curve goes on within float rounding, not bit for bit)\n");
    // A fresh run starts a new metrics history (a resumed one appends to its own).
    if (lead && resume_path.empty() && !metrics_path.empty()) {
      std::ifstream old(metrics_path, std::ios::binary);
      if (old.good() && old.peek() != std::ifstream::traits_type::eof()) {
        old.close();
        std::ofstream f(metrics_path, std::ios::trunc | std::ios::binary);
        AK_CHECK(f.good(), "--metrics {}: cannot open for writing", metrics_path);
        std::cerr << "seq2seq-train: --metrics " << metrics_path
                  << ": emptied: a fresh run starts a new history (--resume appends to it)\n";
      }
    }
    std::vector<std::string> lines;
    train::TrainSummary summary;
    try {
      summary = trainer->run([&](const std::string& l) { lines.push_back(l); });
    } catch (...) {
      if (bar && drawn >= 0) std::cerr << '\n';
      throw;
    }
    if (bar && drawn >= 0) std::cerr << '\n';
    // Stopped by a signal: no process exits before rank 0 has saved (mpirun ends the job when one process exits
    // non-zero, and would end rank 0 in the middle of its write).
    if (summary.interrupted && comm.size() > 1) comm.any(false);
    if (!lead) return summary.interrupted ? 128 + (g_signal != 0 ? int(g_signal) : SIGINT) : 0;
    if (!plot_path.empty()) {
      // the whole history when the metrics file has it (earlier parts of a resumed run), else this run's lines
      if (!metrics_path.empty()) {
        lines = read_metrics_for_plot(metrics_path);
      }
      io::write_file_atomic(plot_path, train::loss_plot_svg(lines, metrics_path.empty() ? save_path : metrics_path));
      if (train::loss_plot_steps(lines) == 1)
        std::cerr << "seq2seq-train: warning: " << plot_path
                  << " has a single logged step, a dot and no curve (log more often with --log-every)\n";
    }
    if (summary.interrupted) {
      const int sig = g_signal != 0 ? g_signal : SIGINT;  // another process may have been the one signalled
      std::cerr << "seq2seq-train: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT") << ": stopped after step "
                << summary.step << "; the checkpoint " << save_path << " continues with --resume " << save_path
                << '\n';
      return 128 + sig;
    }
    tools::emit(tools::OutputOptions{}, summary.to_json());  // a failed write of the summary: exit 1
    return 0;
  });
  // A process that fails (bad input, a write that failed) ends the others, which may be waiting for it in
  // a collective; an interrupted run stops on every process at the same step and exits normally.
  if (code != 0 && code < 128 && comm.size() > 1) comm.abort(code);
  return code;
}
