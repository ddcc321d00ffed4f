// Lower-precision weights in the layers (ops/lowp_weights.hpp, nn/precision.hpp): nn::Linear with an int8 or
// bfloat16 plan gives exactly the kernels' product plus the float32 bias, activation and residual, on every path
// (the plain product, the fused epilogue, the feed-forward block); a float32 plan changes nothing; the copy follows
// the weights when they change; a recorded product refuses lower-precision weights; the plan's patterns,
// counts and summary.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/var.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/ops/lowp_weights.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"

using namespace attnkit;
using autograd::Var;
using ops::Precision;

namespace {

// y [rows, O] = x W^T + b by the lower-precision kernels directly, from a fresh copy of W.
Tensor direct(const nn::Linear& l, Precision p, const Tensor& x) {
  const auto w = ops::make_lowp_weights(l.weight.value.data(), l.out_features(), l.in_features(), p, "w");
  const int64_t rows = x.numel() / l.in_features();
  Tensor y({rows, l.out_features()});
  ops::lowp_linear(w, x.data(), rows, l.in_features(), l.has_bias() ? l.bias.value.data() : nullptr, y.data(),
                   l.out_features());
  return y;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.numel() == b.numel());
  float d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace

TEST_CASE("nn::Linear in int8 and bf16: the kernels' product, the bias, ReLU and residual in float32") {
  Rng rng(7);
  for (Precision p : {Precision::Int8, Precision::Bf16})
    for (int64_t rows : {1, 3, 9, 70}) {
      CAPTURE(ops::precision_name(p));
      CAPTURE(rows);
      nn::Linear l(37, 21, rng);
      nn::Linear fp(37, 21, rng);
      fp.weight.value = l.weight.value, fp.bias.value = l.bias.value;
      nn::PrecisionPlan plan(p);
      l.set_precision(plan);
      CHECK(l.precision() == p);
      const Tensor x = rand_normal({rows, 37}, rng), res = rand_normal({rows, 21}, rng);
      autograd::NoGrad no_grad;
      const Tensor want = direct(l, p, x);
      const Tensor y = l.forward(Var(x)).value();
      CHECK(max_abs_diff(y, want) == 0.0f);  // the same kernel, the same bits
      const Var r(res);
      const Tensor z = l.forward(Var(x), autograd::LinearThen{true, &r}).value();  // relu(x W^T + b) + res
      for (int64_t i = 0; i < z.numel(); ++i) CHECK(z[i] == res[i] + std::max(want[i], 0.0f));
      // near the float32 layer: int8's error is a few hundredths at these sizes, bf16's thousandths
      const float err = max_abs_diff(y, fp.forward(Var(x)).value());
      CHECK(err > 0.0f);
      CHECK(err < (p == Precision::Int8 ? 0.08f : 0.02f));
    }
}

TEST_CASE("nn::feed_forward in int8: base + relu(x W1^T + b1) W2^T + b2 by the lower-precision products") {
  Rng rng(11);
  nn::Linear l1(16, 40, rng), l2(40, 16, rng);
  nn::PrecisionPlan plan(Precision::Int8);
  l1.set_precision(plan), l2.set_precision(plan);
  for (int64_t rows : {2, 100}) {
    const Tensor x = rand_normal({rows, 16}, rng), base = rand_normal({rows, 16}, rng);
    autograd::NoGrad no_grad;
    Tensor h = direct(l1, Precision::Int8, x);
    for (int64_t i = 0; i < h.numel(); ++i) h[i] = std::max(h[i], 0.0f);
    const Tensor o = direct(l2, Precision::Int8, h);
    const Tensor y = nn::feed_forward(l1, l2, Var(x), Var(base)).value();
    for (int64_t i = 0; i < y.numel(); ++i) CHECK(y[i] == base[i] + o[i]);
  }
}

TEST_CASE("nn::Linear: a float32 plan changes no bit; the low-precision copy follows the weights") {
  Rng rng(3);
  nn::Linear l(8, 5, rng);
  const Tensor x = rand_normal({4, 8}, rng);
  autograd::NoGrad no_grad;
  const Tensor before = l.forward(Var(x)).value();
  nn::PrecisionPlan fp32;
  l.set_precision(fp32);
  CHECK(!l.lowp_weight());
  CHECK(max_abs_diff(l.forward(Var(x)).value(), before) == 0.0f);
  nn::PrecisionPlan int8(Precision::Int8);
  l.set_precision(int8);
  const Tensor first = l.forward(Var(x)).value();
  for (int64_t i = 0; i < l.weight.value.numel(); ++i) l.weight.value[i] *= 2;
  l.weight.touch();
  const Tensor after = l.forward(Var(x)).value();
  CHECK(max_abs_diff(after, direct(l, Precision::Int8, x)) == 0.0f);
  CHECK(max_abs_diff(after, first) > 0.1f);
}

TEST_CASE("nn::Linear: a recorded product refuses lower-precision weights; a weight bf16 cannot hold is refused") {
  Rng rng(5);
  nn::Linear l(6, 3, rng, true, "proj");
  nn::PrecisionPlan plan(Precision::Bf16);
  l.set_precision(plan);
  const Var x(rand_normal({2, 6}, rng));
  CHECK_THROWS_WITH_AS(l.forward(x), doctest::Contains("inference only"), Error);
  l.weight.value[4] = std::nanf("");
  l.weight.touch();
  nn::PrecisionPlan again(Precision::Bf16);
  CHECK_THROWS_WITH_AS(l.set_precision(again), doctest::Contains("proj.weight: weight [0, 4] is nan"), Error);
}

TEST_CASE("PrecisionPlan: keep patterns, what they matched, the summary") {
  nn::PrecisionPlan plan(Precision::Int8, {"*.linear2.weight", "decoder.out?ut.*", "nothing.*"});
  CHECK(plan.for_weight("encoder.layers.0.linear1.weight", 64, 16) == Precision::Int8);
  CHECK(plan.for_weight("encoder.layers.0.linear2.weight", 16, 64) == Precision::Fp32);
  CHECK(plan.for_weight("decoder.output.weight", 10, 16) == Precision::Fp32);
  CHECK(plan.lowered() == 1);
  CHECK(plan.kept() == 2);
  CHECK(plan.unmatched() == std::vector<std::string>{"nothing.*"});
  CHECK(plan.names().size() == 3);
  CHECK(plan.summary() == "int8: 3 weight matrices, 0.0 MB -> 0.0 MB; 2 kept in float32 (*.linear2.weight, "
                          "decoder.out?ut.*)");
  nn::PrecisionPlan bf16(Precision::Bf16);
  bf16.for_weight("w", 1000, 1000);
  CHECK(bf16.summary() == "bf16: 1 weight matrices, 4.0 MB -> 2.0 MB");
  nn::PrecisionPlan fp32;
  CHECK(fp32.for_weight("w", 1000, 500) == Precision::Fp32);
  CHECK(fp32.summary() == "fp32: 1 weight matrices, 2.0 MB");
  CHECK(ops::precision_from_name("bf16") == Precision::Bf16);
  CHECK_THROWS_WITH_AS(ops::precision_from_name("fp16"), "unknown precision \"fp16\" (expected fp32, bf16 or int8)",
                       Error);
}
