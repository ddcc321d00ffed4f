// graphone-train: train a joint-sequence (graphone) model of source/target pairs (docs/graphone-train.md); the
// model is models/graphone.hpp's, its training train/graphone.hpp's.
#include <fmt/format.h>

#include <iostream>

#include <nlohmann/json.hpp>

#include "attnkit/io/tensor_file.hpp"
#include "attnkit/models/graphone.hpp"
#include "attnkit/train/graphone.hpp"
#include "common/common.hpp"

using namespace attnkit;
using attnkit::tools::UsageError;

int main(int argc, char** argv) {
  CLI::App app{"", "graphone-train"};
  tools::describe(
      app,
      "Train a joint-sequence (graphone) model of pairs.\n"
      "Aligns each pair of a TSV or JSONL file (seq2seq-train's formats) into graphones, chunks of 1-2 source "
      "tokens with 0-2 target tokens, by expectation-maximisation, and counts the graphone n-grams: Sequitur's "
      "model family. seq2seq-eval and transformer-decode rescore a beam with it (--rescore-graphone). A summary "
      "in JSON on standard output (docs/graphone-train.md).",
      "  printf 'cat\\tk ae t\\ncats\\tk ae t s\\nhat\\thh ae t\\nhats\\thh ae t s\\n' > lex.tsv\n"
      "  graphone-train --train lex.tsv --tokenizer char --target-tokenizer space --order 3 --save g2p.graphone.json\n");
  std::string train_path, save_path, tokenizer = "char", target_tokenizer, input_format = "auto";
  train::GraphoneOptions o;
  bool skip_bad_lines = false;
  app.add_option("--train", train_path, "Training pairs: TSV (source TAB target) or JSONL; - for standard input")
      ->required()
      ->type_name("FILE");
  app.add_option("--tokenizer", tokenizer, "How the source side (and the target, unless --target-tokenizer) is split")
      ->check(CLI::IsMember({"char", "space", "byte", "ids"}))
      ->capture_default_str();
  app.add_option("--target-tokenizer", target_tokenizer, "How the target side is split (default: --tokenizer's)")
      ->check(CLI::IsMember({"char", "space", "byte", "ids"}));
  app.add_option("--input-format", input_format, "The file's format; auto: JSONL for .jsonl, .ndjson, .json, else TSV")
      ->check(CLI::IsMember({"auto", "tsv", "jsonl"}))
      ->capture_default_str();
  app.add_flag("--skip-bad-lines", skip_bad_lines, "Count and skip lines that do not parse instead of refusing the file");
  app.add_option("--order", o.order, fmt::format("n of the graphone n-grams, 1 to {}", models::GraphoneModel::kMaxOrder))
      ->check(CLI::Range(1, models::GraphoneModel::kMaxOrder))
      ->capture_default_str();
  app.add_option("--iterations", o.iterations, "Expectation-maximisation iterations of the alignment, 1 to 100")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--discount", o.discount, "D of the n-grams' absolute discounting, in (0, 1)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double d = 0;
            if (!CLI::detail::lexical_cast(text, d) || !(d > 0 && d < 1)) return text + " is not a number in (0, 1)";
            return "";
          },
          "(0, 1)"))
      ->capture_default_str();
  app.add_option("--save", save_path, "Write the model here (.json, .safetensors or .npz), atomically")
      ->required()
      ->type_name("MODEL");

  return tools::run(app, argc, argv, [&]() -> int {
    if (io::file_format(save_path) == io::FileFormat::Npy)
      throw UsageError("--save " + save_path + ": a .npy file holds one tensor; give .json, .safetensors or .npz");
    train::DataOptions data;
    data.tokenizer = models::tokenizer_from_name(tokenizer);
    if (!target_tokenizer.empty()) data.target_tokenizer = models::tokenizer_from_name(target_tokenizer);
    data.format = input_format == "tsv"     ? train::DataFormat::Tsv
                  : input_format == "jsonl" ? train::DataFormat::Jsonl
                                            : train::DataFormat::Auto;
    data.skip_bad_lines = skip_bad_lines;
    const train::Corpus corpus = train::read_corpus(train_path, data);
    if (corpus.bad_lines > 0) std::cerr << "graphone-train: " << corpus.bad_lines_summary() << "\n";
    train::GraphoneReport report;
    const models::GraphoneModel model = train::train_graphone(corpus, o, &report);
    if (report.unaligned > 0)
      std::cerr << fmt::format("graphone-train: {}: {} of {} pairs left out: no segmentation into graphones of 1-2 "
                               "source and 0-2 target tokens covers them (a target longer than twice its source)\n",
                               train_path, report.unaligned, report.pairs);
    models::save_graphone_model(model, save_path);
    nlohmann::json j;
    j["model"] = save_path;
    j["pairs"] = report.pairs;
    j["unaligned"] = report.unaligned;
    j["graphones"] = static_cast<int64_t>(model.units().size()) - 1;
    j["order"] = model.order();
    j["ngrams"] = nlohmann::json::array();
    for (const models::GraphoneCounts& c : model.counts()) j["ngrams"].push_back(static_cast<int64_t>(c.count.size()));
    j["log_likelihood"] = report.log_likelihood;
    tools::emit(tools::OutputOptions{}, j.dump());
    return 0;
  });
}
