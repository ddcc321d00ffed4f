// seq2seq-eval's decoding and scoring (seq2seq_eval.hpp).
#include "attnkit/app/seq2seq_eval.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attnkit/tensor/error.hpp"
#include "attnkit/train/metrics.hpp"

namespace attnkit::app {

namespace {

const char* strategy_name(decode::Strategy s) {
  return s == decode::Strategy::Greedy ? "greedy" : s == decode::Strategy::Beam ? "beam" : "sample";
}

// A side's tokens as text (spm: decoded by the side's SentencePiece model, as DecodePieces does).
std::string joined(const decode::LoadedModel& model, const std::vector<std::string>& tokens, bool target) {
  const std::optional<models::SpmModel>& spm = target ? model.tgt_spm : model.src_spm;
  if (spm) return spm->decode((target ? model.tgt_vocab : model.src_vocab).encode(tokens));
  return models::join_tokens(tokens, target ? model.tgt_tokenizer : model.src_tokenizer);
}

// The pieces a prediction is scored by: with an spm target, the pieces of its text (decoded, then encoded again
// as the references were), so that a prediction spelled in other pieces is right when its text is; else its tokens.
std::vector<std::string> scored_tokens(const decode::LoadedModel& model, const std::vector<int64_t>& ids) {
  std::vector<std::string> tokens = decode::target_tokens(model, ids);
  if (!model.tgt_spm) return tokens;
  const std::vector<int64_t> canonical = model.tgt_spm->encode(decode::target_text(model, tokens));
  tokens.clear();
  for (const int64_t id : canonical) tokens.push_back(model.tgt_vocab.token(id));
  return tokens;
}

}  // namespace

EvalReport evaluate(const decode::LoadedModel& model, const std::string& test_path, const EvalOptions& options) {
  return evaluate(model, *model.model, test_path, options);
}

EvalReport evaluate(const decode::LoadedModel& model, models::Decodable& decoder, const std::string& test_path,
                    const EvalOptions& options, const std::vector<decode::Rescorer>& rescorers) {
  AK_CHECK(options.search.strategy != decode::Strategy::Sample,
           "evaluation decodes with greedy or beam search, not sampling");
  AK_CHECK(options.batch > 0, "evaluation: batch {} must be positive", options.batch);
  AK_CHECK(rescorers.empty() || options.search.strategy == decode::Strategy::Beam,
           "evaluation: rescoring reranks a beam's hypotheses: it goes with beam search");
  decode::SearchOptions search = options.search;
  search.n_best = rescorers.empty() ? 1 : search.beam;
  search.attention = false;
  decode::use_special_ids(model, search);
  search.validate();

  train::DataOptions data;
  data.tokenizer = model.src_tokenizer;
  data.target_tokenizer = model.tgt_tokenizer;
  data.src_spm = model.src_spm;
  data.tgt_spm = model.tgt_spm;
  data.format = options.format;
  const train::Corpus test = train::read_corpus(test_path, data);
  const std::vector<train::ReferenceGroup> groups = train::group_by_source(test);

  EvalReport report;
  report.test = test.name;
  report.lines = test.size();
  train::ErrorRates rates;
  for (size_t begin = 0; begin < groups.size(); begin += static_cast<size_t>(options.batch)) {
    const size_t end = std::min(groups.size(), begin + static_cast<size_t>(options.batch));
    std::vector<std::vector<int64_t>> sources;
    for (size_t g = begin; g < end; ++g) {
      int64_t unknown = 0;
      sources.push_back(model.src_vocab.encode(groups[g].src, &unknown));
      if (model.src_spm)  // characters the SentencePiece model lacks: its <unk> piece
        unknown = std::count(sources.back().begin(), sources.back().end(), models::Vocab::kUnk);
      report.unknown_source_tokens += unknown;
    }
    auto results = decode::search(decoder, sources, search, static_cast<int64_t>(begin));
    decode::reading_order(model, results);
    decode::join_beams(results, sources, decoder, model.right_left, rescorers, search, static_cast<int64_t>(begin));
    decode::rescore(results, sources, rescorers, search);
    for (size_t g = begin; g < end; ++g) {
      const decode::Hypothesis& best = results[g - begin].front();
      const std::vector<std::string> prediction = scored_tokens(model, best.ids);
      const auto& refs = groups[g].references;
      report.unfinished += !best.ended;
      rates.add(prediction, refs);
      // the closest reference, as ErrorRates picks it: least edit distance, ties to the earlier one
      size_t closest = 0;
      int64_t least = -1;
      for (size_t r = 0; r < refs.size(); ++r) {
        const int64_t d = train::edit_distance(prediction, refs[r]);
        if (least < 0 || d < least) least = d, closest = r;
      }
      const auto& ref = refs[closest];
      for (size_t i = 0; i < std::min(prediction.size(), ref.size()); ++i) report.correct_tokens += prediction[i] == ref[i];
      report.compared_tokens += static_cast<int64_t>(std::max(prediction.size(), ref.size()));
      if (least > 0 && static_cast<int64_t>(report.wrong.size()) < options.show)
        report.wrong.push_back({joined(model, groups[g].src, false), joined(model, prediction, true), joined(model, ref, true)});
    }
  }
  report.words = rates.words();
  report.wrong_words = rates.wrong_words();
  report.edits = rates.edits();
  report.reference_tokens = rates.reference_tokens();
  report.exact_match = rates.exact_match();
  report.wer = rates.word_error_rate();
  report.per = rates.token_error_rate();
  report.token_accuracy =
      report.compared_tokens == 0 ? 0.0 : static_cast<double>(report.correct_tokens) / static_cast<double>(report.compared_tokens);
  return report;
}

std::string eval_json(const EvalReport& r, const EvalOptions& options, bool pretty) {
  nlohmann::ordered_json j;
  j["test"] = r.test;
  j["lines"] = r.lines;
  j["words"] = r.words;
  j["exact_match"] = r.exact_match;
  j["token_accuracy"] = r.token_accuracy;
  j["wer"] = r.wer;
  j["per"] = r.per;
  j["wrong_words"] = r.wrong_words;
  j["edits"] = r.edits;
  j["reference_tokens"] = r.reference_tokens;
  j["unfinished"] = r.unfinished;
  j["unknown_source_tokens"] = r.unknown_source_tokens;
  j["strategy"] = strategy_name(options.search.strategy);
  if (options.search.strategy == decode::Strategy::Beam) j["beam"] = options.search.beam;
  if (options.precision != ops::Precision::Fp32) j["precision"] = ops::precision_name(options.precision);
  if (options.models > 1) j["models"] = options.models;
  if (options.rescorers > 0) j["rescorers"] = options.rescorers;
  if (options.rescore_union) j["rescore_union"] = true;
  nlohmann::ordered_json wrong = nlohmann::ordered_json::array();
  for (const WrongPrediction& w : r.wrong)
    wrong.push_back({{"source", w.source}, {"prediction", w.prediction}, {"reference", w.reference}});
  j["wrong"] = wrong;
  return j.dump(pretty ? 2 : -1);
}

std::string eval_table(const EvalReport& r, const EvalOptions& options) {
  std::string out = fmt::format("{}: {} lines, {} words (distinct sources), {} search{}{}{}{}\n", r.test, r.lines, r.words,
                                strategy_name(options.search.strategy),
                                options.search.strategy == decode::Strategy::Beam ? fmt::format(" (beam {})", options.search.beam) : "",
                                options.precision == ops::Precision::Fp32
                                    ? std::string()
                                    : fmt::format(", {} weights", ops::precision_name(options.precision)),
                                options.models > 1 ? fmt::format(", an ensemble of {} models", options.models) : "",
                                options.rescorers > 0 ? fmt::format(", rescored by {} model{}{}", options.rescorers,
                                                                    options.rescorers > 1 ? "s" : "",
                                                                    options.rescore_union ? ", beams joined" : "")
                                                      : "");
  out += fmt::format("exact match     {:7.2f} %   ({} of {} words)\n", 100 * r.exact_match, r.words - r.wrong_words, r.words);
  out += fmt::format("WER             {:7.2f} %   ({} of {} words wrong)\n", 100 * r.wer, r.wrong_words, r.words);
  out += fmt::format("PER             {:7.2f} %   (edit distance {} over {} reference tokens)\n", 100 * r.per, r.edits,
                     r.reference_tokens);
  out += fmt::format("token accuracy  {:7.2f} %   ({} of {} positions)\n", 100 * r.token_accuracy, r.correct_tokens, r.compared_tokens);
  if (r.unfinished > 0) out += fmt::format("unfinished      {} predictions stopped at the length limit\n", r.unfinished);
  if (r.unknown_source_tokens > 0) out += fmt::format("unknown         {} source tokens mapped to <unk>\n", r.unknown_source_tokens);
  for (const WrongPrediction& w : r.wrong)
    out += fmt::format("wrong: {} -> {} (reference {})\n", w.source, w.prediction, w.reference);
  return out;
}

}  // namespace attnkit::app
