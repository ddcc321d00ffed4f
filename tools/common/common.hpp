// What every attnkit tool shares (docs/architecture.md, Adding a tool): the error boundary (exit 0 ok, 1 bad input,
// 2 usage), the shared option groups, and output that is written whole or not at all.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "attnkit/decode/loader.hpp"
#include "attnkit/decode/rescore.hpp"
#include "attnkit/io/atomic_file.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/io/reference.hpp"
#include "attnkit/models/quantized_checkpoint.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/with_source.hpp"

namespace attnkit::tools {

// A usage mistake the option parser cannot see (conflicting flags, a value out of range): exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct OutputOptions {
  std::string path = "-";  // -o FILE; "-" is standard output
  std::string format = "nested";
  bool pretty = false;
  io::WriteOptions write_options() const;
};

struct InputOptions {
  int64_t max_elements = io::ReadOptions{}.max_elements;
  bool allow_nan = false;
  io::ReadOptions read_options() const;
};

// Number checks with readable messages ("--rtol: -1 is negative, expected a number >= 0"; infinity and NaN
// are refused too); a seed takes non_negative() in every tool (never wrapped round to 2^64 - 1);
// use them instead of CLI::NonNegativeNumber / CLI::PositiveNumber, which print DBL_MAX in full. Attach them
// with ->transform(): a whole number written 1e9 reaches a whole-number option as 1000000000, and one
// too large for it is refused with the bound ("--epochs: 1e30 is more than 9223372036854775807, ...").
CLI::Validator non_negative();
CLI::Validator positive();
// A whole number from lo to hi (1e3 taken as 1000), attached with ->transform(): "--n: 2.5 is not a whole
// number, expected 1 to 1099511627776"; use it instead of CLI::Range for whole-number options.
CLI::Validator whole_range(int64_t lo, int64_t hi);

// with_source(ref, load): a refused weights file named in the message (tensor/with_source.hpp).
using attnkit::with_source;

// Weights follow the rule of every input: a NaN is refused with its position unless allow_nan
// (--allow-nan); infinities pass. Walks nested bundles: "w.json#enc/W: tensor of shape ...".
void refuse_nan_weights(const io::Value& weights, const std::string& ref, bool allow_nan);

// App with --version, a description and a footer of runnable examples ("Examples:", one command a
// line, two spaces in; a line four spaces in continues the one above). Each app's examples run as
// written in an empty folder, in order (tests/cli/help_examples.sh runs them all): they make the
// files they use. On a subcommand (no --version there), its --help also lists the options of the
// tool it belongs to (-o, --format, ...: with app.fallthrough() they may follow the subcommand).
void describe(CLI::App& app, const std::string& description, const std::string& examples);
// The usage line of an app's --help when CLI11's is unreadable: "tensor arange [OPTIONS] [START] STOP [STEP]".
void usage(CLI::App& app, const std::string& line);
void add_output_options(CLI::App& app, OutputOptions& out);  // -o, --format, --pretty
void add_input_options(CLI::App& app, InputOptions& in);     // --max-elements, --allow-nan
// --threads N, 0 (one per core) to kMaxThreads; more is refused (exit 2) by every tool alike
// (libgomp itself dies by SIGSEGV at 100000).
constexpr int kMaxThreads = 256;
void add_threads_option(CLI::App& app, int& threads);

// --precision fp32|bf16|int8 and --keep-fp32 PATTERN (repeatable) of the inference tools (nn/precision.hpp).
struct PrecisionOptions {
  std::string precision = "fp32";
  std::vector<std::string> keep_fp32;
};
void add_precision_options(CLI::App& app, PrecisionOptions& options);
// The plan the options ask for; --keep-fp32 with fp32 is a usage error.
nn::PrecisionPlan precision_plan(const PrecisionOptions& options);
// After the model took the plan: a --keep-fp32 pattern that matched no weight is a usage error (naming it and
// where the names come from); otherwise, below fp32, what was lowered is said on stderr ("TOOL: int8: ...").
void report_precision(const nn::PrecisionPlan& plan, const std::string& tool);
// --save-quantized FILE.safetensors: a path given needs --precision bf16 or int8 and the extension (usage errors).
void add_save_quantized_option(CLI::App& app, std::string& path);
void check_save_quantized(const std::string& path, const PrecisionOptions& options);
// A model read from a quantized checkpoint `what` (models/quantized_checkpoint.hpp), before it takes the plan: in
// the plan's precision its stored copies are used as they are; in fp32 its dequantized values, said on stderr
// ("TOOL: FILE: int8 weights (N matrices) dequantized to float32; ..."); another precision is a usage error.
void use_stored_weights(nn::PrecisionPlan& plan, const std::optional<models::StoredWeights>& stored,
                        const std::string& what, const std::string& tool);

// `name` MODEL, repeatable, one path each: further checkpoints beside the tool's MODEL (--ensemble: decoded
// together, decode/ensemble.hpp; --rescore: rescoring its beam, decode/rescore.hpp). `help` says what for.
void add_models_option(CLI::App& app, const std::string& name, std::vector<std::string>& paths, const std::string& help);
// The checkpoints at `paths` (decode::load_checkpoint), each with its weight matrices in --precision's precision
// (a quantized checkpoint's stored ones as use_stored_weights says), what was lowered said on stderr.
std::vector<decode::LoadedModel> load_lowered_checkpoints(const std::vector<std::string>& paths,
                                                          const PrecisionOptions& precision, const std::string& tool);

// --rescore MODEL, --rescore-inverse MODEL (repeatable), --rescore-weight W, --inverse-weight W and
// --rescore-union: models reranking a beam's hypotheses (decode/rescore.hpp), --rescore's searching beams of their
// own too with --rescore-union (decode::join_beams); check() refuses them without beam search (usage).
// --rescore-graphone MODEL and --graphone-weight W: a graphone model (graphone-train) adding its log P(x, y).
struct RescoreOptions {
  std::vector<std::string> paths, inverse_paths;
  std::string graphone_path;
  double weight = 1.0, inverse_weight = 1.0, graphone_weight = 1.0;
  bool union_beams = false;
  CLI::Option* rescore_weight_opt = nullptr;
  CLI::Option* weight_opt = nullptr;
  CLI::Option* graphone_weight_opt = nullptr;
  bool any() const { return !paths.empty() || !inverse_paths.empty() || !graphone_path.empty(); }
  void check(bool beam) const;
};
void add_rescore_options(CLI::App& app, RescoreOptions& options);
// The rescoring models, lowered as load_lowered_checkpoints lowers them, checked against the search's `first`
// (decode::check_rescorers; `first_name` names it); `rescorers` point into `models`.
struct Rescoring {
  std::vector<decode::LoadedModel> models;
  std::unique_ptr<models::GraphoneModel> graphone;
  std::unique_ptr<decode::GraphoneScorer> graphone_scorer;
  std::vector<decode::Rescorer> rescorers;
};
Rescoring load_rescorers(const RescoreOptions& options, const decode::LoadedModel& first, const std::string& first_name,
                         const PrecisionOptions& precision, const std::string& tool);

// Where a run's result goes: standard output, or -o FILE (written to a temporary, moved into place
// by commit(), removed if the run fails). Each write() is one document or record, a newline
// appended, written and flushed at once (a stream's records appear as they are made).
class Output {
 public:
  explicit Output(const OutputOptions& out);
  ~Output();
  void write(std::string text);  // by value: callers move their (large) text in
  void commit();

 private:
  std::unique_ptr<io::AtomicFileWriter> file_;
};

// Writes `text` (plus a newline) to standard output or atomically to the file.
void emit(const OutputOptions& out, std::string text);
// Writes a result: JSON to standard output, or atomically to -o FILE in the format its extension
// names (.npy, .npz, .safetensors, else JSON; io/tensor_file.hpp).
void emit_value(const OutputOptions& out, const io::Value& value);

// Runs `compute` for the first record of the inputs, then for every further record of the
// streams among them (io::Sources: one document goes with every record, streams are paired),
// writing each result as it is made: one document per record (compact unless --pretty); to a .npy,
// .npz or .safetensors -o FILE, the one result (a stream of several is refused before writing). An error
// in record 2 or later names the record ("record 3: ..."); the records before it stay written.
void per_record(io::Sources& sources, const OutputOptions& out, const std::function<io::Value()>& compute);
// The same for text made by the tool (tensor show): `compute` returns the text of one record.
void per_record_text(io::Sources& sources, const OutputOptions& out, const std::function<std::string()>& compute);

// Parses the command line and runs `body` inside the error boundary; returns the exit status.
// `body` returns the exit status of a successful run (normally 0).
int run(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

// Refuses (exit 1) a tensor to be made whose element count passes --max-elements, before it is
// allocated: "--init: weight_ih_l0 [4096, 1000000] has 4096000000 elements, more than --max-elements ...".
void refuse_over_limit(const std::string& what, const Shape& shape, int64_t max_elements);

// The tensor `ref` names, for an option that also takes keywords (--mask causal): a reference that
// names no file is taken for a mistyped keyword and refused with the keywords (exit 2).
Tensor keyword_or_tensor(io::Sources& sources, const std::string& ref, const std::string& option,
                         const std::vector<std::string>& keywords, bool allow_nan);

// Columns of standard error's terminal, for a progress line (io::fit_status_line): its window size
// (ioctl TIOCGWINSZ), else $COLUMNS, else 80. Asked at each redraw, so a resized pane is followed.
int stderr_columns();

// Parses "3,4" or "3x4" into a shape; a size of -1 is allowed only when allow_infer.
Shape parse_shape(const std::string& text, bool allow_infer = false);

}  // namespace attnkit::tools
