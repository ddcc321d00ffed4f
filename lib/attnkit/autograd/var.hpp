// Reverse-mode autodiff: Var, the tape, backward(), NoGrad.
//
// A Var is a tensor that may take part in a backward pass. Every differentiable op is a fused
// kernel pair (ops/: x_forward beside x_backward); its autograd wrapper runs the forward and, when
// recording, pushes one node onto this thread's tape: the inputs, the outputs and a closure that
// holds what backward needs (saved activations) and calls the backward kernel.
//
//   Var x(Tensor(...), /*requires_grad=*/true);
//   Var w = Var::param(layer.weight);              // a leaf bound to a Parameter: grads land there
//   Var y = autograd::linear(x, w, b);             // recorded
//   autograd::backward(autograd::sum(y));          // d sum / d x in x.grad(), d / d W in weight.grad
//
// backward() walks the tape from the newest node to the oldest (creation order is a topological
// order), so it is iterative: an unrolled RNN thousands of nodes deep needs no recursion. Leaf
// gradients accumulate (+=) across passes until zero_grad; each node's closure, and with it its
// saved activations, is freed as soon as the node has run; intermediate gradients are freed after
// their node ran; the tape is empty afterwards. Under a NoGrad guard nothing is recorded:
// inference runs the same layer code at no cost.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/tensor/parameter.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::autograd {

struct VarImpl {
  Tensor value;
  Tensor grad;                     // empty until a backward pass adds into it
  bool requires_grad = false;
  Parameter* param = nullptr;  // a leaf bound to a parameter: value and grad live there
  bool leaf = true;

  const Tensor& val() const { return param ? param->value : value; }
  Tensor& grad_buffer();  // zeros of the value's shape on first use
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false);
  // A leaf bound to `p` (not copied): its gradient accumulates into p.grad.
  static Var param(Parameter& p);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->val(); }
  const Shape& shape() const { return value().shape(); }
  // The accumulated gradient (empty before any backward pass reached this Var). For a Var made
  // by an op it is freed once the pass has used it; leaves keep theirs.
  const Tensor& grad() const { return impl_->param ? impl_->param->grad : impl_->grad; }
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  void zero_grad();

  const std::shared_ptr<VarImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<VarImpl> impl_;
};

// Called by backward with one gradient per output (nullptr: that output received none, i.e. zero)
// and one buffer per input (nullptr: that input needs none). It adds into the buffers.
using BackwardFn = std::function<void(const std::vector<const Tensor*>& out_grads, const std::vector<Tensor*>& in_grads)>;

// Wraps the outputs of an op whose forward has already run. When recording is on and an input
// requires grad, the outputs require grad and one node (`name`, the inputs, `backward`) goes on the
// tape; otherwise `backward` is dropped at once. Undefined inputs (an absent bias) are allowed.
std::vector<Var> record(const char* name, const std::vector<Var>& inputs, std::vector<Tensor> outputs, BackwardFn backward);
Var record(const char* name, const std::vector<Var>& inputs, Tensor output, BackwardFn backward);

// Back-propagates from `root`: its gradient is `grad` (same shape), or 1 when root has one element.
// Then empties this thread's tape.
void backward(const Var& root, const Tensor* grad = nullptr);
// Back-propagates from several roots at once (a bundle of outputs with upstream gradients).
void backward(const std::vector<Var>& roots, const std::vector<Tensor>& grads);

// While one lives, nothing is recorded on this thread.
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};
bool grad_enabled();

size_t tape_size();   // nodes recorded on this thread and not yet run
void clear_tape();    // drops them (and their saved activations) without a backward pass

// Adds `src` into `dst` (same numel), the accumulation every backward closure does.
void accumulate(Tensor& dst, const Tensor& src);

}  // namespace attnkit::autograd
