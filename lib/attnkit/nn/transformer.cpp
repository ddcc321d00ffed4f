#include "attnkit/nn/transformer.hpp"

#include <cmath>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/nn/init.hpp"
#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::nn {

using autograd::Var;

namespace {

constexpr EnumName<FfnActivation> kFfnActivationNames[] = {{FfnActivation::Relu, "relu"}, {FfnActivation::Gelu, "gelu"}};

}  // namespace

FfnActivation parse_ffn_activation(std::string_view name) {
  if (const std::optional<FfnActivation> a = parse_name(kFfnActivationNames, name)) return *a;
  fail("unknown activation \"{}\" (expected {})", name, names_or(kFfnActivationNames));
}

std::string_view ffn_activation_name(FfnActivation a) { return name_of(kFfnActivationNames, a); }

void TransformerLayerOptions::validate(std::string_view what) const {
  AK_CHECK(d_model >= 1 && heads >= 1 && dim_feedforward >= 1, "{}: d_model {}, heads {} and dim_feedforward {} must be >= 1",
           what, d_model, heads, dim_feedforward);
  AK_CHECK(d_model % heads == 0, "{}: {} heads do not divide d_model {}", what, heads, d_model);
  AK_CHECK(dropout >= 0.0f && dropout < 1.0f, "{}: dropout {} is not in [0, 1)", what, dropout);
  AK_CHECK(layer_norm_eps > 0.0f, "{}: layer norm eps {} must be > 0", what, layer_norm_eps);
}

namespace {

// x + y; under inference into y's own buffer (an op's fresh output, moved here), not a fresh [N, T, E]
// (autograd::add_in_place).
Var residual(const Var& x, Var y) { return autograd::add_in_place(x, std::move(y)); }

// x itself when inactive (moved through, so that an op's output stays the only Var of it: residual)
Var dropout(Var x, float p, const DropoutContext& d) {
  if (!d.active(p)) return x;
  ops::DropoutOptions o;
  o.p = p;
  o.training = true;
  return autograd::dropout(x, o, *d.rng);
}

Var attend(MultiheadAttention& m, const Var& q, const Var& kv, const ops::MaskSpec& mask) {
  ops::MhaOptions o;
  o.mask = mask;
  return m.forward(q, kv, kv, o);
}

// base + ff(x), the feed-forward block inside its residual connection. Without dropout the ReLU and the
// residual ride on the products' stores (autograd::feed_forward: fused under inference, the hidden [rows, F]
// never whole; op by op when recorded).
Var ff_residual(Linear& linear1, Linear& linear2, const TransformerLayerOptions& o, const Var& base, const Var& x,
                const DropoutContext& d) {
  const bool relu = o.activation == FfnActivation::Relu;
  if (relu && !d.active(o.dropout)) return feed_forward(linear1, linear2, x, base);  // base + relu(x W1^T + b1) W2^T + b2
  Var h = linear1.forward(x, {relu, nullptr});  // [N, T, F] = act(x W1^T + b1)
  if (!relu) h = autograd::gelu(h);
  h = dropout(h, o.dropout, d);
  if (d.active(o.dropout)) return residual(base, dropout(linear2.forward(h), o.dropout, d));
  return linear2.forward(h, {false, &base});  // [N, T, E] = base + h W2^T + b2
}

TransformerLayerOptions checked(const TransformerLayerOptions& o, std::string_view what) {
  o.validate(what);
  return o;
}

void add_all(std::vector<Parameter*>& out, Module& m) {
  for (Parameter* p : m.named_parameters()) out.push_back(p);
}

}  // namespace

MultiheadAttention make_attention(int64_t E, int64_t heads, Rng& rng, const std::string& prefix) {
  return MultiheadAttention(E, heads, rng, prefix);
}

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& o, const std::string& prefix)
    : options(checked(o, "transformer encoder layer")),
      self_attn(o.d_model, o.heads, prefix + "self_attn."),
      linear1(o.d_model, o.dim_feedforward, true, prefix + "linear1"),
      linear2(o.dim_feedforward, o.d_model, true, prefix + "linear2"),
      norm1(o.d_model, o.layer_norm_eps, true, prefix + "norm1"),
      norm2(o.d_model, o.layer_norm_eps, true, prefix + "norm2") {}

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& o, Rng& rng, const std::string& prefix)
    : TransformerEncoderLayer(o, prefix) {
  reset_parameters(rng);
}

// The draws in the order of nn.Transformer's construction: the modules' own inits, then xavier over the matrices.
void TransformerEncoderLayer::reset_parameters(Rng& rng) {
  self_attn.reset_parameters(rng);
  linear1.reset_parameters(rng);
  linear2.reset_parameters(rng);
  xavier_uniform(self_attn.out_proj_weight, rng);
  xavier_uniform(linear1.weight, rng);
  xavier_uniform(linear2.weight, rng);
}

std::vector<Parameter*> TransformerEncoderLayer::named_parameters() {
  std::vector<Parameter*> out;
  for (Module* m : std::initializer_list<Module*>{&self_attn, &linear1, &linear2, &norm1, &norm2}) add_all(out, *m);
  return out;
}

void TransformerEncoderLayer::set_precision(PrecisionPlan& plan) {
  self_attn.set_precision(plan);
  linear1.set_precision(plan);
  linear2.set_precision(plan);
}

Var TransformerEncoderLayer::forward(const Var& x, const ops::MaskSpec& mask, const DropoutContext& d) {
  AK_CHECK(x.shape().size() == 3 && x.shape()[2] == options.d_model,
           "transformer encoder layer: input {} must be [N, S, {}]", shape_str(x.shape()), options.d_model);
  if (options.norm_first) {
    Var h = norm1.forward(x);
    Var y = residual(x, dropout(attend(self_attn, h, h, mask), options.dropout, d));  // x + sa(norm1(x))
    return ff_residual(linear1, linear2, options, y, norm2.forward(y), d);              // y + ff(norm2(y))
  }
  Var y = norm1.forward(residual(x, dropout(attend(self_attn, x, x, mask), options.dropout, d)));  // norm1(x + sa(x))
  return norm2.forward(ff_residual(linear1, linear2, options, y, y, d));                            // norm2(y + ff(y))
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& o, const std::string& prefix)
    : options(checked(o, "transformer decoder layer")),
      self_attn(o.d_model, o.heads, prefix + "self_attn."),
      multihead_attn(o.d_model, o.heads, prefix + "multihead_attn."),
      linear1(o.d_model, o.dim_feedforward, true, prefix + "linear1"),
      linear2(o.dim_feedforward, o.d_model, true, prefix + "linear2"),
      norm1(o.d_model, o.layer_norm_eps, true, prefix + "norm1"),
      norm2(o.d_model, o.layer_norm_eps, true, prefix + "norm2"),
      norm3(o.d_model, o.layer_norm_eps, true, prefix + "norm3") {}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& o, Rng& rng, const std::string& prefix)
    : TransformerDecoderLayer(o, prefix) {
  reset_parameters(rng);
}

void TransformerDecoderLayer::reset_parameters(Rng& rng) {
  self_attn.reset_parameters(rng);
  multihead_attn.reset_parameters(rng);
  linear1.reset_parameters(rng);
  linear2.reset_parameters(rng);
  xavier_uniform(self_attn.out_proj_weight, rng);
  xavier_uniform(multihead_attn.out_proj_weight, rng);
  xavier_uniform(linear1.weight, rng);
  xavier_uniform(linear2.weight, rng);
}

std::vector<Parameter*> TransformerDecoderLayer::named_parameters() {
  std::vector<Parameter*> out;
  for (Module* m :
       std::initializer_list<Module*>{&self_attn, &multihead_attn, &linear1, &linear2, &norm1, &norm2, &norm3})
    add_all(out, *m);
  return out;
}

void TransformerDecoderLayer::set_precision(PrecisionPlan& plan) {
  self_attn.set_precision(plan);
  multihead_attn.set_precision(plan);
  linear1.set_precision(plan);
  linear2.set_precision(plan);
}

Var TransformerDecoderLayer::feed_forward(const Var& x, const DropoutContext& d) {
  if (options.norm_first) return ff_residual(linear1, linear2, options, x, norm3.forward(x), d);  // x + ff(norm3(x))
  return norm3.forward(ff_residual(linear1, linear2, options, x, x, d));                          // norm3(x + ff(x))
}

Var TransformerDecoderLayer::forward(const Var& x, const Var& memory, const ops::MaskSpec& self_mask,
                                     const ops::MaskSpec& memory_mask, const DropoutContext& d) {
  AK_CHECK(x.shape().size() == 3 && x.shape()[2] == options.d_model,
           "transformer decoder layer: input {} must be [N, T, {}]", shape_str(x.shape()), options.d_model);
  AK_CHECK(memory.shape().size() == 3 && memory.shape()[2] == options.d_model && memory.shape()[0] == x.shape()[0],
           "transformer decoder layer: memory {} must be [{}, S, {}]", shape_str(memory.shape()), x.shape()[0],
           options.d_model);
  const float p = options.dropout;
  if (options.norm_first) {
    Var h = norm1.forward(x);
    Var y = residual(x, dropout(attend(self_attn, h, h, self_mask), p, d));                        // x + sa(norm1(x))
    y = residual(y, dropout(attend(multihead_attn, norm2.forward(y), memory, memory_mask), p, d));  // + mha(norm2(y), m)
    return feed_forward(y, d);                                                                          // + ff(norm3(y))
  }
  Var y = norm1.forward(residual(x, dropout(attend(self_attn, x, x, self_mask), p, d)));              // norm1(x + sa(x))
  y = norm2.forward(residual(y, dropout(attend(multihead_attn, y, memory, memory_mask), p, d)));     // norm2(y + mha(y, m))
  return feed_forward(y, d);                                                                             // norm3(y + ff(y))
}

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& o, int64_t num_layers, const std::string& prefix)
    : norm(o.d_model, o.layer_norm_eps, true, prefix + "norm") {
  AK_CHECK(num_layers >= 1, "transformer encoder: {} layers (need >= 1)", num_layers);
  for (int64_t i = 0; i < num_layers; ++i)
    layers.push_back(std::make_unique<TransformerEncoderLayer>(o, prefix + "layers." + std::to_string(i) + "."));
}

TransformerEncoder::TransformerEncoder(const TransformerLayerOptions& o, int64_t num_layers, Rng& rng,
                                       const std::string& prefix)
    : norm(o.d_model, o.layer_norm_eps, true, prefix + "norm") {
  AK_CHECK(num_layers >= 1, "transformer encoder: {} layers (need >= 1)", num_layers);
  for (int64_t i = 0; i < num_layers; ++i)
    layers.push_back(std::make_unique<TransformerEncoderLayer>(o, rng, prefix + "layers." + std::to_string(i) + "."));
}

std::vector<Parameter*> TransformerEncoder::named_parameters() {
  std::vector<Parameter*> out;
  for (auto& l : layers) add_all(out, *l);
  add_all(out, norm);
  return out;
}

void TransformerEncoder::set_precision(PrecisionPlan& plan) {
  for (auto& l : layers) l->set_precision(plan);
}

Var TransformerEncoder::forward(const Var& x, const ops::MaskSpec& mask, const DropoutContext& d) {
  Var y = x;
  for (auto& l : layers) y = l->forward(y, mask, d);  // [N, S, E]
  return norm.forward(y);
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& o, int64_t num_layers, const std::string& prefix)
    : norm(o.d_model, o.layer_norm_eps, true, prefix + "norm") {
  AK_CHECK(num_layers >= 1, "transformer decoder: {} layers (need >= 1)", num_layers);
  for (int64_t i = 0; i < num_layers; ++i)
    layers.push_back(std::make_unique<TransformerDecoderLayer>(o, prefix + "layers." + std::to_string(i) + "."));
}

TransformerDecoder::TransformerDecoder(const TransformerLayerOptions& o, int64_t num_layers, Rng& rng,
                                       const std::string& prefix)
    : norm(o.d_model, o.layer_norm_eps, true, prefix + "norm") {
  AK_CHECK(num_layers >= 1, "transformer decoder: {} layers (need >= 1)", num_layers);
  for (int64_t i = 0; i < num_layers; ++i)
    layers.push_back(std::make_unique<TransformerDecoderLayer>(o, rng, prefix + "layers." + std::to_string(i) + "."));
}

std::vector<Parameter*> TransformerDecoder::named_parameters() {
  std::vector<Parameter*> out;
  for (auto& l : layers) add_all(out, *l);
  add_all(out, norm);
  return out;
}

void TransformerDecoder::set_precision(PrecisionPlan& plan) {
  for (auto& l : layers) l->set_precision(plan);
}

Var TransformerDecoder::forward(const Var& x, const Var& memory, const ops::MaskSpec& self_mask,
                                const ops::MaskSpec& memory_mask, const DropoutContext& d) {
  Var y = x;
  for (auto& l : layers) y = l->forward(y, memory, self_mask, memory_mask, d);  // [N, T, E]
  return norm.forward(y);
}

}  // namespace attnkit::nn
