#include "attnkit/models/model.hpp"

#include "attnkit/tensor/error.hpp"

namespace attnkit::models {

void TranslationModel::set_precision(nn::PrecisionPlan& plan) {
  AK_CHECK(plan.precision() == ops::Precision::Fp32, "a {} model runs in fp32 only, not {}", family(),
           ops::precision_name(plan.precision()));
}

}  // namespace attnkit::models
