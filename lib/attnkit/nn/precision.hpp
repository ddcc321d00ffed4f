// The precision a model's weight matrices are multiplied in at inference (ops/lowp_weights.hpp), chosen per
// weight: one precision for the model, and patterns over the state_dict names of the weights to keep in float32
// (shell-style: `*` any characters, `?` one, `[...]` a class; "decoder.output.*", "*.linear2.weight").
// Layers ask the plan for each weight matrix they multiply by (for_weight), which counts what it decided; the
// caller reads the summary and refuses patterns that matched nothing (a misspelt name changes nothing).
// Biases, embeddings, norms and everything after a product stay float32.
// A plan may also hold copies read from a quantized checkpoint (models/quantized_checkpoint.hpp): a layer whose
// weight the plan lowers to a stored copy's precision takes that copy as it is (stored()) instead of lowering its
// float32 values, so that the products are those of the run that saved it.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnkit/ops/lowp_weights.hpp"

namespace attnkit::nn {

class PrecisionPlan {
 public:
  explicit PrecisionPlan(ops::Precision precision = ops::Precision::Fp32, std::vector<std::string> keep_fp32 = {});

  ops::Precision precision() const { return precision_; }
  // The precision of the weight matrix `name` [out, in]: float32 when a keep pattern matches the name (the
  // pattern is then used), else precision(). Counted in the summary. `float_too`: the model also reads the
  // float32 values as they are (a tied embedding's lookup), so a quantized checkpoint keeps them as well.
  ops::Precision for_weight(const std::string& name, int64_t out, int64_t in, bool float_too = false);

  // What for_weight decided, in order: the weights a quantized checkpoint stores in lower precision.
  struct Decision {
    std::string name;
    int64_t out = 0, in = 0;
    ops::Precision precision = ops::Precision::Fp32;
    bool float_too = false;
  };
  const std::vector<Decision>& decisions() const { return decisions_; }

  // Stored copies by weight name ([out, in] as for_weight is asked, PyTorch's row order).
  void set_stored(std::map<std::string, ops::LowpWeights> stored) { stored_ = std::move(stored); }
  // The stored copy of `name` when `precision` (for_weight's answer) is its precision, else null. A copy whose
  // shape is not [out, in] is refused, naming the weight.
  const ops::LowpWeights* stored(const std::string& name, ops::Precision precision, int64_t out, int64_t in) const;

  // The keep patterns no weight name matched.
  std::vector<std::string> unmatched() const;
  // "int8: 26 weight matrices, 20.1 MB -> 5.0 MB; 2 kept in float32 (*.linear2.weight)", or for float32
  // "fp32: 26 weight matrices, 20.1 MB".
  std::string summary() const;
  const std::vector<std::string>& names() const { return names_; }  // the weights asked about, in order
  int64_t lowered() const { return lowered_; }  // matrices in precision() (not float32)
  int64_t kept() const { return kept_; }        // matrices kept in float32 by a pattern

 private:
  ops::Precision precision_;
  std::vector<std::string> keep_;
  std::vector<bool> used_;
  std::vector<std::string> names_;
  std::vector<Decision> decisions_;
  std::map<std::string, ops::LowpWeights> stored_;
  int64_t matrices_ = 0, lowered_ = 0, kept_ = 0;
  double fp32_bytes_ = 0, bytes_ = 0;  // all the matrices in float32; as they are held
};

}  // namespace attnkit::nn
