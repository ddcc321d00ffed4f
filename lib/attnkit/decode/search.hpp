// Search strategies over a models::DecoderState (models/decoding.hpp): greedy, beam, sampling.
// Legend: N sources, K rows per source (beam size, or samples), R rows alive, S source length, Vt target vocabulary.
//
// One loop for the three: every row starts at <bos>; each step gives log-probabilities [R, Vt]; the tokens
// that are never output (`never`: <pad>, <bos>, <unk>) have their log-probability set to -inf before any
// choice, so only real tokens and <eos> are chosen and only <eos> ends a hypothesis; before min_len tokens
// <eos> is forbidden the same way; rows that end (<eos>, or max_len tokens) leave
// the state through select_rows, so that finished sources cost nothing.
//   greedy  the argmax (first index on ties), one row per source.
//   sample  K = n_best rows per source, each drawn from p ∝ exp(log p / temperature), restricted to the top_k
//           most likely tokens (0: all), then to the smallest set of most likely tokens whose probability
//           reaches top_p (1: all); the kept probabilities are renormalised. Each row has its own Rng, seeded
//           from (seed, the source's index in the whole input, the row's number), so a source's samples do not
//           depend on the batch it was decoded in.
//   beam    K = beam rows per source (at the start only the first is alive). Each step takes the 2K best
//           (score + log p) candidates of the source (ties: lower row, then lower token first); an <eos> among
//           the first K ends a hypothesis, the others continue until K rows are alive again. A source is done
//           when K hypotheses have ended (or at max_len: the alive rows end unfinished). beam 1 is greedy.
// Scores: score = the sum of the model's log-probabilities of the tokens produced, <eos> included when it was
// produced (sampling too: the model's log-probabilities, not the tempered or truncated ones).
// Hypotheses are ranked by normalized = score / ((5 + len) / 6)^length_penalty (GNMT; len counts the tokens
// without <eos>; length_penalty 0: the score itself), best first; ties keep the order they ended in.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "attnkit/models/model.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::decode {

// Limits, checked before any work (docs/transformer-decode.md): rows per source (beam, or samples), tokens of
// a source and of an output (max_len, min_len; the default max_len is capped to it), and the bytes of the
// hypothesis tree one search() keeps (N x K x max_len tokens, with attention x S weights each).
inline constexpr int64_t kMaxRowsPerSource = 256;
inline constexpr int64_t kMaxTokens = 4096;
inline constexpr int64_t kMaxTreeBytes = int64_t{1} << 30;

enum class Strategy { Greedy, Beam, Sample };
Strategy parse_strategy(std::string_view name);  // "greedy", "beam", "sample"

struct SearchOptions {
  Strategy strategy = Strategy::Greedy;
  int64_t beam = 4;             // beam: rows per source
  double length_penalty = 0.0;  // GNMT alpha (>= 0)
  int64_t n_best = 1;           // hypotheses returned per source: greedy 1, beam <= beam, sample: samples drawn
  int64_t max_len = 0;          // tokens per hypothesis (without <eos>); 0: 2 * the source's length + 10, at
                                // least min_len, at most kMaxTokens
  int64_t min_len = 0;          // no <eos> before this many tokens
  double temperature = 1.0;     // sample: > 0
  int64_t top_k = 0;            // sample: 0 = all
  double top_p = 1.0;           // sample: in (0, 1]
  uint64_t seed = 1;            // sample
  bool use_cache = true;        // false: the model recomputes the prefix at every step
  bool attention = false;       // keep each step's cross-attention
  int attention_layer = -1;     // -1: the last layer
  int attention_head = -1;      // -1: the mean over heads
  // The special tokens' ids: the target vocabulary's <bos> (fed first) and <eos> (ends a hypothesis), the
  // source vocabulary's <pad> (after each shorter source). models/tokens.hpp's 0-3 unless the model says otherwise
  // (an exported model: decode::LoadedModel's vocabularies' pad_id() ...).
  int64_t bos = 1, eos = 2, pad = 0;
  // Target ids never output (masked to -inf at every step): the target vocabulary's <pad>, <bos>, <unk>.
  std::vector<int64_t> never = {0, 1, 3};
  // Greedy, and sampling with n_best 1: called with (the source's index in `sources`, the token) as each token
  // is chosen (not <eos>), so that a caller can show the output as it is produced.
  std::function<void(int64_t, int64_t)> on_token;
  // Refuses out-of-range values and n_best that the strategy cannot give (attnkit::Error naming the field).
  void validate() const;
};

struct Hypothesis {
  std::vector<int64_t> ids;  // target ids, without <bos> / <eos>
  bool ended = false;        // produced <eos> (false: stopped at max_len)
  double score = 0;          // sum of log-probabilities
  double normalized = 0;     // the ranking score (see above)
  Tensor attention;          // when options.attention, one row per step (ids, then <eos> if ended): [steps, S_n]
                             // over the source's own S_n tokens; a language model's [steps, S + steps - 1], row s
                             // over the prompt and the first s outputs (zeros after); else empty
};

// The ranking score above: score / ((5 + len) / 6)^alpha (alpha 0: the score itself).
double normalized_score(double score, int64_t len, double alpha);

// The sources as a batch (src, src_lengths; <pad> after each row's length). Refuses an empty list or source,
// and a source of more than kMaxTokens tokens.
models::SourceBatch sources_batch(const std::vector<std::vector<int64_t>>& sources, int64_t pad = 0);

// Decodes `sources` (ids in the model's source vocabulary). Returns, per source, its hypotheses best first
// (n_best of them; fewer only when the beam ended fewer). first_index: the index of sources[0] in the whole
// input (seeds sampling).
std::vector<std::vector<Hypothesis>> search(models::Decodable& model,
                                            const std::vector<std::vector<int64_t>>& sources,
                                            const SearchOptions& options, int64_t first_index = 0);

}  // namespace attnkit::decode
