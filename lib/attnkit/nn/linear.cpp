// Legend: I in features, O out features.
#include "attnkit/nn/linear.hpp"

#include <cmath>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/ops/gemm_panels.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, const std::string& prefix)
    : has_bias_(bias), what_(prefix.empty() ? "linear" : prefix) {
  AK_CHECK(in_features >= 0 && out_features >= 0, "{}: in_features {} and out_features {} must be >= 0", what_,
           in_features, out_features);
  weight = Parameter(qualified(prefix, "weight"), Tensor({out_features, in_features}));  // [O, I]
  this->bias = Parameter(qualified(prefix, "bias"), bias ? Tensor({out_features}) : Tensor());  // [O]
}

Linear::Linear(int64_t in_features, int64_t out_features, Rng& rng, bool bias, const std::string& prefix)
    : Linear(in_features, out_features, bias, prefix) {
  draw(rng);  // a new layer's values: nothing derived from them yet, nothing to touch
}

void Linear::draw(Rng& rng) {
  // PyTorch: bound = 1 / sqrt(fan_in) for both (0 when fan_in is 0)
  const int64_t I = in_features(), O = out_features();
  const float bound = I > 0 ? 1.0f / std::sqrt(static_cast<float>(I)) : 0.0f;
  weight.value = rand_uniform({O, I}, rng, -bound, bound);
  if (has_bias_) bias.value = rand_uniform({O}, rng, -bound, bound);
}

void Linear::reset_parameters(Rng& rng) {
  draw(rng);
  weight.touch();
  bias.touch();
}

autograd::Var Linear::forward(const autograd::Var& x) { return forward(x, autograd::LinearThen{}); }

autograd::Var Linear::forward(const autograd::Var& x, const autograd::LinearThen& then) {
  using autograd::Var;
  return autograd::linear(x, Var::param(weight), has_bias_ ? Var::param(bias) : Var(), then,
                          [this] { return packed_weight(); }, lowp_weight());
}

void Linear::set_precision(PrecisionPlan& plan) {
  precision_ = plan.for_weight(weight.name, out_features(), in_features());
  lowp_ = DerivedSlot<ops::LowpWeights>();
  if (const ops::LowpWeights* s = plan.stored(weight.name, precision_, out_features(), in_features()))
    lowp_.get({&weight}, [&] { return *s; });  // the stored copy, kept while the weight is unchanged
  lowp_weight();  // made now: a weight the precision cannot hold is refused here, not at the first product
}

std::shared_ptr<const ops::LowpWeights> Linear::lowp_weight() const {
  if (precision_ == ops::Precision::Fp32) return nullptr;
  return lowp_.get({&weight}, [&] {
    return ops::make_lowp_weights(weight.value.data(), out_features(), in_features(), precision_, weight.name);
  });
}

std::shared_ptr<const ops::GemmPackedB> Linear::packed_weight() const {
  if (ops::gemm_panel_shape().mr == 0) return nullptr;  // no panel kernel (Eigen's GEMM)
  const int64_t I = in_features(), O = out_features();
  return packed_.get({&weight}, [&] { return ops::GemmPackedB(ops::Trans::Yes, I, O, weight.value.data(), I); });
}

ops::LinearWeights Linear::view() const {
  ops::LinearWeights w;
  w.W = weight.value.data(), w.out = out_features(), w.in = in_features();
  w.b = has_bias_ ? bias.value.data() : nullptr;
  w.packed = [this] { return packed_weight(); };
  w.lowp = lowp_weight();
  return w;
}

autograd::Var feed_forward(Linear& linear1, Linear& linear2, const autograd::Var& x, const autograd::Var& base) {
  using autograd::Var;
  return autograd::feed_forward(x, Var::param(linear1.weight), linear1.has_bias() ? Var::param(linear1.bias) : Var(),
                                [&linear1] { return linear1.packed_weight(); }, Var::param(linear2.weight),
                                linear2.has_bias() ? Var::param(linear2.bias) : Var(),
                                [&linear2] { return linear2.packed_weight(); }, base, linear1.lowp_weight(),
                                linear2.lowp_weight());
}

std::vector<Parameter*> Linear::named_parameters() {
  if (has_bias_) return {&weight, &bias};
  return {&weight};
}

void Linear::load(const io::Value& bundle) { load_parameters(*this, bundle, what_); }

}  // namespace attnkit::nn
