// Parameter: the one source of truth of a learned weight (docs/architecture.md).
//   name     its PyTorch state_dict name ("weight_ih_l0", "self_attn.in_proj_weight")
//   value    the weight, in PyTorch's layout
//   grad     d loss / d value, same shape; empty until a backward pass writes it
//   version  bumped by whoever changes `value` in place (optimizers, loaders): kernels that keep a
//            packed or blocked copy compare the version they packed against it and repack when it
//            differs, so a forward after an optimizer step never runs on stale weights.
// A layer lists its parameters in state_dict order (nn::Module::named_parameters()): optimizers,
// checkpoints and --save-weights walk that list. DerivedSlot: a kernel's packed copy of some of them.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit {

struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
  uint64_t version = 0;

  Parameter() = default;
  Parameter(std::string n, Tensor v) : name(std::move(n)), value(std::move(v)) {}

  // After changing `value` in place.
  void touch() { ++version; }
  // grad, allocated as zeros of value's shape on first use (backward kernels add into it).
  Tensor& grad_buffer() {
    if (grad.shape() != value.shape()) grad = Tensor(value.shape());
    return grad;
  }
  void zero_grad() {
    if (!grad.empty()) std::fill(grad.values().begin(), grad.values().end(), 0.0f);
  }
};

// A copy of some parameters that a kernel derives from them (packed or blocked), rebuilt when one of
// them changed: its key is each parameter's data pointer, size and version. Copying or assigning the
// owner leaves the copy's slot empty (it derives its own on first use). Thread-safe: get() hands out
// a snapshot that stays valid while another thread rebuilds the slot.
template <class T>
class DerivedSlot {
 public:
  DerivedSlot() = default;
  DerivedSlot(const DerivedSlot&) {}
  DerivedSlot& operator=(const DerivedSlot&) {
    std::lock_guard<std::mutex> lock(mutex_);
    value_.reset(), key_.clear();
    return *this;
  }
  // The derived copy of `from`, built by build() (returning a T) when the slot is empty or stale.
  template <class Build>
  std::shared_ptr<const T> get(const std::vector<const Parameter*>& from, Build build) const {
    std::vector<std::tuple<const float*, int64_t, uint64_t>> key;
    for (const Parameter* p : from) key.emplace_back(p->value.data(), p->value.numel(), p->version);
    std::lock_guard<std::mutex> lock(mutex_);
    if (!value_ || key != key_) value_ = std::make_shared<const T>(build()), key_ = std::move(key);
    return value_;
  }

 private:
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const T> value_;
  mutable std::vector<std::tuple<const float*, int64_t, uint64_t>> key_;
};

}  // namespace attnkit
