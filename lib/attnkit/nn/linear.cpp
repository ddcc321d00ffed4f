// Legend: I in features, O out features.
#include "attnkit/nn/linear.hpp"

#include <omp.h>

#include <atomic>
#include <cmath>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/nn/state_dict.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/parallel_errors.hpp"
#include "attnkit/tensor/scratch_pool.hpp"
#include "attnkit/tensor/threads.hpp"

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
  // y [rows, O] = x [rows, I] W^T, then the epilogue: with W^T packed once where that gives ops::gemm's
  // bits (which would pack it on every call, in every thread)
  if (ops::gemm_packed_matches(rows)) {
    const std::shared_ptr<const ops::GemmPackedB> w = packed_weight();
    ops::gemm_packed(ops::Trans::No, rows, 1.0f, x, in_features(), *w, 0.0f, y, out_features(),
                     ops::GemmThreads::Policy, epilogue(relu, add));
    return;
  }
  ops::gemm(ops::Trans::No, ops::Trans::Yes, rows, out_features(), in_features(), 1.0f, x, in_features(),
            weight.value.data(), in_features(), 0.0f, y, out_features(), ops::GemmThreads::Policy, epilogue(relu, add));
}

std::shared_ptr<const ops::GemmPackedB> Linear::packed_weight() const {
  if (ops::gemm_panel_shape().mr == 0) return nullptr;  // no panel kernel (Eigen's GEMM)
  const int64_t I = in_features(), O = out_features();
  return packed_.get({&weight}, [&] { return ops::GemmPackedB(ops::Trans::Yes, I, O, weight.value.data(), I); });
}

void Linear::apply_packed(const ops::GemmPackedB& w, const float* x, int64_t rows, float* y, bool relu,
                          const float* add) const {
  ops::gemm_packed(ops::Trans::No, rows, 1.0f, x, in_features(), w, 0.0f, y, out_features(), ops::GemmThreads::This,
                   epilogue(relu, add));
}

ops::GemmEpilogue Linear::epilogue(bool relu, const float* add) const {
  ops::GemmEpilogue e;
  e.bias = has_bias_ ? bias.value.data() : nullptr;
  e.relu = relu;
  e.add = add, e.ldadd = out_features();
  return e;
}

void feed_forward(const Linear& linear1, const Linear& linear2, const float* x, int64_t rows, float* y,
                  const float* add) {
  const int64_t I = linear1.in_features(), F = linear1.out_features(), O = linear2.out_features();
  AK_CHECK(linear1.well_formed() && linear2.well_formed() && linear2.in_features() == F,
           "feed_forward: linear1 [{}, {}] then linear2 [{}, {}] do not chain", F, I, O, linear2.in_features());
  if (!ops::gemm_packed_matches(rows)) {  // apply's own kernels (up to 4 rows: no packed weights; or no panel kernel)
    const std::shared_ptr<float> h = ScratchPool::get(rows * F);  // [rows, F]
    linear1.apply(x, rows, h.get(), true, nullptr);
    linear2.apply(h.get(), rows, y, false, add);
    return;
  }
  const std::shared_ptr<const ops::GemmPackedB> w1 = linear1.packed_weight(), w2 = linear2.packed_weight();
  constexpr int64_t kRows = 48;  // whole register blocks; ran 3-6% faster than 24, 36, 60 or 96 (d 512, d_ff 2048)
  const int64_t tasks = (rows + kRows - 1) / kRows;
  const int team = team_for(tasks, 4.0 * double(rows) * double(I) * double(F));
  const std::shared_ptr<float> hidden = ScratchPool::get(team * kRows * F);  // [team][kRows, F]
  std::atomic<int64_t> next{0};
  ParallelErrors errors;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    float* h = hidden.get() + omp_get_thread_num() * kRows * F;
    for (int64_t t; (t = next.fetch_add(1, std::memory_order_relaxed)) < tasks;)
      errors.run([&] {
        const int64_t r0 = t * kRows, n = std::min(kRows, rows - r0);
        linear1.apply_packed(*w1, x + r0 * I, n, h, true, nullptr);                              // relu(x W1^T + b1)
        linear2.apply_packed(*w2, h, n, y + r0 * O, false, add ? add + r0 * O : nullptr);  // add + h W2^T + b2
      });
  }
  errors.rethrow();
}

std::vector<Parameter*> Linear::named_parameters() {
  if (has_bias_) return {&weight, &bias};
  return {&weight};
}

void Linear::load(const io::Value& bundle) { load_parameters(*this, bundle, what_); }

}  // namespace attnkit::nn
