// models::parameter_count: the count from a config equals the built model's, for every recurrent cell,
// attention kind and style, and for the Transformer's options (shared and tied embeddings, learned positions).
#include <doctest/doctest.h>

#include "attnkit/models/size_estimate.hpp"

using namespace attnkit;

namespace {
double built_count(models::TranslationModel& m) {
  double n = 0;
  for (const Parameter* p : m.named_parameters()) n += double(p->value.numel());
  return n;
}
}  // namespace

TEST_CASE("parameter_count of a recurrent seq2seq equals the built model's") {
  for (nn::CellKind cell : {nn::CellKind::Lstm, nn::CellKind::Gru, nn::CellKind::RnnTanh})
    for (models::AttentionKind kind : {models::AttentionKind::None, models::AttentionKind::Dot,
                                       models::AttentionKind::General, models::AttentionKind::Additive})
      for (int layers : {1, 2})
        for (bool bidirectional : {false, true})
          for (models::AttentionStyle style : {models::AttentionStyle::Luong, models::AttentionStyle::Bahdanau}) {
            if (style == models::AttentionStyle::Bahdanau && kind == models::AttentionKind::None) continue;
            models::Seq2SeqConfig c;
            c.cell = cell, c.attention = kind, c.style = style, c.layers = layers, c.bidirectional = bidirectional;
            c.src_vocab = 11, c.tgt_vocab = 9, c.embed = 5, c.hidden = 6;
            Rng rng(1);
            models::Seq2Seq m(c, rng);
            CAPTURE(models::cell_kind_name(cell));
            CAPTURE(models::attention_kind_name(kind));
            CAPTURE(layers);
            CAPTURE(bidirectional);
            CAPTURE(models::attention_style_name(style));
            CHECK(models::parameter_count(c) == built_count(m));
            if (kind == models::AttentionKind::Additive) {  // a projection of its own size
              c.attention_dim = 4;
              Rng rng2(1);
              models::Seq2Seq m2(c, rng2);
              CHECK(models::parameter_count(c) == built_count(m2));
            }
            if (kind != models::AttentionKind::Dot) {  // a decoder of its own size, bridged
              c.decoder_size = 7;
              Rng rng3(1);
              models::Seq2Seq m3(c, rng3);
              CHECK(models::parameter_count(c) == built_count(m3));
            }
          }
}

TEST_CASE("parameter_count of a Transformer equals the built model's") {
  for (bool shared : {false, true})
    for (bool tied : {false, true})
      for (nn::PositionalKind pos : {nn::PositionalKind::Sinusoidal, nn::PositionalKind::Learned}) {
        models::TransformerConfig c;
        c.src_vocab = c.tgt_vocab = 13, c.encoder_layers = 2, c.decoder_layers = 1, c.heads = 2, c.d_model = 8,
        c.ff = 12, c.max_positions = 20, c.shared_embeddings = shared, c.tied_output = tied, c.positional = pos;
        Rng rng(2);
        models::Transformer m(c, rng);
        CAPTURE(shared);
        CAPTURE(tied);
        CHECK(models::parameter_count(c) == built_count(m));
      }
}

TEST_CASE("parameter_count of the language models equals the built model's") {
  for (bool tied : {false, true})
    for (nn::PositionalKind pos : {nn::PositionalKind::Sinusoidal, nn::PositionalKind::Learned}) {
      models::TransformerLMConfig c;
      c.vocab = 17, c.layers = 2, c.heads = 2, c.d_model = 8, c.ff = 12, c.max_positions = 20, c.tied_output = tied,
      c.positional = pos;
      Rng rng(5);
      models::TransformerLM m(c, rng);
      CAPTURE(tied);
      CHECK(models::parameter_count(c) == built_count(m));
    }
  for (nn::CellKind cell : {nn::CellKind::Lstm, nn::CellKind::Gru, nn::CellKind::RnnTanh})
    for (int layers : {1, 3}) {
      models::RecurrentLMConfig c;
      c.cell = cell, c.vocab = 13, c.embed = 6, c.hidden = 6, c.layers = layers, c.tied_output = layers == 3;
      Rng rng(6);
      models::RecurrentLM m(c, rng);
      CAPTURE(layers);
      CHECK(models::parameter_count(c) == built_count(m));
    }
}
