#include "attnkit/models/size_estimate.hpp"

namespace attnkit::models {

// One direction of one recurrent layer: weight_ih [G H, in], weight_hh [G H, H], bias_ih and bias_hh [G H].
static double recurrent_layer(double gates, double in, double hidden) { return gates * hidden * (in + hidden + 2); }

double parameter_count(const Seq2SeqConfig& c) {
  const double g = ops::gate_count(c.cell);
  const double dirs = c.bidirectional ? 2 : 1, E = double(c.embed), H = double(c.hidden);
  const double Hd = double(c.decoder_hidden()), He = double(c.encoder_output());
  const double Vs = double(c.src_vocab), Vt = double(c.tgt_vocab);
  double n = (Vs + Vt) * E;  // src_embed, tgt_embed
  for (int l = 0; l < c.layers; ++l) {
    n += dirs * recurrent_layer(g, l == 0 ? E : H * dirs, H);
    const double decoder_in = l > 0 ? Hd : c.style == AttentionStyle::Bahdanau ? E + He : E;
    n += recurrent_layer(g, decoder_in, Hd);
  }
  const double A = double(c.attention_size());
  if (c.attention == AttentionKind::General) n += Hd * He;                 // W
  if (c.attention == AttentionKind::Additive) n += Hd * A + He * A + A;    // W_q, W_k, v
  if (c.attention != AttentionKind::None) n += (Hd + He) * Hd + Hd;        // combine
  if (c.bridged()) n += (c.cell == nn::CellKind::Lstm ? 2 : 1) * (He * Hd + Hd);  // bridge_h, bridge_c
  return n + Vt * Hd + Vt;                                                 // output
}

// One Transformer layer of model size E and feed-forward size F: self-attention (in_proj [3E, E] + [3E], out_proj
// [E, E] + [E]), cross-attention for a decoder layer, linear1 [F, E] + [F], linear2 [E, F] + [E], 2 or 3 norms.
static double transformer_layer(double E, double F, bool cross) {
  const double attention = 4 * E * E + 4 * E, feed_forward = 2 * E * F + F + E;
  return cross ? 2 * attention + feed_forward + 6 * E : attention + feed_forward + 4 * E;
}

double parameter_count(const TransformerLMConfig& c) {
  const double E = double(c.d_model), V = double(c.vocab);
  double n = double(c.layers) * transformer_layer(E, double(c.ff), false) + 2 * E;  // + the final norm
  n += V * E;                                                                       // embed
  if (c.positional == nn::PositionalKind::Learned) n += double(c.max_positions) * E;
  return n + (c.tied_output ? 0 : V * E) + V;  // output
}

double parameter_count(const RecurrentLMConfig& c) {
  const double g = ops::gate_count(c.cell), E = double(c.embed), H = double(c.hidden), V = double(c.vocab);
  double n = V * E;  // embed
  for (int l = 0; l < c.layers; ++l) n += recurrent_layer(g, l == 0 ? E : H, H);
  return n + (c.tied_output ? 0 : V * H) + V;  // output
}

double parameter_count(const TransformerConfig& c) {
  const double E = double(c.d_model), F = double(c.ff), Vs = double(c.src_vocab), Vt = double(c.tgt_vocab);
  const double encoder_layer = transformer_layer(E, F, false), decoder_layer = transformer_layer(E, F, true);
  double n = double(c.encoder_layers) * encoder_layer + double(c.decoder_layers) * decoder_layer + 4 * E;  // + final norms
  n += Vs * E + (c.shared_embeddings ? 0 : Vt * E);
  if (c.positional == nn::PositionalKind::Learned) n += double(c.max_positions) * E;
  return n + (c.tied_output ? 0 : Vt * E) + Vt;  // output
}

}  // namespace attnkit::models
