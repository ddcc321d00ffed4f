// Forced decoding and n-best rescoring. Legend: R rows (one output per row, with its source), Vt target vocabulary.
//
// score_outputs: the log-probability a model gives to outputs it is shown, not ones it chose,
//   log p(y | x) = sum_{t < |y|} log p(y_t | y_<t, x) + log p(<eos> | y, x)
// fed <bos>, y_0, ..., y_{|y|-1} one step at a time (the search's loop, with the next token given), each row's
// source encoded once; a row leaves the state after its <eos>. The log-probabilities are the model's own (the
// search's masked tokens are not renormalised there either), so a beam hypothesis scored this way gets back
// its Hypothesis::score within float rounding.
//
// rescore: reranks each source's hypotheses (a beam's n-best) by the mean of their log-probabilities under the
// search's model and under every rescoring model, weighted (w_m = 1 unless given),
//   combined = (score + sum_m w_m log p_m(y | x)) / (1 + sum_m w_m),
//   normalized = combined / ((5 + |y|) / 6)^length_penalty
// best first (ties keep the search's order). A rescoring model that reads its outputs right to left (trained on
// reversed targets: train/trainer.hpp `right_left`) is shown each hypothesis reversed: the two directions make
// different mistakes, so an output both find likely is more often right (Marian's right-to-left rescoring; in
// G2P, L2R/R2L agreement). An unfinished hypothesis (stopped at the length limit, Hypothesis::ended false) is
// scored without the <eos> its search score lacks too.
// An inverse rescoring model, trained the other way (target -> source), adds log p_m(x | y) instead: how well
// the hypothesis explains its source (the noisy channel; in G2P, a phoneme-to-grapheme model asking whether the
// pronunciation spells the word). It is shown each hypothesis as its source and the source as its output (turned
// round when that model reads its outputs right to left); an empty hypothesis, which it cannot read, gets
// log p = -inf (it ranks after every other).
//
// A joint model of pairs that is not a decoder (the graphone model, models/graphone.hpp) rescores through a
// PairScorer: its log P(x, y) is the rescorer's term, weighted as a model's. It is the joint probability, not
// log p(y | x); the two differ by log P(x), the same for every hypothesis of one source, so the ranking of one
// source's hypotheses is the same (with --length-penalty, that constant is divided by each one's length term
// too). A hypothesis it cannot segment (a token or a pairing it never saw) takes the lowest log P of the source's
// hypotheses it can segment, less 100; when it can segment none of a source's hypotheses, that source is reranked
// by the other models alone (its term left out, so every score stays a number).
//
// join_beams (the union of beams): each rescoring model marked `searches` runs its own beam search over the
// sources too, and the hypotheses it finds that the search's lists lack are added to them before rescore()
// ranks them all. Such a hypothesis's `score` is the search model's log p (score_outputs), so the formula above
// treats it as one of the search's own. A right pronunciation the left-to-right beam lost but the right-to-left
// beam kept can then win: the pool holds more right answers than either beam.
#pragma once
#include <cstdint>
#include <vector>

#include "attnkit/decode/search.hpp"
#include "attnkit/models/graphone.hpp"
#include "attnkit/models/decoding.hpp"

namespace attnkit::decode {

// outputs[r] (target ids, without <bos> / <eos>) given sources[r]: log p(outputs[r] <eos> | sources[r]), or
// without the <eos> term where ends[r] is false (an unfinished output; `ends` empty: every output ends).
// options gives the special ids (bos, eos, pad). Refuses lists of different lengths, an empty list, and ids
// outside the model's target vocabulary.
std::vector<double> score_outputs(models::Decodable& model, const std::vector<std::vector<int64_t>>& sources,
                                  const std::vector<std::vector<int64_t>>& outputs, const SearchOptions& options,
                                  const std::vector<bool>& ends = {});

// log P(source, output) of ids in a checkpoint's vocabularies; -inf for a pair it cannot score.
class PairScorer {
 public:
  virtual ~PairScorer() = default;
  virtual double log_prob(const std::vector<int64_t>& source, const std::vector<int64_t>& output) const = 0;
};

// A graphone model scoring the ids of a checkpoint whose vocabularies are `source` and `target`: each id is
// taken to the model's token of the same text; an id whose token the model lacks makes the pair -inf.
class GraphoneScorer : public PairScorer {
 public:
  GraphoneScorer(const models::GraphoneModel& model, const models::Vocab& source, const models::Vocab& target);
  double log_prob(const std::vector<int64_t>& source, const std::vector<int64_t>& output) const override;

 private:
  const models::GraphoneModel& model_;
  std::vector<int32_t> src_map_, tgt_map_;  // checkpoint id -> the model's id, -1: none
};

struct Rescorer {
  models::Decodable* model = nullptr;
  bool reversed = false;  // is shown its outputs reversed: a right-to-left model, the hypotheses (and sources)
                          // being in reading order (decode::reading_order)
  bool inverse = false;   // trained target -> source: scores the source given each hypothesis
  double weight = 1.0;    // w_m >= 0
  bool searches = false;  // join_beams: its own beam's hypotheses join the search's (not with `inverse`)
  const PairScorer* pair = nullptr;  // instead of `model`: a joint model of (source, output), above
};

// results[n]: source n's hypotheses (search()'s), reranked in place as above; each one's `normalized` becomes
// its combined ranking score (its `score` stays the search model's).
void rescore(std::vector<std::vector<Hypothesis>>& results, const std::vector<std::vector<int64_t>>& sources,
             const std::vector<Rescorer>& rescorers, const SearchOptions& options);

// results[n]: source n's hypotheses from `search_model`'s search, in reading order (`search_reversed`: that
// model reads its outputs right to left, decode::reading_order); each `searches` rescorer's beam search
// (options; first_index as search() takes it) adds the hypotheses results[n] lacks, in reading order, with
// `score` the search model's log p and `normalized` its normalized_score. options.attention must be off (an
// added hypothesis has no attention of the search model's). Nothing is searched when no rescorer searches.
void join_beams(std::vector<std::vector<Hypothesis>>& results, const std::vector<std::vector<int64_t>>& sources,
                models::Decodable& search_model, bool search_reversed, const std::vector<Rescorer>& rescorers,
                const SearchOptions& options, int64_t first_index = 0);

}  // namespace attnkit::decode
