// Incremental decoding: the one entry every search strategy (decode/search.hpp) drives, whatever the model.
// Legend: R rows (hypotheses being extended: a batch's sources, or sources x beams), S source length (the
// batch's longest), Vt target vocabulary, L layers, NH heads.
//
//   auto state = model.start_decoding(sources, /*use_cache=*/true);  // encodes the sources: R = sources.N
//   Tensor lp = state->step(prev);          // prev [R] (<bos> first) -> log-probabilities [R, Vt]
//   state->select_rows({0, 0, 1, 1});       // new row r continues old row rows[r]: expand to beams,
//                                           // reorder beams, drop finished rows (repeats allowed)
//   Tensor a = state->cross_attention(-1, -1);  // [R, S]: the last step's attention over the source
//
// Contract (every model; tests/unit/test_decoding.cpp checks it for each):
//   - step() extends every row by one token and returns log_softmax of the next-token logits, rows
//     independent of each other (a row's result does not depend on the other rows or on R).
//   - use_cache = false recomputes everything from the tokens fed so far at every step (the reference a
//     cache is checked against): the same tokens and the same log-probabilities within float rounding.
//   - select_rows() may shrink, grow or permute; rows.empty() leaves no rows (step() is then not called).
//   - cross_attention(layer, head): layer -1 is the last, head -1 the mean over heads; a model without
//     attention over the source, or a layer / head out of range, is an attnkit::Error.
//   - Runs under autograd::NoGrad; nothing is recorded.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "attnkit/models/inputs.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::models {

class DecoderState {
 public:
  virtual ~DecoderState() = default;
  virtual int64_t rows() const = 0;
  // prev_tokens [R]: the token each row produced last (<bos> at the first step) -> log-probs [R, Vt].
  virtual Tensor step(const std::vector<int64_t>& prev_tokens) = 0;
  // New row r continues old row rows[r] (every index in [0, rows())).
  virtual void select_rows(const std::vector<int64_t>& rows) = 0;
  // [R, S]: the attention weights over the source of the last step() (zeros past a row's source length). A
  // language model's (no source): [R, t], its self-attention over the t tokens so far (prompt and output).
  virtual Tensor cross_attention(int layer, int head) const = 0;
  // Called before the first step() by a search that will ask for cross_attention(): a state that computes the
  // weights only when asked starts keeping them.
  virtual void keep_attention() {}
};

// What a search decodes with (decode/search.hpp): every TranslationModel (models/model.hpp), and an ensemble of
// them (decode/ensemble.hpp).
class Decodable {
 public:
  virtual ~Decodable() = default;
  // False for a language model: it continues its input (the search's sources are prompts) and its attention
  // weights are over its own tokens.
  virtual bool has_source() const { return true; }
  // Encodes the sources and returns the state a search extends one token at a time (above). use_cache = false
  // recomputes the whole prefix at every step (the reference the cache is tested against).
  virtual std::unique_ptr<DecoderState> start_decoding(const SourceBatch& sources, bool use_cache) = 0;
};

// Rows `rows` of `t` along dimension `dim` (the new size of `dim` is rows.size()): the gather every
// select_rows() implementation needs (an encoder output [R, S, E] along 0, a state [L, R, H] along 1).
Tensor gather_rows(const Tensor& t, int dim, const std::vector<int64_t>& rows);

// The checks every DecoderState makes (`who`: "seq2seq decoding"): sources with at least one row and one
// position, ids and lengths for each; one previous token per row, each in [0, vocab).
void check_decoding_sources(const SourceBatch& sources, std::string_view who);
void check_previous_tokens(const std::vector<int64_t>& prev, int64_t rows, int64_t vocab, std::string_view who);

// What every select_rows does to the per-row lists it keeps (source lengths, tokens fed so far): checks each
// row index against `rows` and returns list[rows[0]], list[rows[1]], ...
template <typename T>
std::vector<T> select_list(const std::vector<T>& list, const std::vector<int64_t>& rows, std::string_view who);

}  // namespace attnkit::models
