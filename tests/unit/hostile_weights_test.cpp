// Hostile weights and odd inputs for the layers behind lstm-run and attn-score (docs/hardening.md):
// the loaders refuse with a message naming the problem; zero-length inputs give empty results or
// zeros; nothing reaches an undefined cast.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "attnkit/app/recurrent_request.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/weight_checks.hpp"
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/attention_scores.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/ops/attention_scores.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

io::Value json(const std::string& text) { return io::parse_json(text, "w.json"); }

using test::error_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A torch-layout RNN (G = 1) with D = 2, H = 1: weight_ih [1, 2], weight_hh [1, 1].
const char* kRnn = R"({"weight_ih_l0": [[0.5, -0.5]], "weight_hh_l0": [[0.25]], "bias_ih_l0": [0], "bias_hh_l0": [0])";

}  // namespace

TEST_CASE("weights: extra tensors are named, metadata is allowed") {
  io::Value b = json(R"({"W": [1], "cell": "lstm", "out": {"weight": [1], "bias": [2]}})");
  CHECK_NOTHROW(io::check_no_extra_weights(b, {"W", "out.weight", "out.bias"}, "op"));
  CHECK(error_of([&] { io::check_no_extra_weights(b, {"W"}, "op"); }) ==
        "op: unexpected weights out.weight, out.bias (these weights use: W)");
}

TEST_CASE("recurrent weights: hand-edited files are refused naming the problem") {
  using nn::CellKind;
  using nn::WeightLayout;
  auto load = [](const std::string& text) {
    return error_of([&] { nn::Recurrent::from_bundle(json(text), CellKind::RnnTanh, WeightLayout::Torch); });
  };
  CHECK(load(std::string(kRnn) + "}").empty());
  CHECK(contains(load(R"({"weight_ih_l0": [[0.5, -0.5]], "weight_hh_l0": "learned"})"),
                 "weights: weight_hh_l0 is not a tensor: a string (line 1, column 49)"));
  CHECK(contains(load(R"({"weight_ih_l0": [[0.5, -0.5]], "weight_hh_l0": {"a": [1]}})"), "weight_hh_l0 is a bundle, not a tensor"));
  CHECK(contains(load(std::string(kRnn) + R"(, "weight_ih_l0_x": [1]})"), "unexpected member \"weight_ih_l0_x\""));
  CHECK(contains(load(std::string(kRnn) + R"(, "weight_ih_l2": [[1]], "weight_hh_l2": [[1]], "bias_ih_l2": [0], "bias_hh_l2": [0]})"),
                 "missing weight weight_ih_l1"));
  CHECK(contains(load(R"({"weight_ih_l0": [[1]], "weight_ih_l0": [[1]]})"), "got something else: an object with the key"));
  CHECK(contains(load("[1, 2]"), "got a single tensor"));
  CHECK(contains(load("{}"), "missing weight"));
}

TEST_CASE("recurrent: zero-length sequences and absurd lengths") {
  nn::Recurrent m = nn::Recurrent::from_bundle(json(std::string(kRnn) + "}"), nn::CellKind::RnnTanh, nn::WeightLayout::Torch);
  app::SequenceRequest req;
  req.x = Tensor({2, 0, 2});  // N = 2, T = 0
  io::Value out = app::run_sequence(m, req);
  CHECK(out.find("output")->tensor().shape() == Shape{2, 0, 1});
  CHECK(out.find("h_n")->tensor().shape() == Shape{1, 2, 1});
  Tensor lengths({2});
  lengths[0] = 1e30f;
  CHECK(contains(error_of([&] { io::lengths_from(lengths, 2, 5, "lengths"); }), "lengths[0] is 1e+30, expected 0 <= length <= 5"));
  lengths[0] = std::numeric_limits<float>::infinity();
  CHECK(contains(error_of([&] { io::lengths_from(lengths, 2, 5, "lengths"); }), "expected a whole number"));
}

TEST_CASE("attention: zero queries or zero keys give empty weights and zero context") {
  Rng rng(3);
  Tensor q = rand_normal({2, 4}, rng), k0({0, 4}), v0({0, 3});
  ops::AttentionResult r = ops::attention_forward(q, k0, v0, {});
  CHECK(r.weights.shape() == Shape{2, 0});
  CHECK(r.context.shape() == Shape{2, 3});
  for (int64_t i = 0; i < r.context.numel(); ++i) CHECK(r.context[i] == 0.0f);
  Tensor q0({0, 4}), k = rand_normal({5, 4}, rng);
  r = ops::attention_forward(q0, k, k, {});
  CHECK(r.weights.shape() == Shape{0, 5});
  CHECK(r.context.shape() == Shape{0, 4});
}

TEST_CASE("attention: key lengths that are not integers in range never reach a cast") {
  for (float bad : {std::numeric_limits<float>::infinity(), 1e30f, -1.0f, 0.5f, std::numeric_limits<float>::quiet_NaN()}) {
    Tensor t({2});
    t[0] = bad;
    t[1] = 1;
    CHECK(contains(error_of([&] { nn::key_lengths_from(t, 2, "attention"); }), "attention: key lengths[0] is "));
  }
}

TEST_CASE("multi-head weights: extra and missing members are refused") {
  const std::string eye = "[[1, 0], [0, 1]]";
  const std::string in_proj = "[[1, 0], [0, 1], [1, 0], [0, 1], [1, 0], [0, 1]]";
  auto load = [&](const std::string& text) { return error_of([&] { nn::MultiheadAttention::from_bundle(json(text), 1); }); };
  CHECK(load(R"({"in_proj_weight": )" + in_proj + R"(, "out_proj.weight": )" + eye + "}").empty());
  CHECK(load(R"({"in_proj_weight": )" + in_proj + R"(, "out_proj": {"weight": )" + eye + "}}").empty());
  CHECK(contains(load(R"({"in_proj_weight": )" + in_proj + R"(, "out_proj.weight": )" + eye + R"(, "q_proj_weight": )" + eye + "}"),
                 "unexpected weight q_proj_weight"));
  CHECK(contains(load(R"({"in_proj_weight": )" + in_proj + "}"), "out_proj.weight [E, E] = [2, 2] is missing"));
  CHECK(contains(load(R"({"a": 1, "a": 2})"), "not a bundle of named tensors: an object with the key \"a\" twice"));
}
