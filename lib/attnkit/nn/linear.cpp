// Legend: I in features, O out features.
#include "attnkit/nn/linear.hpp"

#include <cmath>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Rng& rng, bool bias, const std::string& prefix)
    : has_bias_(bias), what_(prefix.empty() ? "linear" : prefix) {
  AK_CHECK(in_features >= 0 && out_features >= 0, "{}: in_features {} and out_features {} must be >= 0", what_,
           in_features, out_features);
  // PyTorch: bound = 1 / sqrt(fan_in) for both (0 when fan_in is 0)
  const float bound = in_features > 0 ? 1.0f / std::sqrt(static_cast<float>(in_features)) : 0.0f;
  weight = Parameter(qualified(prefix, "weight"), rand_uniform({out_features, in_features}, rng, -bound, bound));
  if (bias) this->bias = Parameter(qualified(prefix, "bias"), rand_uniform({out_features}, rng, -bound, bound));
  else this->bias = Parameter(qualified(prefix, "bias"), Tensor());
}

autograd::Var Linear::forward(const autograd::Var& x) { return forward(x, Then{}); }

autograd::Var Linear::forward(const autograd::Var& x, const Then& then) {
  using autograd::Var;
  const int64_t I = in_features(), O = out_features();
  Shape ys = x.shape();
  if (!ys.empty()) ys.back() = O;
  // (anything malformed takes the recorded path, whose ops check shapes and say what is wrong)
  const bool fused = !autograd::grad_enabled() && I > 0 && !x.shape().empty() && x.shape().back() == I &&
                     well_formed() && (!then.residual || then.residual->shape() == ys);
  if (!fused) {
    Var y = autograd::linear(x, Var::param(weight), has_bias_ ? Var::param(bias) : Var());  // [..., O]
    if (then.relu) y = autograd::relu(y);                // max(y, 0)
    if (then.residual) y = autograd::add(*then.residual, y);  // residual + y
    return y;
  }
  Tensor y(ys);  // [..., O] = act(x W^T + b) + residual
  apply(x.value().data(), x.value().numel() / I, y.data(), then.relu, then.residual ? then.residual->value().data() : nullptr);
  return Var(std::move(y));
}

bool Linear::well_formed() const {
  return weight.value.rank() == 2 && (!has_bias_ || bias.value.shape() == Shape{weight.value.dim(0)});
}

void Linear::apply(const float* x, int64_t rows, float* y, bool relu, const float* add) const {
  const int64_t I = in_features(), O = out_features();
  ops::GemmEpilogue e;
  e.bias = has_bias_ ? bias.value.data() : nullptr;
  e.relu = relu;
  e.add = add, e.ldadd = O;
  // y [rows, O] = x [rows, I] W^T, then the epilogue: with W^T packed once where that gives ops::gemm's
  // bits (which would pack it on every call, in every thread)
  if (ops::gemm_packed_matches(rows)) {
    const std::shared_ptr<const ops::GemmPackedB> w =
        packed_.get({&weight}, [&] { return ops::GemmPackedB(ops::Trans::Yes, I, O, weight.value.data(), I); });
    ops::gemm_packed(ops::Trans::No, rows, 1.0f, x, I, *w, 0.0f, y, O, ops::GemmThreads::Policy, e);
    return;
  }
  ops::gemm(ops::Trans::No, ops::Trans::Yes, rows, O, I, 1.0f, x, I, weight.value.data(), I, 0.0f, y, O,
            ops::GemmThreads::Policy, e);
}

std::vector<Parameter*> Linear::named_parameters() {
  if (has_bias_) return {&weight, &bias};
  return {&weight};
}

void Linear::load(const io::Value& bundle) { load_parameters(*this, bundle, what_); }

}  // namespace attnkit::nn
