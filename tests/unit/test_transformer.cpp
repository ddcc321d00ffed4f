// Transformer layers and positional encoding: PyTorch golden values (tests/fixtures/gen_transformer.py:
// nn.TransformerEncoderLayer / DecoderLayer / nn.Transformer with the same weights, post-LN and pre-LN, ReLU and
// GELU, causal masks and key padding), forward and the gradients of sum(dy * output) for the inputs and every
// parameter; the sinusoidal table against the Annotated Transformer's formula.
// Legend: N batch, T target length, S source length, E d_model, NH heads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/nn/positional.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/nn/transformer.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/random.hpp"
#include "test_util.hpp"

using namespace attnkit;
using autograd::Var;

namespace {

const io::Value& fixtures() {
  static const io::Value all = io::parse_json(test::fixture_text("transformer/layers.json"), "layers.json");
  return all;
}

Tensor get(const io::Value& c, const std::string& name) {
  const Tensor* t = io::find_tensor(c, name, "fixture");
  REQUIRE_MESSAGE(t != nullptr, "fixture member " << name);
  return *t;
}

bool flag(const io::Value& c, const char* name) {
  const io::Value* v = c.find(name);
  REQUIRE(v != nullptr);
  return v->json() == "true";
}

std::string text(const io::Value& c, const char* name) {
  const io::Value* v = c.find(name);
  REQUIRE(v != nullptr);
  std::string s = v->json();
  return s.size() >= 2 ? s.substr(1, s.size() - 2) : s;
}

void close(const Tensor& got, const Tensor& want, const std::string& what) {
  const Comparison cmp = compare(got, want, Tolerance{1e-4, 2e-5});
  CHECK_MESSAGE(cmp.close, what << ": max abs error " << cmp.max_abs_error << " at " << shape_str(cmp.max_abs_at));
}

nn::TransformerLayerOptions options_of(const io::Value& c) {
  nn::TransformerLayerOptions o;
  o.d_model = 8;
  o.heads = static_cast<int64_t>(get(c, "heads")[0]);
  o.dim_feedforward = 16;
  o.dropout = 0.0f;
  o.norm_first = flag(c, "norm_first");
  o.activation = nn::parse_ffn_activation(text(c, "activation"));
  return o;
}

ops::MaskSpec key_padding(const io::Value& c, int64_t N, int64_t S) {
  ops::MaskSpec m;
  if (c.find("key_lengths")) m.key_lengths = io::lengths_from(get(c, "key_lengths"), N, S, "key_lengths");
  return m;
}

}  // namespace

TEST_CASE("transformer layers: PyTorch golden forward and gradients (post-LN, pre-LN, masks, key padding)") {
  const io::Value& all = fixtures();
  int layers_checked = 0;
  for (const std::string& name : all.names()) {
    CAPTURE(name);
    const io::Value& c = *all.find(name);
    const std::string kind = text(c, "kind");
    if (kind == "positional") continue;
    const nn::TransformerLayerOptions o = options_of(c);
    Rng rng(1);
    const Tensor dy = get(c, "dy");
    const io::Value& grad = *c.find("grad");
    std::vector<Parameter*> params;
    Var out, x(get(c, "x"), true), other;
    std::unique_ptr<nn::Module> keep;
    if (kind == "encoder_layer") {
      auto layer = std::make_unique<nn::TransformerEncoderLayer>(o, rng);
      nn::load_parameters(*layer, *c.find("state"), "encoder layer");
      ops::MaskSpec mask = key_padding(c, x.shape()[0], x.shape()[1]);
      if (flag(c, "causal")) mask.causal = ops::CausalKind::UpperLeft;
      out = layer->forward(x, mask);
      keep = std::move(layer);
    } else if (kind == "decoder_layer") {
      auto layer = std::make_unique<nn::TransformerDecoderLayer>(o, rng);
      nn::load_parameters(*layer, *c.find("state"), "decoder layer");
      other = Var(get(c, "memory"), true);
      ops::MaskSpec self_mask;
      self_mask.causal = ops::CausalKind::UpperLeft;
      out = layer->forward(x, other, self_mask, key_padding(c, x.shape()[0], other.shape()[1]));
      keep = std::move(layer);
    } else {
      REQUIRE(kind == "transformer");
      const int64_t L = static_cast<int64_t>(get(c, "layers")[0]);
      struct Both : nn::Module {
        nn::TransformerEncoder enc;
        nn::TransformerDecoder dec;
        Both(const nn::TransformerLayerOptions& o, int64_t L, Rng& rng) : enc(o, L, rng), dec(o, L, rng) {}
        std::vector<Parameter*> named_parameters() override {
          auto p = enc.named_parameters();
          for (Parameter* q : dec.named_parameters()) p.push_back(q);
          return p;
        }
      };
      auto both = std::make_unique<Both>(o, L, rng);
      // every name is nn.Transformer's state_dict name, and every one of them is here
      CHECK(both->named_parameters().size() == c.find("state")->names().size());
      nn::load_parameters(*both, *c.find("state"), "transformer");
      other = Var(get(c, "src"), true);
      const ops::MaskSpec pad = key_padding(c, other.shape()[0], other.shape()[1]);
      Var memory = both->enc.forward(other, pad);
      ops::MaskSpec self_mask;
      self_mask.causal = ops::CausalKind::UpperLeft;
      out = both->dec.forward(x, memory, self_mask, pad);
      keep = std::move(both);
    }
    close(out.value(), get(c, "output"), "output");
    autograd::backward(out, &dy);
    close(x.grad(), get(grad, "x"), "d x");
    if (other.defined()) close(other.grad(), get(grad, kind == "transformer" ? "src" : "memory"), "d memory/src");
    int n = 0;
    for (Parameter* p : keep->named_parameters()) {
      close(p->grad, get(grad, p->name), "d " + p->name);
      ++n;
    }
    CHECK(n == static_cast<int>(c.find("state")->names().size()));
    ++layers_checked;
  }
  CHECK(layers_checked == 7);
}

TEST_CASE("positional encoding: the sinusoidal table, learned rows, offsets and the gradient to a learned table") {
  const io::Value& c = *fixtures().find("positional");
  close(nn::sinusoidal_table(6, 8), get(c, "pe_6_8"), "PE [6, 8]");
  close(nn::sinusoidal_table(4, 5), get(c, "pe_4_5"), "PE [4, 5] (odd E)");
  // PE(pos, 2i) = sin(pos / 10000^(2i/E)) at one element, by hand
  CHECK(nn::sinusoidal_table(6, 8)[3 * 8 + 2] == doctest::Approx(std::sin(3.0 / std::pow(10000.0, 2.0 / 8))));

  Rng rng(3);
  nn::PositionalEncoding sin_pe(nn::PositionalKind::Sinusoidal, 8, 0, rng);
  CHECK(sin_pe.named_parameters().empty());
  Var x(Tensor({2, 3, 8}), true);
  Var y = sin_pe.forward(x, 2);  // rows 2 .. 4
  const Tensor want = nn::sinusoidal_table(3, 8, 2);
  for (int64_t i = 0; i < 24; ++i) CHECK(y.value()[24 + i] == want[i]);  // batch row 1 = PE rows 2 .. 4
  CHECK(nn::sinusoidal_table(3, 8, 2)[0] == nn::sinusoidal_table(5, 8)[16]);
  // past a first call's cache
  Var far = sin_pe.forward(Var(Tensor({1, 2, 8})), 500);
  close(far.value().reshaped({2, 8}), nn::sinusoidal_table(2, 8, 500), "offset 500");

  nn::PositionalEncoding learned(nn::PositionalKind::Learned, 8, 4, rng, "pos");
  REQUIRE(learned.named_parameters().size() == 1);
  CHECK(learned.weight.name == "pos.weight");
  Var z = learned.forward(x, 1);  // rows 1 .. 3
  for (int64_t i = 0; i < 24; ++i) CHECK(z.value()[i] == learned.weight.value[8 + i]);
  autograd::backward(autograd::sum(z));
  for (int64_t i = 0; i < 8; ++i) CHECK(learned.weight.grad[i] == 0.0f);      // row 0 unused
  for (int64_t i = 8; i < 32; ++i) CHECK(learned.weight.grad[i] == 2.0f);     // rows 1..3, batch 2
  for (int64_t i = 0; i < x.grad().numel(); ++i) CHECK(x.grad()[i] == 1.0f);
  CHECK_THROWS_WITH_AS(learned.forward(x, 2), doctest::Contains("positions 2 .. 4 past the learned table's 4"), Error);
  CHECK_THROWS_WITH_AS(nn::parse_positional_kind("rope"), doctest::Contains("sinusoidal or learned"), Error);
}

TEST_CASE("transformer layers: options are checked, names follow nn.Transformer, dropout draws only in training") {
  Rng rng(5);
  nn::TransformerLayerOptions o;
  o.d_model = 8;
  o.heads = 3;
  o.dim_feedforward = 16;
  CHECK_THROWS_WITH_AS(nn::TransformerEncoderLayer(o, rng), doctest::Contains("3 heads do not divide d_model 8"), Error);
  o.heads = 2;
  o.dropout = 1.0f;
  CHECK_THROWS_WITH_AS(nn::TransformerEncoderLayer(o, rng), doctest::Contains("dropout 1 is not in [0, 1)"), Error);
  o.dropout = 0.5f;
  nn::TransformerDecoder dec(o, 2, rng);
  const auto params = dec.named_parameters();
  CHECK(params.front()->name == "decoder.layers.0.self_attn.in_proj_weight");
  CHECK(params[4]->name == "decoder.layers.0.multihead_attn.in_proj_weight");
  CHECK(params.back()->name == "decoder.norm.bias");
  CHECK(params.size() == 2 * 18 + 2);

  nn::TransformerEncoderLayer layer(o, rng);
  Var x(rand_normal({1, 3, 8}, rng));
  const Tensor a = layer.forward(x, {}).value();
  // no dropout context: no dropout (equal up to 1 ulp: ops::layer_norm_forward's rounding depends on its
  // input's address today)
  CHECK(compare(layer.forward(x, {}).value(), a, Tolerance{1e-6, 1e-6}).close);
  {
    autograd::NoGrad no_grad;  // inference updates the ops' fresh outputs in place: the same values
    const Tensor x_before = x.value();
    CHECK(compare(layer.forward(x, {}).value(), a, Tolerance{1e-6, 1e-6}).close);
    CHECK(x.value().values() == x_before.values());  // the input itself is never written
  }
  Rng drop(9);
  nn::DropoutContext train{true, &drop};
  const Tensor b = layer.forward(x, {}, train).value();
  CHECK_FALSE(compare(b, a, Tolerance{1e-3, 1e-3}).close);
  CHECK_THROWS_WITH_AS(layer.forward(Var(Tensor({1, 3, 4})), {}), doctest::Contains("input [1, 3, 4] must be [N, S, 8]"),
                       Error);
  autograd::clear_tape();
}

TEST_CASE("transformer encoder layer under inference writes its outputs whole: recycled buffers full of NaN") {
  // Its big outputs (attention, LayerNorm, the feed-forward block's) are Tensor::uninitialized: a freed tensor's
  // buffer, old values and all. Every row must be written, post-LN and pre-LN.
  Rng rng(53);
  const int64_t N = 2, T = 512, E = 256, floats = N * T * E;  // 2^18 floats: big enough to be recycled
  for (bool norm_first : {false, true}) {
    CAPTURE(norm_first);
    nn::TransformerLayerOptions o;
    o.d_model = E, o.heads = 4, o.dim_feedforward = 512, o.dropout = 0.0f, o.norm_first = norm_first;
    nn::TransformerEncoderLayer layer(o, rng);
    const Var x(rand_normal({N, T, E}, rng));
    autograd::NoGrad no_grad;
    test::fill_recycled_buffers(floats, 0.0f);
    const Tensor zeros = layer.forward(x, {}).value();
    test::fill_recycled_buffers(floats, std::nanf(""));
    const Tensor nans = layer.forward(x, {}).value();
    CHECK(std::all_of(nans.values().begin(), nans.values().end(), [](float v) { return std::isfinite(v); }));
    CHECK(compare(nans, zeros, Tolerance{1e-6, 1e-6}).close);
  }
}
