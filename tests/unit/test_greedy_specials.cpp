// The models' own greedy decoding (what training's exact match and accuracy use) never outputs <pad>, <bos> or
// <unk>, as decode's searches never do: with the output biased far toward them, the recurrent model and the
// Transformer still answer with ordinary tokens (or <eos>), the first best of those.
#include <doctest/doctest.h>

#include <string>

#include "attnkit/models/seq2seq.hpp"
#include "attnkit/models/tokens.hpp"
#include "attnkit/models/transformer.hpp"
#include "decoding_contract.hpp"

using namespace attnkit;

namespace {

// Adds `by` to the output bias of the special ids <pad>, <bos>, <unk>, and takes it from <eos> (so that every
// row runs to max_len: an empty answer would show nothing).
void favour_specials(models::TranslationModel& m, float by) {
  for (Parameter* p : m.named_parameters())
    if (p->name == "output.bias") {
      for (int64_t id : {models::kPad, models::kBos, models::kUnk}) p->value[id] += by;
      p->value[models::kEos] -= by;
    }
}

std::string specials_in(const std::vector<std::vector<int64_t>>& out) {
  std::string found;
  for (const auto& row : out)
    for (int64_t id : row)
      if (id == models::kPad || id == models::kBos || id == models::kUnk) found += std::to_string(id) + " ";
  return found;
}

}  // namespace

TEST_CASE("best_output_token skips <pad>, <bos> and <unk>; ties go to the first") {
  const float row[] = {9, 8, 1, 7, 5, 5};
  CHECK(models::best_output_token(row, 6) == 4);
  const float eos[] = {9, 8, 6, 7, 5, 5};
  CHECK(models::best_output_token(eos, 6) == 2);
  CHECK(models::best_output_token(row, 6, 5, 1) == 0);  // another model's <pad> id
}

TEST_CASE("greedy decoding never outputs <pad>, <bos> or <unk>") {
  const std::vector<std::vector<int64_t>> src = {{4, 5, 6}, {7, 4}, {5}};
  {
    models::Seq2SeqConfig c;
    c.attention = models::AttentionKind::Dot;
    c.src_vocab = 10, c.tgt_vocab = 9, c.embed = 4, c.hidden = 6;
    Rng rng(3);
    models::Seq2Seq m(c, rng);
    favour_specials(m, 100.0f);
    const auto out = m.greedy(test::sources_batch(src), 5);
    CHECK(specials_in(out) == "");
    CHECK(out[0].size() == 5);  // ordinary tokens until max_len
  }
  {
    models::TransformerConfig c;
    c.src_vocab = 10, c.tgt_vocab = 9, c.encoder_layers = c.decoder_layers = 1, c.heads = 2, c.d_model = 8, c.ff = 16;
    Rng rng(4);
    models::Transformer m(c, rng);
    favour_specials(m, 100.0f);
    const auto out = m.greedy(test::sources_batch(src), 5);
    CHECK(specials_in(out) == "");
    CHECK(out[0].size() == 5);
  }
}
