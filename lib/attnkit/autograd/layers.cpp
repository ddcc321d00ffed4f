#include "attnkit/autograd/layers.hpp"

#include <memory>
#include <string>

#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::autograd {
namespace {

const Tensor kNone;  // an absent weight or bias

const Tensor& value_or_none(const Var& v) { return v.defined() ? v.value() : kNone; }

// A node whose backward reads the op's own output (softmax, log-softmax, relu): the closure holds a
// weak reference to the output, filled in once record() has made it. The node keeps its outputs
// alive until it has run, so the reference is valid whenever the closure runs; nothing is copied
// and no ownership cycle forms.
template <typename F>
Var record_reading_output(const char* name, const Var& x, Tensor y, F backward_with_output) {
  auto slot = std::make_shared<std::weak_ptr<VarImpl>>();
  Var out = record(name, {x}, std::move(y), [slot, backward_with_output](const auto& dy, const auto& dx) {
    if (!dx[0]) return;
    const std::shared_ptr<VarImpl> yi = slot->lock();
    backward_with_output(*dy[0], yi->val(), *dx[0]);
  });
  *slot = out.impl();
  return out;
}

}  // namespace

Var embedding(const Var& weight, std::vector<int64_t> ids, Shape ids_shape, const ops::EmbeddingOptions& options,
              const char* what) {
  Tensor y = ops::embedding_forward(ids, ids_shape, weight.value(), options, what);  // [..., E]
  return record("embedding", {weight}, std::move(y),
                [ids = std::move(ids), ids_shape = std::move(ids_shape), options, name = std::string(what)](
                    const auto& dy, const auto& dx) {
                  if (dx[0]) ops::embedding_backward(*dy[0], ids, ids_shape, *dx[0], options, name.c_str());
                });
}

Var embedding(const Var& weight, const Tensor& ids, const ops::EmbeddingOptions& options, const char* what) {
  return embedding(weight, ops::indices_from(ids, what, "ids"), ids.shape(), options, what);
}

Var layer_norm(const Var& x, const Var& weight, const Var& bias, float eps, const char* what) {
  ops::LayerNormStats stats;
  Tensor y = ops::layer_norm_forward(x.value(), value_or_none(weight), value_or_none(bias), eps,
                                     grad_enabled() ? &stats : nullptr, what);  // [..., E]
  return record("layer_norm", {x, weight, bias}, std::move(y),
                [xi = x.impl(), wi = weight.impl(), stats = std::move(stats), name = std::string(what)](
                    const auto& dy, const auto& dx) {
                  ops::layer_norm_backward(*dy[0], xi->val(), wi ? wi->val() : kNone, stats, dx[0], dx[1], dx[2],
                                           name.c_str());
                });
}

Var dropout(const Var& x, const ops::DropoutOptions& options, Rng& rng) {
  Tensor mask;
  Tensor y = ops::dropout_forward(x.value(), options, rng, &mask);
  return record("dropout", {x}, std::move(y), [mask = std::move(mask)](const auto& dy, const auto& dx) {
    if (dx[0]) ops::dropout_backward(*dy[0], mask, *dx[0]);
  });
}

Var relu(const Var& x) {
  return record_reading_output("relu", x, ops::relu_forward(x.value()),
                               [](const Tensor& dy, const Tensor& y, Tensor& dx) { ops::relu_backward(dy, y, dx); });
}

Var tanh(const Var& x) {
  return record_reading_output("tanh", x, ops::tanh_forward(x.value()),
                               [](const Tensor& dy, const Tensor& y, Tensor& dx) { ops::tanh_backward(dy, y, dx); });
}

Var gelu(const Var& x, ops::GeluApproximate approximate) {
  return record("gelu", {x}, ops::gelu_forward(x.value(), approximate),
                [xi = x.impl(), approximate](const auto& dy, const auto& dx) {
                  if (dx[0]) ops::gelu_backward(*dy[0], xi->val(), *dx[0], approximate);
                });
}

Var softmax(const Var& x) {
  return record_reading_output("softmax", x, ops::softmax_forward(x.value()),
                               [](const Tensor& dy, const Tensor& y, Tensor& dx) { ops::softmax_backward(dy, y, dx); });
}

Var log_softmax(const Var& x) {
  return record_reading_output(
      "log_softmax", x, ops::log_softmax_forward(x.value()),
      [](const Tensor& dy, const Tensor& y, Tensor& dx) { ops::log_softmax_backward(dy, y, dx); });
}

Var cross_entropy(const Var& logits, std::vector<int64_t> targets, const ops::CrossEntropyOptions& options) {
  ops::CrossEntropySaved saved;
  Tensor loss = ops::cross_entropy_forward(logits.value(), targets, options, &saved);
  return record("cross_entropy", {logits}, std::move(loss),
                [li = logits.impl(), targets = std::move(targets), options, saved = std::move(saved)](
                    const auto& dy, const auto& dx) {
                  if (dx[0]) ops::cross_entropy_backward(*dy[0], li->val(), targets, options, saved, *dx[0]);
                });
}

Var cross_entropy(const Var& logits, const Tensor& targets, const ops::CrossEntropyOptions& options) {
  const Shape& s = logits.shape();
  AK_CHECK(!s.empty() && targets.shape() == Shape(s.begin(), s.end() - 1),
           "cross_entropy: targets have shape {}, expected {} (logits {} without the class axis)", targets.shape_str(),
           s.empty() ? "?" : shape_str(Shape(s.begin(), s.end() - 1)), logits.value().shape_str());
  return cross_entropy(logits, ops::indices_from(targets, "cross_entropy", "targets"), options);
}

}  // namespace attnkit::autograd
