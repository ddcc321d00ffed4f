// A joint-sequence ("graphone") model of source/target pairs: Bisani and Ney's joint-sequence models for
// grapheme-to-phoneme conversion (Speech Communication 50, 2008), the family of Sequitur G2P. A pair (x, y), a
// spelling and its pronunciation, is a sequence of graphones q_1 ... q_K, each a chunk of 1-2 source tokens with
// 0-2 target tokens ("ph" -> "f", "x" -> "k s", "e" -> nothing), and
//   P(x, y) ~ P(q_1 ... q_K) = prod_k P(q_k | q_{k-n+1} ... q_{k-1}) * P(</s> | last n-1)
// an n-gram model over graphones, with the segmentation q the most likely one under the graphones' unigram
// probabilities (the alignment model; Viterbi): one segmentation per pair, not the sum over all of them.
//
// The n-gram probabilities are interpolated absolute discounting (Ney, Essen and Kneser 1994) from the counts,
// D the discount (0 < D < 1), c(h q) the count of graphone q after history h, c(h) = sum_q c(h q), T(h) the
// number of distinct q seen after h, from the unigram (h empty) up to order n:
//   p_0(q) = 1 / V                                       (V: the graphones and the end marker)
//   p_m(q | h_m) = max(c(h_m q) - D, 0) / c(h_m) + D T(h_m) / c(h_m) p_{m-1}(q | h_{m-1})
// an order whose history was never seen passes the lower order's value on. Every distribution sums to 1 over
// the V outcomes (tests/unit/test_graphone.cpp checks it). A pair is padded with n-1 start markers; the end
// marker and the start marker are both graphone 0 (the end is never a history).
//
// The symbols are the model's own vocabularies (models::Vocab, the four special tokens first, unused), so that a
// hypothesis of a seq2seq checkpoint maps onto them by its tokens' text (decode/rescore.hpp, GraphoneScorer).
// Legend: U graphones (the units; graphone 0 is the boundary), n the order.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnkit/io/value.hpp"
#include "attnkit/models/tokenizer.hpp"
#include "attnkit/models/vocab.hpp"

namespace attnkit::models {

struct Graphone {
  std::array<int32_t, 2> src{-1, -1};  // source token ids (the model's source vocabulary); -1: none
  std::array<int32_t, 2> tgt{-1, -1};  // target token ids; -1: none
  int n_src = 0, n_tgt = 0;            // 1-2 and 0-2
  double log_prob = 0;                 // the alignment model's unigram log-probability
};

// The counts of one order's n-grams: the ids of n graphones (the history, then the graphone) and the count.
struct GraphoneCounts {
  std::vector<int32_t> ids;    // [G * n]
  std::vector<int64_t> count;  // [G], each >= 1
};

class GraphoneModel {
 public:
  static constexpr int kMaxOrder = 8;
  static constexpr int64_t kMaxGraphones = 65535;  // graphone ids are stored in 16 bits in the n-gram keys
  static constexpr int64_t kMaxTokens = 256;       // longest source or target a pair may have

  // units[0] is the boundary (no tokens); counts[m - 1] the order-m n-grams (m = 1 .. order). Refuses what
  // from_value refuses (`what` names the origin).
  GraphoneModel(Vocab source, Vocab target, Tokenizer src_tokenizer, Tokenizer tgt_tokenizer,
                std::vector<Graphone> units, int order, double discount, const std::vector<GraphoneCounts>& counts,
                const std::string& what = "graphone model");

  const Vocab& source() const { return source_; }
  const Vocab& target() const { return target_; }
  Tokenizer src_tokenizer() const { return src_tokenizer_; }
  Tokenizer tgt_tokenizer() const { return tgt_tokenizer_; }
  int order() const { return order_; }
  double discount() const { return discount_; }
  const std::vector<Graphone>& units() const { return units_; }
  const std::vector<GraphoneCounts>& counts() const { return counts_; }

  // The most likely segmentation of (src, tgt) into the model's graphones under their unigram probabilities
  // (graphone ids, no boundary); empty when there is none (a token the model lacks, a pairing it never saw, a
  // target longer than twice the source). Ids are the model's vocabularies'.
  std::vector<int32_t> align(const std::vector<int32_t>& src, const std::vector<int32_t>& tgt) const;
  // p(q | history), history the last order-1 graphones before q (fewer: padded with the start marker).
  double prob(const std::vector<int32_t>& history, int32_t q) const;
  // log P(q_1 ... q_K </s>) under the n-gram model.
  double sequence_log_prob(const std::vector<int32_t>& graphones) const;
  // log P(x, y): the n-gram log-probability of align(src, tgt); -inf when there is no segmentation.
  double log_prob(const std::vector<int32_t>& src, const std::vector<int32_t>& tgt) const;
  // The same from tokens (a token outside the vocabularies: -inf).
  double log_prob(const std::vector<std::string>& src, const std::vector<std::string>& tgt) const;

  // {"format": "attnkit-graphone", "version", "config": {order, discount, tokenizers}, "vocab": {source, target},
  //  "graphones": [U - 1, 5] (src0, src1, tgt0, tgt1 with -1 for none, log-probability) of graphones 1 .. U-1,
  //  "counts": {"1": [G, 2] ..., "n": [G, n + 1]} (ids, then the count)}: tensors, so that .safetensors holds it.
  io::Value to_value() const;
  // Refuses anything else, naming `what` and the field: another format, an order outside 1-8, a discount outside
  // (0, 1), a token id outside its vocabulary, a graphone of no source token, an id or count that is not an
  // integer in range, a count below 1, a repeated n-gram.
  static GraphoneModel from_value(const io::Value& value, const std::string& what);

 private:
  struct Context {
    int64_t total = 0, types = 0;
  };
  static std::string key(const int32_t* ids, int n);
  Vocab source_, target_;
  Tokenizer src_tokenizer_, tgt_tokenizer_;
  std::vector<Graphone> units_;
  int order_ = 1;
  double discount_ = 0.75;
  std::vector<GraphoneCounts> counts_;
  std::vector<std::unordered_map<std::string, int64_t>> ngram_;    // [order]: c(h q) by the key of h q
  std::vector<std::unordered_map<std::string, Context>> context_;  // [order]: c(h), T(h) by the key of h
  std::unordered_map<uint64_t, int32_t> unit_of_;                  // the chunk pair's key -> graphone id
  int64_t outcomes_ = 1;                                           // V
};

// The chunk pair's key of unit_of_ (ids + 1 in 16 bits each; 0: none).
uint64_t graphone_key(const std::array<int32_t, 2>& src, const std::array<int32_t, 2>& tgt);
// The key of the chunk src[i .. i+dx) with tgt[j .. j+dy) (dx 1-2, dy 0-2): a cell's step in the segmentation
// lattice, the model's Viterbi and the training's forward-backward alike.
uint64_t chunk_key(const std::vector<int32_t>& src, size_t i, size_t dx, const std::vector<int32_t>& tgt, size_t j,
                   size_t dy);

// The file at `path` (.json, .safetensors or .npz); write: atomically, in the format the extension names.
GraphoneModel read_graphone_model(const std::string& path);
void save_graphone_model(const GraphoneModel& model, const std::string& path);

}  // namespace attnkit::models
