#include "common/common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <new>

#include <sys/ioctl.h>
#include <unistd.h>

#include "attnkit/decode/ensemble.hpp"
#include "attnkit/io/atomic_file.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/memory.hpp"
#include "attnkit/tensor/threads.hpp"
#include "attnkit/version.hpp"

namespace attnkit::tools {

io::WriteOptions OutputOptions::write_options() const {
  io::WriteOptions w;
  w.format = format == "flat" ? io::TensorFormat::Flat : io::TensorFormat::Nested;
  w.pretty = pretty;
  return w;
}

io::ReadOptions InputOptions::read_options() const {
  io::ReadOptions r;
  r.max_elements = max_elements;
  // float64 / int64 values of a .npy, .npz or .safetensors file rounded to float32
  r.note = [](const std::string& note) { std::cerr << program_invocation_short_name << ": note: " << note << '\n'; };
  return r;
}

namespace {

CLI::Validator number_check(bool allow_zero) {
  return CLI::Validator(
      [allow_zero](std::string& text) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(text, x) || std::isnan(x)) return text + " is not a number";
        if (std::isinf(x)) return text + (allow_zero ? " is not finite, expected a number >= 0" : " is not finite, expected a number > 0");
        if (x < 0 || (!allow_zero && x == 0))
          return text + (allow_zero ? " is negative, expected a number >= 0" : " is not positive, expected a number > 0");
        // A whole number written as 1e9 or 1000.0 is given to a whole-number option as 1000000000 (a
        // floating-point option reads the same value either way); one past 2^64 stays as written and is
        // refused by the conversion, naming the bound (run()).
        if (x == std::floor(x) && x < 0x1p64 && text.find_first_not_of("0123456789") != std::string::npos)
          text = std::to_string(static_cast<uint64_t>(x));
        return "";
      },
      allow_zero ? "NUMBER >= 0" : "NUMBER > 0");
}

}  // namespace

CLI::Validator whole_range(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(text, x) || std::isnan(x)) return text + " is not a number";
        if (x != std::floor(x)) return fmt::format("{} is not a whole number, expected {} to {}", text, lo, hi);
        if (x < static_cast<double>(lo) || x > static_cast<double>(hi))
          return fmt::format("{} is out of range, expected {} to {}", text, lo, hi);
        text = std::to_string(static_cast<int64_t>(x));
        return "";
      },
      fmt::format("{} to {}", lo, hi));
}

CLI::Validator non_negative() { return number_check(true); }
CLI::Validator positive() { return number_check(false); }

void refuse_nan_weights(const io::Value& weights, const std::string& ref, bool allow_nan) {
  if (allow_nan) return;
  std::function<void(const io::Value&, const std::string&)> walk = [&](const io::Value& v, const std::string& at) {
    if (v.is_bundle()) {
      for (const auto& [name, member] : v.members()) walk(member, at + (at.find('#') == std::string::npos ? "#" : "/") + name);
    } else if (v.is_tensor()) {
      const int64_t i = io::find_nan(v.tensor());
      AK_CHECK(i < 0, "{}: tensor of shape {} has NaN at {} (pass --allow-nan to accept it)", at, v.tensor().shape_str(),
               shape_str(unravel_index(i, v.tensor().shape())));
    }
  };
  walk(weights, ref);
}

namespace {

// CLI11's help, plus: a usage line set by usage(), and in a subcommand's help the options of the
// tool it belongs to (they may follow the subcommand: tensor get x.json --format flat).
class HelpFormatter : public CLI::Formatter {
 public:
  std::map<const CLI::App*, std::string> usages;
  std::string make_usage(const CLI::App* app, std::string name) const override {
    auto it = usages.find(app);
    return it == usages.end() ? CLI::Formatter::make_usage(app, name) : "Usage: " + it->second + "\n";
  }
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    std::string text = CLI::Formatter::make_help(app, name, mode);
    const CLI::App* parent = app->get_parent();
    if (mode != CLI::AppFormatMode::Normal || !parent) return text;
    std::vector<const CLI::Option*> shared = parent->get_options([&](const CLI::Option* o) {
      return o->nonpositional() && o != parent->get_help_ptr() && o != parent->get_version_ptr();
    });
    if (shared.empty()) return text;
    const std::string group = make_group(
        "Options of " + parent->get_name() + (app->get_fallthrough() ? " (before or after the subcommand)" : " (before the subcommand)"),
        false, shared);
    const size_t footer = app->get_footer().empty() ? std::string::npos : text.rfind(app->get_footer());
    return footer == std::string::npos ? text + group : text.insert(footer - 1, group);
  }
};

}  // namespace

void describe(CLI::App& app, const std::string& description, const std::string& examples) {
  app.description(description);
  if (!app.get_parent()) {
    app.set_version_flag("--version", std::string("attnkit ") + ATTNKIT_VERSION);
    auto formatter = std::make_shared<HelpFormatter>();
    app.formatter(formatter);  // subcommands added later take it; those added before get it here
    for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) sub->formatter(formatter);
  }
  if (!examples.empty()) app.footer("Examples:\n" + examples);
}

void usage(CLI::App& app, const std::string& line) {
  if (auto f = std::dynamic_pointer_cast<HelpFormatter>(app.get_formatter())) f->usages[&app] = line;
}

void add_output_options(CLI::App& app, OutputOptions& out) {
  app.add_option("-o,--output", out.path, "Write the result to FILE (atomically) instead of standard output")
      ->type_name("FILE");
  app.add_option("--format", out.format, "Tensor layout: nested arrays, or {\"shape\", \"data\"} (a tensor of 2 or more axes with a size 0 is always flat)")
      ->check(CLI::IsMember({"nested", "flat"}))
      ->capture_default_str();
  app.add_flag("--pretty", out.pretty, "Indent the JSON (innermost rows stay on one line)");
}

void add_input_options(CLI::App& app, InputOptions& in) {
  app.add_option("--max-elements", in.max_elements, "Refuse input tensors with more elements than this")
      ->check(positive())
      ->capture_default_str();
  app.add_flag("--allow-nan", in.allow_nan, "Accept NaN in input tensors (refused by default, with its position)");
}

void add_precision_options(CLI::App& app, PrecisionOptions& options) {
  app.add_option("--precision", options.precision,
                 "Weights multiplied in float32, bfloat16 or int8 (per output channel; activations per row)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8"}))
      ->capture_default_str();
  app.add_option("--keep-fp32", options.keep_fp32,
                 "Keep the weight matrices whose names match PATTERN (* ? [...]) in float32; repeatable")
      ->type_name("PATTERN")
      ->take_all();
}

nn::PrecisionPlan precision_plan(const PrecisionOptions& options) {
  const ops::Precision p = ops::precision_from_name(options.precision);
  if (p == ops::Precision::Fp32 && !options.keep_fp32.empty())
    throw UsageError("--keep-fp32 goes with --precision bf16 or int8");
  for (const std::string& pattern : options.keep_fp32)
    if (pattern.empty()) throw UsageError("--keep-fp32: an empty pattern");
  return nn::PrecisionPlan(p, options.keep_fp32);
}

void report_precision(const nn::PrecisionPlan& plan, const std::string& tool) {
  for (const std::string& pattern : plan.unmatched())
  {
    const std::vector<std::string>& names = plan.names();
    std::string some;
    for (size_t i = 0; i < names.size() && i < 4; ++i) some += (i ? ", " : "") + names[i];
    if (names.size() > 4) some += fmt::format(" and {} more", names.size() - 4);
    throw UsageError(fmt::format("--keep-fp32 {}: no weight matrix of the model has a name it matches (its "
                                 "weight matrices: {})", pattern, some.empty() ? "none" : some));
  }
  if (plan.precision() != ops::Precision::Fp32) std::cerr << tool << ": " << plan.summary() << "\n";
}

void add_save_quantized_option(CLI::App& app, std::string& path) {
  app.add_option("--save-quantized", path, "Write the model with its weight matrices in --precision (int8: int8 "
                                           "values and a scale per row; bf16) to FILE.safetensors")
      ->type_name("FILE.safetensors");
}

void check_save_quantized(const std::string& path, const PrecisionOptions& options) {
  if (path.empty()) return;
  if (options.precision == "fp32")
    throw UsageError("--save-quantized " + path + " goes with --precision bf16 or int8 (the precision it stores)");
  if (io::file_format(path) != io::FileFormat::Safetensors)
    throw UsageError("--save-quantized " + path + ": a quantized checkpoint is a .safetensors file");
}

void use_stored_weights(nn::PrecisionPlan& plan, const std::optional<models::StoredWeights>& stored,
                        const std::string& what, const std::string& tool) {
  if (!stored) return;
  const ops::Precision p = plan.precision();
  if (p != ops::Precision::Fp32 && p != stored->precision)
    throw UsageError(fmt::format("--precision {}: {} holds {} weights (use --precision {}, or fp32 to dequantize them)",
                                 ops::precision_name(p), what, ops::precision_name(stored->precision),
                                 ops::precision_name(stored->precision)));
  const std::string note = models::use_stored_weights(plan, *stored, what);
  if (!note.empty()) std::cerr << tool << ": " << note << "\n";
}

void add_models_option(CLI::App& app, const std::string& name, std::vector<std::string>& paths, const std::string& help) {
  app.add_option(name, paths, help)
      ->type_name("MODEL")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

std::vector<decode::LoadedModel> load_lowered_checkpoints(const std::vector<std::string>& paths,
                                                          const PrecisionOptions& precision, const std::string& tool) {
  std::vector<decode::LoadedModel> models;
  for (const std::string& path : paths) {
    nn::PrecisionPlan plan = precision_plan(precision);
    models.push_back(decode::load_checkpoint(path));
    use_stored_weights(plan, models.back().stored, path, tool);
    models.back().model->set_precision(plan);
    report_precision(plan, tool);
  }
  return models;
}

void add_rescore_options(CLI::App& app, RescoreOptions& o) {
  add_models_option(app, "--rescore", o.paths,
                    "With --strategy beam: rerank the beam's hypotheses by the mean of their log-probabilities under "
                    "the search's model(s) and these checkpoints (repeatable); a right-to-left model (seq2seq-train "
                    "--right-left) reads them reversed; same tokenizers and vocabularies");
  add_models_option(app, "--rescore-inverse", o.inverse_paths,
                    "With --strategy beam: rescore as --rescore with a model trained the other way, target -> source "
                    "(repeatable): the log-probability it gives the source from each hypothesis; its source tokens "
                    "are MODEL's target tokens and the other way");
  o.rescore_weight_opt = app.add_option("--rescore-weight", o.weight,
                                        "With --rescore: the weight of each --rescore model's log-probability in "
                                        "the mean (the search's model(s) weigh 1)")
                             ->transform(non_negative())
                             ->capture_default_str();
  o.weight_opt = app.add_option("--inverse-weight", o.inverse_weight,
                                "With --rescore-inverse: the weight of each inverse model's log-probability in the "
                                "mean (the search's model(s) weigh 1)")
                     ->transform(non_negative())
                     ->capture_default_str();
  app.add_option("--rescore-graphone", o.graphone_path,
                 "With --strategy beam: rescore as --rescore with a graphone model (graphone-train): the "
                 "log-probability it gives each pair of source and hypothesis")
      ->type_name("MODEL");
  o.graphone_weight_opt = app.add_option("--graphone-weight", o.graphone_weight,
                                         "With --rescore-graphone: the weight of its log-probability in the mean (the "
                                         "search's model(s) weigh 1)")
                              ->transform(non_negative())
                              ->capture_default_str();
  app.add_flag("--rescore-union", o.union_beams,
               "With --rescore: each --rescore model searches its own beam too (as wide), and the union of the beams "
               "is reranked");
}

void RescoreOptions::check(bool beam) const {
  if (!paths.empty() && !beam) throw UsageError("--rescore goes with --strategy beam (it reranks the beam's hypotheses)");
  if (!inverse_paths.empty() && !beam)
    throw UsageError("--rescore-inverse goes with --strategy beam (it reranks the beam's hypotheses)");
  if (weight_opt != nullptr && weight_opt->count() > 0 && inverse_paths.empty())
    throw UsageError("--inverse-weight goes with --rescore-inverse");
  if (rescore_weight_opt != nullptr && rescore_weight_opt->count() > 0 && paths.empty())
    throw UsageError("--rescore-weight goes with --rescore");
  if (!graphone_path.empty() && !beam)
    throw UsageError("--rescore-graphone goes with --strategy beam (it reranks the beam's hypotheses)");
  if (graphone_weight_opt != nullptr && graphone_weight_opt->count() > 0 && graphone_path.empty())
    throw UsageError("--graphone-weight goes with --rescore-graphone");
  if (union_beams && paths.empty()) throw UsageError("--rescore-union goes with --rescore (the models whose beams join)");
}

Rescoring load_rescorers(const RescoreOptions& options, const decode::LoadedModel& first, const std::string& first_name,
                         const PrecisionOptions& precision, const std::string& tool) {
  std::vector<std::string> paths = options.paths;  // --rescore's, then --rescore-inverse's
  paths.insert(paths.end(), options.inverse_paths.begin(), options.inverse_paths.end());
  Rescoring r;
  r.models = load_lowered_checkpoints(paths, precision, tool);
  std::vector<const decode::LoadedModel*> together{&first};
  std::vector<std::string> names{first_name};
  std::vector<bool> inverse{false};
  for (size_t k = 0; k < r.models.size(); ++k) {
    together.push_back(&r.models[k]);
    names.push_back(paths[k]);
    inverse.push_back(k >= options.paths.size());
    r.rescorers.push_back({r.models[k].model.get(), r.models[k].right_left, inverse.back(),
                           inverse.back() ? options.inverse_weight : options.weight, !inverse.back() && options.union_beams});
  }
  decode::check_rescorers(together, names, inverse);
  if (!options.graphone_path.empty()) {
    r.graphone = std::make_unique<models::GraphoneModel>(models::read_graphone_model(options.graphone_path));
    AK_CHECK(r.graphone->src_tokenizer() == first.src_tokenizer && r.graphone->tgt_tokenizer() == first.tgt_tokenizer,
             "--rescore-graphone {}: its tokenizers ({}, {}) are not {}'s ({}, {})", options.graphone_path,
             models::tokenizer_name(r.graphone->src_tokenizer()), models::tokenizer_name(r.graphone->tgt_tokenizer()),
             first_name, models::tokenizer_name(first.src_tokenizer), models::tokenizer_name(first.tgt_tokenizer));
    r.graphone_scorer = std::make_unique<decode::GraphoneScorer>(*r.graphone, first.src_vocab, first.tgt_vocab);
    decode::Rescorer g;
    g.weight = options.graphone_weight;
    g.pair = r.graphone_scorer.get();
    r.rescorers.push_back(g);
  }
  return r;
}

void add_threads_option(CLI::App& app, int& threads) {
  app.add_option("--threads", threads, fmt::format("Threads for the heavy kernels, 0 (one per core) to {}", kMaxThreads))
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            long long n = -1;
            if (!CLI::detail::lexical_cast(text, n) || n < 0 || n > kMaxThreads)
              return fmt::format("{} is not a thread count: give 0 (one per core) to {}", text, kMaxThreads);
            return "";
          },
          fmt::format("0..{}", kMaxThreads)))
      ->capture_default_str();
}

Output::Output(const OutputOptions& out) {
  if (out.path != "-") file_ = std::make_unique<io::AtomicFileWriter>(out.path);
}

Output::~Output() = default;

void Output::write(std::string body) {
  body += '\n';
  if (file_) {
    file_->write(body);
    return;
  }
  std::fwrite(body.data(), 1, body.size(), stdout);
  std::fflush(stdout);
  AK_CHECK(!std::ferror(stdout), "standard output: write error");
}

void Output::commit() {
  if (file_) file_->commit();
}

void emit(const OutputOptions& out, std::string body) {
  Output sink(out);
  sink.write(std::move(body));
  sink.commit();
}

void emit_value(const OutputOptions& out, const io::Value& value) {
  if (out.path != "-" && io::is_binary_format(out.path)) return io::write_value_file(out.path, value);
  emit(out, io::to_json(value, out.write_options()));
}

void per_record_text(io::Sources& sources, const OutputOptions& out, const std::function<std::string()>& compute) {
  if (out.path != "-" && io::is_binary_format(out.path))
    throw UsageError(fmt::format("-o {}: this writes text, not tensors; give -o a .json or .txt file", out.path));
  Output sink(out);
  do {
    std::string text;
    try {
      text = compute();
    } catch (const Error& e) {
      if (sources.record_index() == 0) throw;
      fail("record {}: {}", sources.record_index() + 1, e.what());
    }
    sink.write(std::move(text));
  } while (sources.next_record());
  sink.commit();
}

void per_record(io::Sources& sources, const OutputOptions& out, const std::function<io::Value()>& compute) {
  if (out.path != "-" && io::is_binary_format(out.path)) {  // one file, one result
    const io::Value value = compute();
    AK_CHECK(!sources.next_record(), "{}: holds one result, and the input is a stream of records (write -o FILE.json)", out.path);
    return io::write_value_file(out.path, value);
  }
  const io::WriteOptions w = out.write_options();
  per_record_text(sources, out, [&] { return io::to_json(compute(), w); });
}

namespace {

// "-#NAME" (member NAME of standard input) looks like the short option "-#" to CLI11. run() hides
// such arguments from the parser behind this mark, and every option gives them back unchanged.
constexpr char kStdinMark = '\x1f';

void restore_stdin_references(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    opt->transform(
        [](const std::string& s) { return s.rfind(std::string{kStdinMark, '#'}, 0) == 0 ? "-" + s.substr(1) : s; },
        "", "");
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) restore_stdin_references(*sub);
}

}  // namespace

namespace {

// CLI11's "Could not convert: --epochs = 2.5" said as the number checks say it: "--epochs: 2.5 is not a
// whole number" or "--seed: 1e30 is more than 18446744073709551615" (the largest the option holds).
std::string conversion_message(const CLI::App& app, const std::string& what) {
  const std::string prefix = "Could not convert: ";
  const size_t eq = what.find(" = ");
  if (what.rfind(prefix, 0) != 0 || eq == std::string::npos) return what;
  const std::string option = what.substr(prefix.size(), eq - prefix.size());
  const std::string text = what.substr(eq + 3);
  double x = 0;
  if (!CLI::detail::lexical_cast(text, x) || std::isnan(x)) return fmt::format("{}: {} is not a number", option, text);
  if (x != std::floor(x)) return fmt::format("{}: {} is not a whole number", option, text);
  const CLI::Option* opt = nullptr;
  try {
    opt = app.get_option(option);
  } catch (const CLI::OptionNotFound&) {
  }
  const bool is_unsigned = opt && opt->get_type_name().rfind("UINT", 0) == 0;  // "UINT:NUMBER >= 0"
  if (x < 0 && is_unsigned) return fmt::format("{}: {} is negative, expected a number >= 0", option, text);
  return fmt::format("{}: {} is more than {}, the largest {} holds", option, text,
                     is_unsigned ? std::to_string(UINT64_MAX) : std::to_string(INT64_MAX), option);
}

}  // namespace

namespace {

// An error message in one write: under mpirun every process may print one, and the first to exit can have the
// others killed; a message written piece by piece would then come out cut or interleaved with another's.
void say(const std::string& text) {
  std::cerr.write(text.data(), static_cast<std::streamsize>(text.size()));
  std::cerr.flush();
}
void say_usage(const std::string& name, const std::string& message) {
  say(fmt::format("{}: {}\n(run {} --help for usage)\n", name, message, name));
}

}  // namespace

int run(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  const std::string name = app.get_name();
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> arg_ptrs;
  for (auto& a : args) {
    if (a.size() > 1 && a[0] == '-' && a[1] == '#') a[0] = kStdinMark;
    arg_ptrs.push_back(a.data());
  }
  restore_stdin_references(app);
  // "tensor bogus": name the unknown subcommand and list the real ones (CLI11 says "not expected")
  auto subcommands = app.get_subcommands([](CLI::App*) { return true; });
  if (!subcommands.empty() && argc > 1 && argv[1][0] != '-' &&
      std::none_of(subcommands.begin(), subcommands.end(), [&](CLI::App* s) { return s->check_name(argv[1]); })) {
    std::vector<std::string> names;
    for (CLI::App* s : subcommands) names.push_back(s->get_name());
    std::cerr << name << ": unknown subcommand \"" << argv[1] << "\" (subcommands: " << fmt::format("{}", fmt::join(names, ", "))
              << ")\n(run " << name << " --help for usage)\n";
    return 2;
  }
  try {
    app.parse(argc, arg_ptrs.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ConversionError& e) {
    say_usage(name, conversion_message(app, e.what()));
    return 2;
  } catch (const CLI::ParseError& e) {
    std::string message = e.what();
    for (char& c : message)
      if (c == kStdinMark) c = '-';
    say_usage(name, message);
    return 2;
  }
  try {
    retain_freed_memory();  // record after record (or step after step) reuses the same pages (tensor/memory.hpp)
    return body();
  } catch (const UsageError& e) {
    say_usage(name, e.what());
    return 2;
  } catch (const Error& e) {
    say(fmt::format("{}: {}\n", name, e.what()));
    return 1;
  } catch (const std::bad_alloc&) {
    say(fmt::format("{}: out of memory\n", name));
    return 1;
  } catch (const std::exception& e) {
    say(fmt::format("{}: {}\n", name, e.what()));
    return 1;
  }
}

Tensor keyword_or_tensor(io::Sources& sources, const std::string& ref, const std::string& option,
                         const std::vector<std::string>& keywords, bool allow_nan) {
  const io::Reference r = io::parse_reference(ref);
  if (r.path != "-" && access(r.path.c_str(), F_OK) != 0)
    throw UsageError(fmt::format("{} {}: not one of {} and no file of that name", option, ref, fmt::join(keywords, ", ")));
  return sources.tensor(ref, option.substr(option.find_first_not_of('-')), allow_nan);
}

int stderr_columns() {
  struct winsize w {};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0 && n < 100000) return static_cast<int>(n);
  }
  return 80;
}

void refuse_over_limit(const std::string& what, const Shape& shape, int64_t max_elements) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) n = INT64_MAX;
  if (n > max_elements)
    fail("{} {} has {} elements, more than --max-elements {}", what, shape_str(shape), n, max_elements);
}

Shape parse_shape(const std::string& text, bool allow_infer) {
  Shape shape;
  if (text.empty() || text == "[]" || text == "scalar") return shape;
  std::string s = text;
  if (s.front() == '[' && s.back() == ']') s = s.substr(1, s.size() - 2);
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find_first_of(",x", start);
    std::string part = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    while (!part.empty() && part.front() == ' ') part.erase(part.begin());
    while (!part.empty() && part.back() == ' ') part.pop_back();
    int64_t d = 0;
    size_t used = 0;
    try {
      d = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty()) throw UsageError(fmt::format("shape \"{}\": a size is missing (write sizes like 3,4)", text));
    if (used != part.size()) throw UsageError(fmt::format("shape \"{}\": \"{}\" is not a size", text, part));
    if (d < 0 && !(allow_infer && d == -1))
      throw UsageError(fmt::format("shape \"{}\": sizes must be non-negative{}", text, allow_infer ? " (or one -1)" : ""));
    shape.push_back(d);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (shape.size() > static_cast<size_t>(kMaxRank))
    throw UsageError(fmt::format("shape \"{}\" has more than {} dimensions", text, kMaxRank));
  int64_t numel = 1, inferred = 0;
  for (int64_t d : shape) {
    if (d == -1) {
      if (++inferred > 1) throw UsageError(fmt::format("shape \"{}\": only one size may be -1", text));
    } else if (__builtin_mul_overflow(numel, d, &numel)) {
      throw UsageError(fmt::format("shape \"{}\" has more elements than fit in 64 bits", text));
    }
  }
  return shape;
}

}  // namespace attnkit::tools
