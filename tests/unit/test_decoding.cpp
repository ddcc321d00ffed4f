// models/decoding.hpp: gather_rows, and the incremental-decoding contract (decoding_contract.hpp) for the
// recurrent Seq2Seq in every cell / attention combination.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "attnkit/models/decoding.hpp"
#include "attnkit/models/seq2seq.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "decoding_contract.hpp"

using namespace attnkit;
using models::AttentionKind;

TEST_CASE("decoding: gather_rows along a middle dimension, with repeats") {
  Tensor t({2, 3, 2}, {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  const Tensor g = models::gather_rows(t, 1, {2, 2, 0});  // [2, 3, 2]
  CHECK(g.shape() == Shape{2, 3, 2});
  CHECK(g.values() == std::vector<float>{4, 5, 4, 5, 0, 1, 14, 15, 14, 15, 10, 11});
  CHECK(models::gather_rows(t, 0, {}).shape() == Shape{0, 3, 2});
  CHECK_THROWS_AS(models::gather_rows(t, 1, {3}), Error);
}

TEST_CASE("decoding: the recurrent Seq2Seq keeps the decoding contract") {
  struct Case {
    nn::CellKind cell;
    AttentionKind att;
    int layers;
    bool bidir;
  };
  const std::vector<std::vector<int64_t>> src = {{4, 5, 6, 7}, {8, 4}, {9, 9, 5}};
  for (Case k : {Case{nn::CellKind::Lstm, AttentionKind::Additive, 1, false},
                 Case{nn::CellKind::Lstm, AttentionKind::None, 2, false},
                 Case{nn::CellKind::Gru, AttentionKind::General, 2, true},
                 Case{nn::CellKind::RnnTanh, AttentionKind::Dot, 1, true}}) {
    CAPTURE(ops::cell_name(k.cell));
    CAPTURE(std::string(models::attention_kind_name(k.att)));
    models::Seq2SeqConfig c;
    c.cell = k.cell;
    c.attention = k.att;
    c.src_vocab = 10;
    c.tgt_vocab = 9;
    c.embed = 4;
    c.hidden = 6;
    c.layers = k.layers;
    c.bidirectional = k.bidir;
    Rng rng(11);
    models::Seq2Seq m(c, rng);
    CHECK(test::check_decoding_contract(m, src, k.att != AttentionKind::None) == "");
    auto state = m.start_decoding(test::sources_batch(src), true);
    state->step({1, 1, 1});
    if (k.att == AttentionKind::None) {
      CHECK_THROWS_AS(state->cross_attention(-1, -1), Error);
    } else {
      CHECK_THROWS_AS(state->cross_attention(1, -1), Error);
      CHECK_THROWS_AS(state->cross_attention(-1, 2), Error);
    }
    CHECK_THROWS_AS(state->step({1, 1}), Error);      // one token per row
    CHECK_THROWS_AS(state->step({1, 1, 9}), Error);   // outside the vocabulary
    CHECK_THROWS_AS(state->select_rows({3}), Error);  // no row 3
  }
}
