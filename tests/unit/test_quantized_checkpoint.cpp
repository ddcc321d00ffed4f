// Stored lower-precision copies (a quantized checkpoint, models/quantized_checkpoint.hpp): a layer given a stored
// copy through the plan (nn::PrecisionPlan::set_stored) holds it as it is: nn::Linear, nn::MultiheadAttention
// (in_proj_weight's rows per projection) and nn::Recurrent (PyTorch's gate-major rows, reordered) built from the
// stored int8 values and scales of their own weights, over dequantized float32 values, equal bit for bit the
// layers that lowered the float32 weights; a stored copy that lowering would not give (largest |q| 100) is used,
// not made again. The copies' helpers (rows, dequantize) and the checks of stored values; the checkpoint section
// written and read back through .safetensors with its element types.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/tensor_file.hpp"
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/ops/lowp_weights.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "test_util.hpp"

using namespace attnkit;
using autograd::Var;
using ops::Precision;

namespace {

// W [O, I] lowered from its float32 values.
ops::LowpWeights lowered(const Tensor& w, Precision p) {
  return ops::make_lowp_weights(w.data(), w.dim(0), w.dim(1), p, "w");
}

// A stored int8 copy [O, I] that lowering its own dequantized values would not give: |q| <= 100, scales in [0.001, 0.01].
ops::LowpWeights odd_int8(int64_t O, int64_t I, Rng& rng) {
  std::vector<int8_t> q(static_cast<size_t>(O * I));
  std::vector<float> s(static_cast<size_t>(O));
  const Tensor u = rand_uniform({O * I + O}, rng, 0.0f, 1.0f);
  for (int64_t i = 0; i < O * I; ++i) q[size_t(i)] = int8_t(int(u[i] * 201.0f) - 100);
  for (int64_t o = 0; o < O; ++o) s[size_t(o)] = 0.001f + 0.009f * u[O * I + o];
  return ops::lowp_from_q8(std::move(q), std::move(s), O, I, "odd");
}

Tensor dequantized(const ops::LowpWeights& l) {
  Tensor w({l.out, l.in});
  ops::dequantize(l, w.data());
  return w;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  float d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

bool same(const ops::LowpWeights& a, const ops::LowpWeights& b) {
  return a.precision == b.precision && a.out == b.out && a.in == b.in && a.q8.q == b.q8.q &&
         a.q8.scale == b.q8.scale && a.bf16.w == b.bf16.w;
}

}  // namespace

TEST_CASE("lowp copies: rows keep their values and scales; dequantize; stored values are checked") {
  Rng rng(1);
  const Tensor w = rand_normal({6, 5}, rng);
  for (Precision p : {Precision::Int8, Precision::Bf16}) {
    const ops::LowpWeights all = lowered(w, p);
    Tensor rows({3, 5});
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t i = 0; i < 5; ++i) rows[j * 5 + i] = w[(4 - j) * 5 + i];
    CHECK(same(ops::lowp_rows(all, {4, 3, 2}), lowered(rows, p)));  // per row: a row's copy is its own
    const Tensor d = dequantized(all);
    for (int64_t i = 0; i < w.numel(); ++i) CHECK(std::fabs(d[i] - w[i]) <= (p == Precision::Int8 ? 0.02f : 0.01f));
  }
  CHECK_THROWS_WITH_AS(ops::lowp_from_q8({1, 2}, {0.5f, 0.5f}, 1, 2, "m#w"), "m#w: 2 scales for 1 output channels",
                       Error);
  CHECK_THROWS_WITH_AS(ops::lowp_from_q8({1, 2}, {-0.5f}, 1, 2, "m#w"),
                       "m#w: scale [0] is -0.5 (a scale is finite and >= 0)", Error);
  CHECK_THROWS_WITH_AS(ops::lowp_from_q8({0, 2}, {0.0f}, 1, 2, "m#w"), "m#w: scale [0] is 0 but row 0 holds 2 at [1]",
                       Error);
  CHECK_THROWS_WITH_AS(ops::lowp_from_q8({0, -128}, {1.0f}, 1, 2, "m#w"), doctest::Contains("m#w: int8 weights: -128"),
                       Error);
  CHECK(ops::lowp_from_q8({0, 0}, {0.0f}, 1, 2, "m#w").q8.scale[0] == 0.0f);  // a row of zeros
  CHECK_THROWS_WITH_AS(ops::lowp_from_bf16({0x7FC0}, 1, 1, "m#w"), doctest::Contains("m#w: bfloat16 weights: a NaN"),
                       Error);
}

TEST_CASE("nn::Linear from stored int8 or bf16 copies equals the layer that lowered its float32 weights") {
  Rng rng(2);
  const Tensor x = rand_normal({4, 12}, rng);
  autograd::NoGrad no_grad;
  for (Precision p : {Precision::Int8, Precision::Bf16}) {
    CAPTURE(ops::precision_name(p));
    nn::Linear a(12, 7, rng, true, "fc");
    nn::PrecisionPlan pa(p);
    a.set_precision(pa);
    nn::Linear b(12, 7, true, "fc");  // the file's: dequantized values, the stored copy
    const ops::LowpWeights stored = lowered(a.weight.value, p);
    b.weight.value = dequantized(stored), b.bias.value = a.bias.value;
    nn::PrecisionPlan pb(p);
    pb.set_stored({{"fc.weight", stored}});
    b.set_precision(pb);
    CHECK(same(*b.lowp_weight(), *a.lowp_weight()));
    CHECK(max_abs_diff(b.forward(Var(x)).value(), a.forward(Var(x)).value()) == 0.0f);
    nn::PrecisionPlan other(p == Precision::Int8 ? Precision::Bf16 : Precision::Int8);  // not its precision: made
    other.set_stored({{"fc.weight", stored}});
    b.set_precision(other);
    CHECK(b.lowp_weight()->precision != p);
  }
  // a copy lowering would not give is taken as it is
  nn::Linear c(12, 7, true, "fc");
  const ops::LowpWeights odd = odd_int8(7, 12, rng);
  c.weight.value = dequantized(odd);
  nn::PrecisionPlan made(Precision::Int8);
  c.set_precision(made);
  CHECK(!same(*c.lowp_weight(), odd));
  nn::PrecisionPlan plan(Precision::Int8);
  plan.set_stored({{"fc.weight", odd}});
  c.set_precision(plan);
  CHECK(same(*c.lowp_weight(), odd));
  Tensor want({4, 7});
  ops::lowp_linear(odd, x.data(), 4, 12, c.bias.value.data(), want.data(), 7);
  CHECK(max_abs_diff(c.forward(Var(x)).value(), want) == 0.0f);
  nn::PrecisionPlan wrong(Precision::Int8);
  wrong.set_stored({{"fc.weight", odd_int8(7, 11, rng)}});
  CHECK_THROWS_WITH_AS(c.set_precision(wrong), "fc.weight: stored in int8 as [7, 11], but the model multiplies by [7, 12]",
                       Error);
}

TEST_CASE("nn::MultiheadAttention from stored copies: in_proj_weight's rows per projection") {
  Rng rng(3);
  const Var x(rand_normal({2, 5, 8}, rng));
  autograd::NoGrad no_grad;
  for (Precision p : {Precision::Int8, Precision::Bf16}) {
    CAPTURE(ops::precision_name(p));
    nn::MultiheadAttention a(8, 2, rng, "attn.");
    nn::PrecisionPlan pa(p);
    a.set_precision(pa);
    nn::MultiheadAttention b = a;
    const ops::LowpWeights in = lowered(a.in_proj_weight.value, p), out = lowered(a.out_proj_weight.value, p);
    b.in_proj_weight.value = dequantized(in), b.out_proj_weight.value = dequantized(out);
    nn::PrecisionPlan pb(p);
    pb.set_stored({{"attn.in_proj_weight", in}, {"attn.out_proj.weight", out}});
    b.set_precision(pb);
    CHECK(same(*b.q_projection().lowp, *a.q_projection().lowp));
    CHECK(same(*b.v_projection().lowp, *a.v_projection().lowp));
    CHECK(max_abs_diff(b.forward(x, x, x).value(), a.forward(x, x, x).value()) == 0.0f);
  }
  nn::MultiheadAttention c(8, 2, rng, "attn.");
  const ops::LowpWeights odd = odd_int8(24, 8, rng);
  c.in_proj_weight.value = dequantized(odd);
  nn::PrecisionPlan plan(Precision::Int8);
  plan.set_stored({{"attn.in_proj_weight", odd}});
  c.set_precision(plan);
  CHECK(same(*c.k_projection().lowp, ops::lowp_rows(odd, {8, 9, 10, 11, 12, 13, 14, 15})));
}

TEST_CASE("nn::Recurrent from stored copies in PyTorch's row order equals the layer that lowered its weights") {
  const std::string path = std::string(ATTNKIT_FIXTURES) + "/recurrent/torch_gru_2layer_bi_lengths.json";
  const io::Value f = io::parse_json(io::read_text(path), path);
  ops::RecurrentInputs in;
  in.x = &f.find("x")->tensor();
  for (Precision p : {Precision::Int8, Precision::Bf16}) {
    CAPTURE(ops::precision_name(p));
    nn::Recurrent a = nn::Recurrent::from_bundle(*f.find("weights"), ops::CellKind::Gru, nn::WeightLayout::Torch);
    nn::Recurrent b = a;
    nn::PrecisionPlan pa(p);
    a.set_precision(pa);
    std::map<std::string, ops::LowpWeights> stored;
    for (int64_t i = 0; i < b.direction_count(); ++i)
      for (Parameter* w : {&b.direction(i).w_ih, &b.direction(i).w_hh}) {
        const ops::LowpWeights l = lowered(w->value, p);
        w->value = dequantized(l);
        w->touch();
        stored.emplace(w->name, l);
      }
    nn::PrecisionPlan pb(p);
    pb.set_stored(std::move(stored));
    b.set_precision(pb);
    const ops::RecurrentResult ra = a.forward(in), rb = b.forward(in);
    CHECK(max_abs_diff(ra.output, rb.output) == 0.0f);
    CHECK(max_abs_diff(ra.h_n, rb.h_n) == 0.0f);
  }
  nn::Recurrent c = nn::Recurrent::from_bundle(*f.find("weights"), ops::CellKind::Gru, nn::WeightLayout::Torch);
  Rng rng(4);
  const Tensor& w0 = c.direction(0).w_ih.value;
  const ops::LowpWeights odd = odd_int8(w0.dim(0), w0.dim(1), rng);
  nn::PrecisionPlan plan(Precision::Int8);
  plan.set_stored({{c.direction(0).w_ih.name, odd}});
  c.set_precision(plan);
  const ops::LowpWeights want =
      ops::recurrent_lowp_from_stored(ops::CellKind::Gru, c.direction(0).w_hh.value.dim(1), odd, "w");
  CHECK(same(*c.weights().directions[0].lowp_ih, want));
}

TEST_CASE(".safetensors with int8 and bfloat16 elements: written exactly, read back as float32, dtypes named") {
  io::Value v;
  v.set("q", Tensor({2, 2}, {1, -127, 0, 127}));
  v.set("b", Tensor({2}, {ops::from_bf16(0x3F80), ops::from_bf16(0xC0A0)}));
  v.set("f", Tensor({1}, {0.1f}));
  const std::string bytes = io::safetensors_bytes(v, "t.safetensors", {{"q", "I8"}, {"b", "BF16"}});
  CHECK(bytes.size() < io::safetensors_bytes(v, "t.safetensors").size() - 8);
  const io::Value r = io::read_safetensors(bytes, "t.safetensors");
  CHECK(r.find("q")->tensor()[1] == -127.0f);
  CHECK(r.find("b")->tensor()[1] == -5.0f);
  const auto dtypes = io::safetensors_dtypes(bytes, "t.safetensors");
  CHECK(dtypes == std::map<std::string, std::string>{{"q", "I8"}, {"b", "BF16"}, {"f", "F32"}});
  CHECK_THROWS_WITH_AS(io::safetensors_bytes(v, "t.safetensors", {{"f", "I8"}}),
                       "t.safetensors#f: value [0] = 0.1 is not an int8", Error);
  CHECK_THROWS_WITH_AS(io::safetensors_bytes(v, "t.safetensors", {{"f", "BF16"}}),
                       "t.safetensors#f: value [0] = 0.1 is not a bfloat16", Error);
  CHECK_THROWS_WITH_AS(io::safetensors_bytes(v, "t.safetensors", {{"x", "I8"}}), "t.safetensors: no tensor x to store as I8",
                       Error);
  CHECK_THROWS_AS(io::safetensors_dtypes(bytes.substr(0, 20), "t.safetensors"), Error);
}
