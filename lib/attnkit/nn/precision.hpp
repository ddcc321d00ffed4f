// The precision a model's weight matrices are multiplied in at inference (ops/lowp_weights.hpp), chosen per
// weight: one precision for the model, and patterns over the state_dict names of the weights to keep in float32
// (shell-style: `*` any characters, `?` one, `[...]` a class; "decoder.output.*", "*.linear2.weight").
// Layers ask the plan for each weight matrix they multiply by (for_weight), which counts what it decided; the
// caller reads the summary and refuses patterns that matched nothing (a misspelt name changes nothing).
// Biases, embeddings, norms and everything after a product stay float32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/ops/lowp_weights.hpp"

namespace attnkit::nn {

class PrecisionPlan {
 public:
  explicit PrecisionPlan(ops::Precision precision = ops::Precision::Fp32, std::vector<std::string> keep_fp32 = {});

  ops::Precision precision() const { return precision_; }
  // The precision of the weight matrix `name` [out, in]: float32 when a keep pattern matches the name (the
  // pattern is then used), else precision(). Counted in the summary.
  ops::Precision for_weight(const std::string& name, int64_t out, int64_t in);

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
  int64_t matrices_ = 0, lowered_ = 0, kept_ = 0;
  double fp32_bytes_ = 0, bytes_ = 0;  // all the matrices in float32; as they are held
};

}  // namespace attnkit::nn
