#include <algorithm>
#include <unordered_map>

#include "attnkit/autograd/var.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::autograd {
namespace {

struct Node {
  const char* name;
  std::vector<std::shared_ptr<VarImpl>> inputs;  // kept alive: their values may be saved activations
  std::vector<std::shared_ptr<VarImpl>> outputs;  // kept too: a consumer node that ran first may have
                                                 // held the only other reference
  BackwardFn backward;
};

thread_local std::vector<Node> t_tape;
thread_local bool t_grad_enabled = true;

}  // namespace

Tensor& VarImpl::grad_buffer() {
  if (param) return param->grad_buffer();
  if (grad.shape() != value.shape()) grad = Tensor(value.shape());
  return grad;
}

Var::Var(Tensor value, bool requires_grad) : impl_(std::make_shared<VarImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
}

Var Var::param(Parameter& p) {
  Var v;
  v.impl_ = std::make_shared<VarImpl>();
  v.impl_->param = &p;
  v.impl_->requires_grad = true;
  return v;
}

void Var::zero_grad() {
  if (!impl_) return;
  Tensor& g = impl_->param ? impl_->param->grad : impl_->grad;
  std::fill(g.values().begin(), g.values().end(), 0.0f);
}

void accumulate(Tensor& dst, const Tensor& src) {
  AK_CHECK(dst.numel() == src.numel(), "autograd: gradient {} does not fit {}", src.shape_str(), dst.shape_str());
  float* d = dst.data();
  const float* s = src.data();
  for (int64_t i = 0, n = dst.numel(); i < n; ++i) d[i] += s[i];
}

std::vector<Var> record(const char* name, const std::vector<Var>& inputs, std::vector<Tensor> outputs,
                        BackwardFn backward) {
  bool needs = false;
  if (t_grad_enabled)
    for (const Var& v : inputs) needs = needs || v.requires_grad();
  std::vector<Var> out;
  out.reserve(outputs.size());
  for (Tensor& t : outputs) {
    Var v(std::move(t), needs);
    v.impl()->leaf = !needs;
    out.push_back(std::move(v));
  }
  if (!needs) return out;
  Node node{name, {}, {}, std::move(backward)};
  for (const Var& v : inputs) node.inputs.push_back(v.impl());
  for (const Var& v : out) node.outputs.push_back(v.impl());
  t_tape.push_back(std::move(node));
  return out;
}

Var record(const char* name, const std::vector<Var>& inputs, Tensor output, BackwardFn backward) {
  std::vector<Tensor> outs;
  outs.push_back(std::move(output));
  return std::move(record(name, inputs, std::move(outs), std::move(backward))[0]);
}

void backward(const std::vector<Var>& roots, const std::vector<Tensor>& grads) {
  AK_CHECK(roots.size() == grads.size(), "backward: {} roots and {} gradients", roots.size(), grads.size());
  std::vector<Node> tape;
  tape.swap(t_tape);  // the pass owns the tape; whatever happens, this thread's tape ends empty
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].requires_grad()) continue;
    AK_CHECK(grads[i].shape() == roots[i].shape(), "backward: gradient has shape {}, expected {} like its output",
             grads[i].shape_str(), roots[i].value().shape_str());
    accumulate(roots[i].impl()->grad_buffer(), grads[i]);
  }
  std::vector<const Tensor*> out_grads;
  std::vector<Tensor*> in_grads;
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) {
    Node& node = *it;
    out_grads.clear();
    bool any = false;
    for (auto& o : node.outputs) {
      const Tensor* g = !o->grad.empty() ? &o->grad : nullptr;
      any = any || g;
      out_grads.push_back(g);
    }
    if (any) {
      in_grads.clear();
      for (auto& in : node.inputs) in_grads.push_back(in && in->requires_grad ? &in->grad_buffer() : nullptr);
      node.backward(out_grads, in_grads);
    }
    for (auto& o : node.outputs) o->grad = Tensor();  // an intermediate gradient is used once
    node = Node{};  // frees the saved activations now, not at the end of the pass
  }
}

void backward(const Var& root, const Tensor* grad) {
  AK_CHECK(root.defined(), "backward: the root is undefined");
  if (grad) return backward(std::vector<Var>{root}, std::vector<Tensor>{*grad});
  AK_CHECK(root.value().numel() == 1,
           "backward: the root has shape {}; give its gradient, or reduce it to one element first",
           root.value().shape_str());
  backward(std::vector<Var>{root}, std::vector<Tensor>{Tensor::filled(root.shape(), 1.0f)});
}

NoGrad::NoGrad() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGrad::~NoGrad() { t_grad_enabled = previous_; }
bool grad_enabled() { return t_grad_enabled; }
size_t tape_size() { return t_tape.size(); }
void clear_tape() { t_tape.clear(); }

}  // namespace attnkit::autograd
