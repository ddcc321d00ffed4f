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
  std::vector<std::string> rescore_paths;
  tools::add_models_option(app, "--rescore", rescore_paths,
                           "With --strategy beam: rerank the beam's hypotheses by the mean of their log-probabilities "
                           "under the search's model(s) and these checkpoints (repeatable); a right-to-left model "
                           "(seq2seq-train --right-left) reads them reversed; same tokenizers and vocabularies");
  std::vector<std::string> inverse_paths;
  tools::add_models_option(app, "--rescore-inverse", inverse_paths,
                           "With --strategy beam: rescore as --rescore with a model trained the other way, target -> "
                           "source (repeatable): the log-probability it gives the source from each hypothesis; its "
                           "source tokens are MODEL's target tokens and the other way");
  double inverse_weight = 1.0;
  auto* inverse_weight_opt =
      app.add_option("--inverse-weight", inverse_weight,
                     "With --rescore-inverse: the weight of each inverse model's log-probability in the mean (the "
                     "search's and --rescore's models weigh 1)")
          ->transform(tools::non_negative())
          ->capture_default_str();
  tools::add_threads_option(app, threads);
  tools::PrecisionOptions precision;
  tools::add_precision_options(app, precision);

  return tools::run(app, argc, argv, [&]() -> int {
    o.search.strategy = decode::parse_strategy(strategy);
    if (o.search.strategy != decode::Strategy::Beam) {
      for (CLI::Option* opt : {beam_opt, lp_opt})
        if (opt->count() > 0) throw UsageError(opt->get_name() + " goes with --strategy beam");
    }
    if (!rescore_paths.empty() && o.search.strategy != decode::Strategy::Beam)
      throw UsageError("--rescore goes with --strategy beam (it reranks the beam's hypotheses)");
    if (!inverse_paths.empty() && o.search.strategy != decode::Strategy::Beam)
      throw UsageError("--rescore-inverse goes with --strategy beam (it reranks the beam's hypotheses)");
    if (inverse_weight_opt->count() > 0 && inverse_paths.empty())
      throw UsageError("--inverse-weight goes with --rescore-inverse");
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
    std::vector<std::string> rescoring_paths = rescore_paths;  // --rescore's, then --rescore-inverse's
    rescoring_paths.insert(rescoring_paths.end(), inverse_paths.begin(), inverse_paths.end());
    std::vector<decode::LoadedModel> rescoring = tools::load_lowered_checkpoints(rescoring_paths, precision, "seq2seq-eval");
    std::vector<decode::Rescorer> rescorers;
    std::vector<const decode::LoadedModel*> together{&models.front()};
    std::vector<std::string> names{model_path};
    std::vector<bool> inverse{false};
    for (size_t k = 0; k < rescoring.size(); ++k) {
      together.push_back(&rescoring[k]);
      names.push_back(rescoring_paths[k]);
      inverse.push_back(k >= rescore_paths.size());
      rescorers.push_back({rescoring[k].model.get(), rescoring[k].right_left, inverse.back(),
                           inverse.back() ? inverse_weight : 1.0});
    }
    decode::check_rescorers(together, names, inverse);
    o.rescorers = static_cast<int64_t>(rescorers.size());
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
