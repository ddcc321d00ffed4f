// The Transformer family in lower precision (nn::MultiheadAttention / layers / models set_precision): PyTorch's
// golden outputs (tests/fixtures/gen_attention.py, gen_transformer.py: computed in float32) reproduced by the
// int8 and bfloat16 products within the bounds docs/transformer-decode.md states; every weight matrix asked
// about by its state_dict name; the cached and uncached decoding agreeing in int8; a float32 plan changing no
// bit; a recorded forward refused.
// Legend: N batch, T queries, S keys, E model size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/models/transformer.hpp"
#include "attnkit/models/transformer_lm.hpp"
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/nn/transformer.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "decoding_contract.hpp"
#include "test_util.hpp"

using namespace attnkit;
using autograd::Var;
using ops::Precision;

namespace {

// The bounds on max |lower precision - PyTorch float32| over the outputs of these fixtures (values of order 1,
// E = 6 .. 8; docs/transformer-decode.md): int8 rounds each activation row and weight row to steps of 1/127 of
// its largest magnitude, bf16 each weight to 8 significant bits.
float bound(Precision p) { return p == Precision::Int8 ? 0.02f : 0.008f; }

const io::Value& fixture(const std::string& file, const std::string& name) {
  static const io::Value attention = io::parse_json(test::fixture_text("attention.json"), "attention.json");
  static const io::Value layers = io::parse_json(test::fixture_text("transformer/layers.json"), "layers.json");
  const io::Value* c = (file == "attention" ? attention : layers).find(name);
  REQUIRE_MESSAGE(c != nullptr, "fixture case " << name);
  return *c;
}

Tensor member(const io::Value& c, const char* name) {
  const Tensor* t = io::find_tensor(c, name, "fixture");
  REQUIRE_MESSAGE(t != nullptr, "fixture member " << name);
  return *t;
}

struct OneThread {  // tiny sizes: a thread team costs more than it saves
  int saved = num_threads();
  OneThread() { set_num_threads(1); }
  ~OneThread() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("multi-head attention in int8 and bf16: PyTorch's float32 outputs within the bounds") {
  for (const std::string name : {"mha_self", "mha_cross", "mha_cross_padding"}) {
    for (Precision p : {Precision::Int8, Precision::Bf16}) {
      CAPTURE(name);
      CAPTURE(ops::precision_name(p));
      const io::Value& c = fixture("attention", name);
      const Tensor q = member(c, "query"), k = member(c, "key"), v = member(c, "value"), want = member(c, "output");
      nn::MultiheadAttention m =
          nn::MultiheadAttention::from_bundle(*c.find("state"), static_cast<int64_t>(member(c, "heads")[0]));
      nn::PrecisionPlan plan(p);
      m.set_precision(plan);
      CHECK(plan.names() == std::vector<std::string>{"in_proj_weight", "out_proj.weight"});
      CHECK(plan.lowered() == 2);
      CHECK(m.view().lowp());
      CHECK(!m.view().packed);  // no packed float32 weights beside the lower-precision ones
      ops::MhaOptions o;
      if (c.find("key_lengths")) o.mask.key_lengths = io::lengths_from(member(c, "key_lengths"), q.dim(0), k.dim(1), "k");
      autograd::NoGrad no_grad;
      std::vector<Tensor> outs{nn::multihead_attention_forward(m, q, k, v, o).output,
                               nn::multihead_attention_forward_ops(m, q, k, v, o).output};
      // the decoder's path: keys and values projected apart, then the query
      const Tensor K = ops::project(m.k_projection(), k, "key projection"), V = ops::project(m.v_projection(), v, "v");
      outs.push_back(nn::multihead_attention_forward_projected(m, q, K, V, o).output);
      if (name == "mha_self") outs.push_back(nn::multihead_attention_forward(m, q, q, q, o).output);
      for (const Tensor& y : outs) {
        const float err = test::max_abs_diff(y, want);
        CHECK(err > 0.0f);  // the products were lowered
        CHECK(err < bound(p));
      }
      nn::PrecisionPlan fp32;
      m.set_precision(fp32);
      CHECK(!m.view().lowp());
      CHECK(test::max_abs_diff(nn::multihead_attention_forward(m, q, k, v, o).output, want) < 1e-5f);
    }
  }
}

TEST_CASE("transformer encoder and decoder layers in int8 and bf16: PyTorch's float32 outputs within the bounds") {
  OneThread one;
  for (const std::string name : {"encoder_post_relu_padding", "encoder_pre_gelu_padding",
                                 "decoder_post_relu_padding", "decoder_pre_gelu_padding"}) {
    for (Precision p : {Precision::Int8, Precision::Bf16}) {
      CAPTURE(name);
      CAPTURE(ops::precision_name(p));
      const io::Value& c = fixture("layers", name);
      nn::TransformerLayerOptions o;
      o.d_model = 8, o.dim_feedforward = 16, o.dropout = 0.0f;
      o.heads = static_cast<int64_t>(member(c, "heads")[0]);
      o.norm_first = c.find("norm_first")->json() == "true";
      o.activation = c.find("activation")->json() == "\"gelu\"" ? nn::FfnActivation::Gelu : nn::FfnActivation::Relu;
      const Tensor x = member(c, "x"), want = member(c, "output");
      nn::PrecisionPlan plan(p, {"*.nothing"});
      autograd::NoGrad no_grad;
      Tensor y;
      if (name.rfind("encoder", 0) == 0) {
        nn::TransformerEncoderLayer layer(o);
        nn::load_parameters(layer, *c.find("state"), "encoder layer");
        layer.set_precision(plan);
        ops::MaskSpec mask;
        mask.key_lengths = io::lengths_from(member(c, "key_lengths"), x.dim(0), x.dim(1), "key_lengths");
        y = layer.forward(Var(x), mask).value();
        CHECK(plan.names() == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.out_proj.weight",
                                                       "linear1.weight", "linear2.weight"});
      } else {
        nn::TransformerDecoderLayer layer(o);
        nn::load_parameters(layer, *c.find("state"), "decoder layer");
        layer.set_precision(plan);
        const Tensor memory = member(c, "memory");
        ops::MaskSpec self_mask, memory_mask;
        self_mask.causal = ops::CausalKind::UpperLeft;
        memory_mask.key_lengths = io::lengths_from(member(c, "key_lengths"), x.dim(0), memory.dim(1), "key_lengths");
        y = layer.forward(Var(x), Var(memory), self_mask, memory_mask).value();
        CHECK(plan.lowered() == 6);
      }
      CHECK(plan.unmatched() == std::vector<std::string>{"*.nothing"});
      const float err = test::max_abs_diff(y, want);
      CHECK(err > 0.0f);
      CHECK(err < bound(p));
    }
  }
}

TEST_CASE("multi-head attention: a recorded forward refuses lower-precision weights; keep patterns keep them") {
  Rng rng(3);
  nn::MultiheadAttention m(8, 2, rng, "self_attn.");
  nn::PrecisionPlan plan(Precision::Int8, {"*.out_proj.*"});
  m.set_precision(plan);
  CHECK(m.q_projection().lowp);
  CHECK(!m.out_projection().lowp);
  CHECK(plan.kept() == 1);
  const Var x(rand_normal({2, 3, 8}, rng), true);
  CHECK_THROWS_WITH_AS(m.forward(x, x, x), doctest::Contains("are for inference only"), Error);
  autograd::NoGrad no_grad;
  CHECK(m.forward(x, x, x).shape() == Shape{2, 3, 8});
}

TEST_CASE("transformer model in int8: the cached and uncached decoding give the same tokens") {
  OneThread one;
  // tests/fixtures/gen_transformer_greedy.py: a Transformer trained in PyTorch 1.13 and its sources
  const std::string text = test::fixture_text("transformer/greedy.json");
  const nlohmann::json j = nlohmann::json::parse(text);
  const io::Value all = io::parse_json(text, "greedy.json");
  const models::TransformerConfig c = models::TransformerConfig::from_value(*all.find("config"), "greedy.json#config");
  Rng rng(1);
  models::Transformer m(c, rng);
  m.load_parameters(*all.find("state"), "greedy.json#state");
  std::vector<std::vector<int64_t>> src;
  for (size_t i = 0; i < j["sources"].size(); ++i) {
    std::vector<int64_t> row = j["sources"][i].get<std::vector<int64_t>>();
    row.resize(j["lengths"][i].get<size_t>());
    src.push_back(row);
  }
  const models::SourceBatch b = test::sources_batch(src);
  const int64_t max_len = j["max_len"].get<int64_t>();
  const auto fp32_tokens = m.greedy(b, max_len);
  nn::PrecisionPlan plan(Precision::Int8);
  m.set_precision(plan);
  // per layer: the encoder's 4 matrices, the decoder's 6; then output.weight
  CHECK(plan.lowered() == 4 * c.encoder_layers + 6 * c.decoder_layers + 1);
  CHECK(plan.names().back() == "output.weight");
  const auto cached = m.greedy(b, max_len);
  // greedy without the cache: every step runs the whole prefix
  std::vector<std::vector<int64_t>> fresh(src.size());
  auto state = m.start_decoding(b, false);
  std::vector<int64_t> prev(src.size(), c.bos_id);
  std::vector<char> done(src.size(), 0);
  for (int64_t t = 0; t < max_len; ++t) {
    const Tensor lp = state->step(prev);
    for (size_t n = 0; n < src.size(); ++n) {
      prev[n] = test::argmax_row(lp, int64_t(n));
      if (done[n]) continue;
      if (prev[n] == c.eos_id) done[n] = 1;
      else fresh[n].push_back(prev[n]);
    }
  }
  CHECK(fresh == cached);
  CHECK(cached == fp32_tokens);  // and, on this model, the float32 tokens
  CHECK(test::check_decoding_contract(m, src, true, 6, 1e-3f) == "");
}

TEST_CASE("tied output in int8: the embedding table's name, the lookup in float32; a float32 plan changes no bit") {
  OneThread one;
  models::TransformerLMConfig c;
  c.vocab = 12, c.layers = 2, c.heads = 2, c.d_model = 16, c.ff = 24, c.max_positions = 32, c.tied_output = true;
  Rng rng(5);
  models::TransformerLM lm(c, rng);
  const std::vector<std::vector<int64_t>> prompts{{4, 5, 6}, {7, 8, 9}};
  autograd::NoGrad no_grad;
  const Tensor before = lm.start_decoding(test::sources_batch(prompts), true)->step({1, 1});
  nn::PrecisionPlan fp32;
  lm.set_precision(fp32);
  CHECK(test::max_abs_diff(lm.start_decoding(test::sources_batch(prompts), true)->step({1, 1}), before) == 0.0f);
  nn::PrecisionPlan plan(Precision::Int8);
  lm.set_precision(plan);
  CHECK(plan.names().back() == "embed.weight");
  CHECK(plan.lowered() == 4 * c.layers + 1);
  const Tensor int8 = lm.start_decoding(test::sources_batch(prompts), true)->step({1, 1});
  const float err = test::max_abs_diff(int8, before);
  CHECK(err > 0.0f);
  CHECK(err < 0.1f);
  auto cached = lm.start_decoding(test::sources_batch(prompts), true);
  auto fresh = lm.start_decoding(test::sources_batch(prompts), false);
  std::vector<int64_t> prev{1, 1};
  for (int t = 0; t < 8; ++t) {  // the same tokens with the cache and without
    const Tensor a = cached->step(prev), b = fresh->step(prev);
    CHECK(test::max_abs_diff(a, b) < 1e-3f);
    for (int64_t r = 0; r < 2; ++r) {
      CHECK(test::argmax_row(a, r) == test::argmax_row(b, r));
      prev[size_t(r)] = test::argmax_row(a, r);
    }
  }
  nn::PrecisionPlan keep(Precision::Bf16, {"embed.weight"});
  lm.set_precision(keep);
  CHECK(keep.kept() == 1);
  CHECK(keep.lowered() == 4 * c.layers);
}
