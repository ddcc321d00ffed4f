#include "attnkit/models/size_estimate.hpp"

namespace attnkit::models {

// One direction of one recurrent layer: weight_ih [G H, in], weight_hh [G H, H], bias_ih and bias_hh [G H].
static double recurrent_layer(double gates, double in, double hidden) { return gates * hidden * (in + hidden + 2); }

double parameter_count(const Seq2SeqConfig& c) {
  const double g = ops::gate_count(c.cell);
  const double dirs = c.bidirectional ? 2 : 1, E = double(c.embed), H = double(c.hidden);
  const double Hd = double(c.decoder_hidden()), Vs = double(c.src_vocab), Vt = double(c.tgt_vocab);
  double n = (Vs + Vt) * E;  // src_embed, tgt_embed
  for (int l = 0; l < c.layers; ++l) {
    n += dirs * recurrent_layer(g, l == 0 ? E : H * dirs, H);
    const double decoder_in = l > 0 ? Hd : c.style == AttentionStyle::Bahdanau ? E + Hd : E;
    n += recurrent_layer(g, decoder_in, Hd);
  }
  if (c.attention == AttentionKind::General) n += Hd * Hd;                 // W
  if (c.attention == AttentionKind::Additive) n += 2 * Hd * Hd + Hd;       // W_q, W_k, v
  if (c.attention != AttentionKind::None) n += 2 * Hd * Hd + Hd;           // combine
  return n + Vt * Hd + Vt;                                                 // output
}

double parameter_count(const TransformerConfig& c) {
  const double E = double(c.d_model), F = double(c.ff), Vs = double(c.src_vocab), Vt = double(c.tgt_vocab);
  const double attention = 4 * E * E + 4 * E;           // in_proj [3E, E] + [3E], out_proj [E, E] + [E]
  const double feed_forward = 2 * E * F + F + E;        // linear1 [F, E] + [F], linear2 [E, F] + [E]
  const double encoder_layer = attention + feed_forward + 4 * E;      // norm1, norm2
  const double decoder_layer = 2 * attention + feed_forward + 6 * E;  // norm1..3
  double n = double(c.encoder_layers) * encoder_layer + double(c.decoder_layers) * decoder_layer + 4 * E;  // + final norms
  n += Vs * E + (c.shared_embeddings ? 0 : Vt * E);
  if (c.positional == nn::PositionalKind::Learned) n += double(c.max_positions) * E;
  return n + (c.tied_output ? 0 : Vt * E) + Vt;  // output
}

}  // namespace attnkit::models
