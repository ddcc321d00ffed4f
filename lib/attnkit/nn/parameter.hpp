// nn::Module: anything with parameters (Parameter, DerivedSlot: tensor/parameter.hpp).
#pragma once
#include <vector>

#include "attnkit/tensor/parameter.hpp"

namespace attnkit::nn {

// Anything with parameters. Pointers stay valid as long as the module lives and is not moved.
class Module {
 public:
  virtual ~Module() = default;
  virtual std::vector<Parameter*> named_parameters() = 0;
  std::vector<const Parameter*> named_parameters() const {
    std::vector<const Parameter*> out;
    for (Parameter* p : const_cast<Module*>(this)->named_parameters()) out.push_back(p);
    return out;
  }
  void zero_grad() {
    for (Parameter* p : named_parameters()) p->zero_grad();
  }
};

}  // namespace attnkit::nn
