// Layers built from their config without an Rng and filled from a state dict: nn::load_state_dict with a name
// prefix (missing, unexpected and misshapen tensors refused, all or nothing), nn::state_dict back, the Rng
// constructors equal to the Rng-free ones plus reset_parameters, and MultiheadAttention::from_bundle with a prefix.
// Legend: N batch, T length, E d_model.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/embedding.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/positional.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/nn/transformer.hpp"
#include "attnkit/tensor/random.hpp"
#include "test_util.hpp"

using namespace attnkit;
using autograd::Var;
using test::error_of;

namespace {

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::equal(a.values().begin(), a.values().end(), b.values().begin());
}

// Every parameter of `a` and `b`, value bit for bit, and name (`b`'s with `b_prefix` in front).
void check_same_parameters(nn::Module& a, nn::Module& b, const std::string& a_prefix = "") {
  const std::vector<Parameter*> pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i]->name);
    CHECK(a_prefix + pa[i]->name == pb[i]->name);
    CHECK(same(pa[i]->value, pb[i]->value));
  }
}

nn::TransformerLayerOptions small_options() {
  nn::TransformerLayerOptions o;
  o.d_model = 8, o.heads = 2, o.dim_feedforward = 12, o.dropout = 0.0f;
  return o;
}

}  // namespace

TEST_CASE("load_state_dict: a Linear built without an Rng, filled under a prefix; refusals leave it as it was") {
  Rng rng(7);
  nn::Linear source(5, 3, rng);
  io::Value state = nn::state_dict(source, "decoder.proj.");
  CHECK(state.names() == std::vector<std::string>{"decoder.proj.weight", "decoder.proj.bias"});
  state.set("encoder.other.weight", Tensor({2, 2}));  // outside the prefix: left alone

  nn::Linear layer(5, 3);  // zeros
  CHECK(layer.weight.value.shape() == Shape{3, 5});
  CHECK(layer.bias.value.shape() == Shape{3});
  const uint64_t version = layer.weight.version;
  nn::load_state_dict(layer, state, "decoder.proj.");
  check_same_parameters(layer, source);
  CHECK(layer.weight.version == version + 1);  // touch()ed: packed copies are rebuilt

  nn::Linear fresh(5, 3);
  // missing: the name with the prefix and the expected shape
  io::Value no_bias;
  no_bias.set("decoder.proj.weight", source.weight.value);
  CHECK(error_of([&] { nn::load_state_dict(fresh, no_bias, "decoder.proj."); }) ==
        "load_state_dict: missing 1 tensor (name and expected shape): decoder.proj.bias [3]");
  CHECK(same(fresh.weight.value, Tensor({3, 5})));  // nothing loaded
  // unexpected under the prefix
  io::Value extra = state;
  extra.set("decoder.proj.weight_typo", Tensor({1}));
  CHECK(error_of([&] { nn::load_state_dict(fresh, extra, "decoder.proj."); }) ==
        "load_state_dict: 1 unexpected tensor under \"decoder.proj.\": decoder.proj.weight_typo (not a parameter of "
        "the module; its parameters: decoder.proj.bias, decoder.proj.weight)");
  // with no prefix, every tensor of the state must be a parameter's
  CHECK(error_of([&] { nn::load_state_dict(fresh, nn::state_dict(source, "decoder.proj.")); })
            .find("missing 2 tensors (name and expected shape): weight [3, 5], bias [3]") != std::string::npos);
  io::Value whole = nn::state_dict(source);
  whole.set("step", Tensor({1}));
  CHECK(error_of([&] { nn::load_state_dict(fresh, whole); }) ==
        "load_state_dict: 1 unexpected tensor: step (not a parameter of the module; its parameters: bias, weight)");
  // a shape that differs
  io::Value wrong = nn::state_dict(source);
  wrong.set("weight", Tensor({3, 4}));
  CHECK(error_of([&] { nn::load_state_dict(fresh, wrong); }) ==
        "load_state_dict: weight has shape [3, 4], expected [3, 5]");
  CHECK(same(fresh.bias.value, Tensor({3})));
  // not a bundle
  CHECK(error_of([&] { nn::load_state_dict(fresh, io::Value(Tensor({3}))); }) ==
        "load_state_dict: the state is not a bundle of named tensors (a single tensor)");
  // two parameters of one name: which tensor goes where is not known
  struct Two : nn::Module {
    nn::Linear a{5, 3}, b{5, 3};
    std::vector<Parameter*> named_parameters() override { return {&a.weight, &a.bias, &b.weight, &b.bias}; }
  } two;
  CHECK(error_of([&] { nn::load_state_dict(two, nn::state_dict(source)); }) ==
        "load_state_dict: two parameters of the module are named weight (give its layers prefixes)");
  // a Linear without bias refuses a bias
  nn::Linear no_bias_layer(5, 3, false);
  CHECK(error_of([&] { nn::load_state_dict(no_bias_layer, nn::state_dict(source)); }).find("unexpected tensor: bias") !=
        std::string::npos);
}

TEST_CASE("load_state_dict: nested bundles count as their joined names; a name given twice is refused") {
  Rng rng(3);
  nn::LayerNorm source(4, 1e-5f, true);
  source.weight.value = rand_uniform({4}, rng, -1, 1);
  const io::Value nested = io::parse_json(
      "{\"enc\": {\"norm\": {\"weight\": [1, 2, 3, 4], \"bias\": [0, 0, 0, 1]}}, \"enc.other\": [1]}", "nested");
  nn::LayerNorm norm(4);
  nn::load_state_dict(norm, nested, "enc.norm.");
  CHECK(same(norm.weight.value, io::parse_json("[1, 2, 3, 4]", "w").tensor()));
  const io::Value twice =
      io::parse_json("{\"norm\": {\"weight\": [1, 2, 3, 4], \"bias\": [0, 0, 0, 1]}, \"norm.weight\": [1, 1, 1, 1]}", "t");
  CHECK(error_of([&] { nn::load_state_dict(norm, twice, "norm."); }) ==
        "load_state_dict: the state names norm.weight twice (nested and flat)");
}

TEST_CASE("Rng constructors equal the Rng-free ones followed by reset_parameters (same draws, same order)") {
  const nn::TransformerLayerOptions o = small_options();
  {
    Rng a(11), b(11);
    nn::TransformerEncoderLayer with_rng(o, a, "encoder.layers.0.");
    nn::TransformerEncoderLayer built(o, "encoder.layers.0.");
    for (Parameter* p : built.named_parameters())
      if (p->name.find("norm") == std::string::npos) CHECK_MESSAGE(same(p->value, Tensor(p->value.shape())), p->name);
    built.reset_parameters(b);
    check_same_parameters(with_rng, built);
    CHECK(a.next_u32() == b.next_u32());
  }
  {
    Rng a(12), b(12);
    nn::TransformerDecoder with_rng(o, 2, a);
    nn::TransformerDecoder built(o, 2);
    for (auto& layer : built.layers) layer->reset_parameters(b);
    check_same_parameters(with_rng, built);
  }
  {
    Rng a(13), b(13);
    nn::MultiheadAttention with_rng(8, 2, a, "self_attn.");
    nn::MultiheadAttention built(8, 2, "self_attn.");
    built.reset_parameters(b);
    check_same_parameters(with_rng, built);
    CHECK(built.named_parameters()[0]->name == "self_attn.in_proj_weight");
  }
  {
    Rng a(14);
    ops::RecurrentConfig c;
    c.cell = ops::CellKind::Gru, c.input_size = 3, c.hidden_size = 4, c.layers = 2, c.bidirectional = true;
    nn::Recurrent random = nn::Recurrent::random(c, a);
    nn::Recurrent built(c);
    CHECK(built.named_parameters().size() == random.named_parameters().size());
    nn::load_state_dict(built, nn::state_dict(random, "rnn."), "rnn.");
    check_same_parameters(built, random);
  }
  {
    Rng a(15);
    nn::Embedding with_rng(6, 4, a, 0, "embed");
    nn::Embedding built(6, 4, 0, "embed");
    CHECK(built.options().padding_idx == with_rng.options().padding_idx);
    nn::load_state_dict(built, nn::state_dict(with_rng));
    check_same_parameters(built, with_rng);
    nn::PositionalEncoding learned(nn::PositionalKind::Learned, 4, 10, a);
    nn::PositionalEncoding loaded(nn::PositionalKind::Learned, 4, 10);
    nn::load_state_dict(loaded, nn::state_dict(learned));
    check_same_parameters(loaded, learned);
  }
}

TEST_CASE("a Transformer encoder layer loaded from a .safetensors state dict under encoder.layers.1. runs as its source") {
  const nn::TransformerLayerOptions o = small_options();
  Rng rng(21);
  nn::TransformerEncoder source(o, 2, rng);  // named encoder.layers.0., encoder.layers.1., encoder.norm.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("attnkit_state_dict_" + std::to_string(rng.next_u32()) + ".safetensors"))
          .string();
  io::write_value_file(path, nn::state_dict(source));
  const io::Value state = io::read_value_file(path);
  std::remove(path.c_str());

  nn::TransformerEncoderLayer layer(o);  // its own names, without a prefix
  nn::load_state_dict(layer, state, "encoder.layers.1.");
  check_same_parameters(layer, *source.layers[1], "encoder.layers.1.");
  const Var x(rand_normal({2, 5, 8}, rng));        // [N, T, E]
  autograd::NoGrad no_grad;
  CHECK(same(layer.forward(x, {}).value(), source.layers[1]->forward(x, {}).value()));
}

TEST_CASE("MultiheadAttention::from_bundle under a prefix: the form's tensors, nothing else under the prefix") {
  Rng rng(31);
  nn::TransformerDecoderLayer source(small_options(), rng, "decoder.layers.0.");
  io::Value state = nn::state_dict(source);
  const nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(state, 2, "cross", "decoder.layers.0.multihead_attn.");
  CHECK(m.form == nn::MhaWeightForm::InProj);
  CHECK(same(m.in_proj_weight.value, source.multihead_attn.in_proj_weight.value));
  CHECK(same(m.out_proj_bias.value, source.multihead_attn.out_proj_bias.value));
  state.set("decoder.layers.0.multihead_attn.bias_q", Tensor({8}));
  CHECK(error_of([&] { nn::MultiheadAttention::from_bundle(state, 2, "cross", "decoder.layers.0.multihead_attn."); })
            .find("cross: unexpected weight decoder.layers.0.multihead_attn.bias_q") != std::string::npos);
  CHECK(error_of([&] { nn::MultiheadAttention::from_bundle(state, 2, "cross", "decoder.layers.9."); })
            .find("cross: the weights have none of decoder.layers.9.in_proj_weight") != std::string::npos);
}
