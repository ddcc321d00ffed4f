// seq2seq-eval: score a seq2seq-train checkpoint on a test set of pairs (docs/seq2seq-eval.md); the
// decoding and scoring are app/seq2seq_eval.hpp's.
#include <iostream>

#include "attnkit/app/seq2seq_eval.hpp"
#include "attnkit/decode/ensemble.hpp"
#include "attnkit/decode/loader.hpp"
#include "attnkit/tensor/threads.hpp"
#include "common/common.hpp"

using namespace attnkit;
using attnkit::tools::UsageError;

int main(int argc, char** argv) {
  CLI::App app{"", "seq2seq-eval"};
  tools::describe(
      app,
      "Evaluate a seq2seq-train checkpoint on a test set.\n"
      "Decodes every distinct source of a TSV or JSONL test set (seq2seq-train's formats) with greedy or beam "
      "search and scores the predictions: exact match, token accuracy, WER and PER; a source on several lines "
      "has several references and its prediction is right when it equals any of them. JSON on standard output "
      "unless --format table (docs/seq2seq-eval.md).",
      "  seq2seq-train --task reverse --model lstm --attention dot --hidden 32 --embed 16 --steps 300 --lr 0.01 "
      "--threads 1 --save model.json\n"
      "  printf '1 2 3\\t3 2 1\\n4 5 6 7\\t7 6 5 4\\n' > test.tsv && seq2seq-eval model.json test.tsv\n"
      "  seq2seq-eval model.json test.tsv --strategy beam --beam 4 --format table --show 3\n"
      "  seq2seq-train --task reverse --model lstm --attention dot --hidden 32 --embed 16 --steps 300 --lr 0.01 "
      "--threads 1 --seed 2 --save model2.json\n"
      "  seq2seq-eval model.json test.tsv --ensemble model2.json --format table\n"
      "  seq2seq-train --task reverse --model lstm --attention dot --hidden 32 --embed 16 --steps 300 --lr 0.01 "
      "--threads 1 --right-left --save model-rl.json\n"
      "  seq2seq-eval model.json test.tsv --strategy beam --beam 4 --rescore model-rl.json --format table\n"
      "  printf '{\"src\": \"1 2\", \"tgt\": \"2 1\"}\\n' > test.jsonl && seq2seq-eval model.json test.jsonl --pretty\n");
  std::string model_path, test_path, strategy = "greedy", input_format = "auto", format = "json";
  tools::OutputOptions out;
  app::EvalOptions o;
  int threads = 0;
  app.add_option("model", model_path, "Checkpoint written by seq2seq-train (.json, .safetensors, .npz), either family")
      ->required()
      ->type_name("MODEL.json");
  app.add_option("test", test_path, "Test pairs: TSV (source TAB target) or JSONL ({\"src\": ..., \"tgt\": ...}); - for standard input")
      ->required()
      ->type_name("TEST");
  app.add_option("--input-format", input_format, "The test set's format; auto: JSONL for .jsonl, .ndjson, .json, else TSV")
      ->check(CLI::IsMember({"auto", "tsv", "jsonl"}))
      ->capture_default_str();
  app.add_option("--strategy", strategy, "Search")->check(CLI::IsMember({"greedy", "beam"}))->capture_default_str();
  auto* beam_opt = app.add_option("--beam", o.search.beam, "Beam: hypotheses kept per source (the best is scored)")
                       ->transform(tools::positive())
                       ->capture_default_str();
  auto* lp_opt = app.add_option("--length-penalty", o.search.length_penalty,
                                "Beam: GNMT alpha; hypotheses ranked by score / ((5 + len) / 6)^alpha")
                     ->transform(tools::non_negative())
                     ->capture_default_str();
  app.add_option("--max-len", o.search.max_len, "Output tokens at most (default: 2 x source length + 10)")->transform(tools::positive());
  app.add_option("--batch", o.batch, "Sources decoded together")->transform(tools::positive())->capture_default_str();
  app.add_option("--show", o.show, "Report the first N wrong predictions (source, prediction, closest reference)")
      ->transform(tools::non_negative())
      ->capture_default_str();
  app.add_option("--format", format, "JSON, or a readable table")->check(CLI::IsMember({"json", "table"}))->capture_default_str();
  app.add_flag("--pretty", out.pretty, "Indent the JSON");
  app.add_option("-o,--output", out.path, "Write the report to FILE (atomically) instead of standard output")->type_name("FILE");
  std::vector<std::string> ensemble_paths;
  tools::add_models_option(app, "--ensemble", ensemble_paths,
                           "Decode MODEL and these checkpoints together (repeatable): the mean of their next-token "
                           "distributions; same tokenizers and vocabularies");
  tools::RescoreOptions rescore;
  tools::add_rescore_options(app, rescore);
  tools::add_threads_option(app, threads);
  tools::PrecisionOptions precision;
  tools::add_precision_options(app, precision);

  return tools::run(app, argc, argv, [&]() -> int {
    o.search.strategy = decode::parse_strategy(strategy);
    if (o.search.strategy != decode::Strategy::Beam) {
      for (CLI::Option* opt : {beam_opt, lp_opt})
        if (opt->count() > 0) throw UsageError(opt->get_name() + " goes with --strategy beam");
    }
    rescore.check(o.search.strategy == decode::Strategy::Beam);
    if (out.pretty && format == "table") throw UsageError("--pretty goes with --format json");
    o.format = input_format == "tsv" ? train::DataFormat::Tsv : input_format == "jsonl" ? train::DataFormat::Jsonl : train::DataFormat::Auto;
    set_num_threads(threads);
    std::vector<std::string> paths{model_path};
    paths.insert(paths.end(), ensemble_paths.begin(), ensemble_paths.end());
    std::vector<decode::LoadedModel> models = tools::load_lowered_checkpoints(paths, precision, "seq2seq-eval");
    o.precision = tools::precision_plan(precision).precision();
    std::vector<const decode::LoadedModel*> loaded;
    std::vector<models::TranslationModel*> members;
    for (decode::LoadedModel& m : models) {
      loaded.push_back(&m);
      members.push_back(m.model.get());
    }
    decode::check_ensemble(loaded, paths);
    decode::Ensemble ensemble(members);
    o.models = ensemble.size();
    const tools::Rescoring rescoring = tools::load_rescorers(rescore, models.front(), model_path, precision, "seq2seq-eval");
    const std::vector<decode::Rescorer>& rescorers = rescoring.rescorers;
    o.rescorers = static_cast<int64_t>(rescorers.size());
    o.rescore_union = rescore.union_beams;
    const app::EvalReport report = app::evaluate(models.front(), ensemble, test_path, o, rescorers);
    tools::Output output(out);
    if (format == "table") {
      std::string text = app::eval_table(report, o);
      text.pop_back();  // (Output::write adds the newline)
      output.write(std::move(text));
    } else {
      output.write(app::eval_json(report, o, out.pretty));
    }
    output.commit();
    return 0;
  });
}
