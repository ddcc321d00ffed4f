// seq2seq-eval's library side: a test set of pairs decoded with a seq2seq-train checkpoint, and the
// predictions scored against their references. Here on the app floor because it joins the two siblings:
// the test set is read as seq2seq-train reads its data (train/data.hpp) and scored by train/metrics.hpp,
// the model searched by decode/search.hpp.
//
// A source that appears on several lines has several references (G2P: a word's pronunciations); it is
// decoded once and its prediction is right when it equals any of them. Legend: W words (distinct
// sources), R the reference closest to a prediction (least edit distance, ties to the earlier one).
//   exact match     words whose prediction equals one of their references / W
//   WER             1 - exact match
//   PER             sum over words of edit distance(prediction, R) / sum of |R| (token error rate)
//   token accuracy  sum over words of the positions i where prediction[i] == R[i]
//                   / sum of max(|prediction|, |R|)   (a missing or extra token counts as wrong)
// An spm target is scored by its text: the references are split into the pieces of the checkpoint's
// SentencePiece model, and so is each prediction's detokenized text (so that the same text in other pieces is
// right); the tokens above are those pieces, and the texts reported are detokenized.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/decode/loader.hpp"
#include "attnkit/decode/rescore.hpp"
#include "attnkit/decode/search.hpp"
#include "attnkit/ops/lowp_weights.hpp"
#include "attnkit/train/data.hpp"

namespace attnkit::app {

struct EvalOptions {
  decode::SearchOptions search;              // greedy or beam (the best hypothesis is scored)
  train::DataFormat format = train::DataFormat::Auto;
  int64_t batch = 64;                        // sources decoded together
  int64_t show = 0;                          // wrong predictions kept for the report (the first ones)
  // The precision the model's weights are multiplied in (set on the model by the caller, models/model.hpp
  // set_precision): named in the report when not fp32.
  ops::Precision precision = ops::Precision::Fp32;
  int64_t models = 1;                        // models decoded together (an ensemble): named in the report when > 1
  int64_t rescorers = 0;                     // models rescoring the beam: named in the report when > 0
  bool rescore_union = false;                // their beams joined the search's (decode::join_beams): said so
};

struct WrongPrediction {
  std::string source, prediction, reference;  // texts; the reference closest to the prediction
};

struct EvalReport {
  std::string test;                 // the test set's name
  int64_t lines = 0;                // pairs read
  int64_t words = 0;                // distinct sources
  int64_t wrong_words = 0;
  int64_t edits = 0;                // sum of edit distances to the closest references
  int64_t reference_tokens = 0;     // sum of the closest references' lengths
  int64_t correct_tokens = 0;       // token accuracy's numerator
  int64_t compared_tokens = 0;      // and its denominator
  int64_t unknown_source_tokens = 0;
  int64_t unfinished = 0;           // predictions stopped at the length limit without <eos>
  double exact_match = 0, wer = 0, per = 0, token_accuracy = 0;
  std::vector<WrongPrediction> wrong;  // up to EvalOptions::show
};

// Reads the test set (TSV or JSONL, train/data.hpp's formats, tokenized with the model's tokenizers),
// decodes every distinct source and scores it. Throws attnkit::Error naming the file and line of a bad
// pair, and for a strategy other than greedy or beam.
EvalReport evaluate(const decode::LoadedModel& model, const std::string& test_path, const EvalOptions& options);
// The same decoded by `decoder` (an ensemble with `model` first, decode/ensemble.hpp); `model` gives the
// tokenizers, vocabularies and direction. With `rescorers` (beam search only) the beam's hypotheses are reranked by
// them (decode/rescore.hpp) before the best is scored; the hypotheses are in reading order by then
// (decode::reading_order), so a Rescorer is `reversed` when its model is right to left; the beams of those that
// search join the search's first (decode::join_beams).
EvalReport evaluate(const decode::LoadedModel& model, models::Decodable& decoder, const std::string& test_path,
                    const EvalOptions& options, const std::vector<decode::Rescorer>& rescorers = {});

// {"test", "lines", "words", "exact_match", "token_accuracy", "wer", "per", "wrong_words", "edits",
//  "reference_tokens", "unfinished", "unknown_source_tokens", "strategy", ["beam", "precision", "models",
//  "rescorers", "rescore_union",]
//  "wrong": [{"source", "prediction", "reference"}]} on one line (indented with pretty).
std::string eval_json(const EvalReport& report, const EvalOptions& options, bool pretty);
// The same for reading: one figure per line, then the wrong predictions.
std::string eval_table(const EvalReport& report, const EvalOptions& options);

}  // namespace attnkit::app
