#include "attnkit/nn/precision.hpp"

#include <fnmatch.h>

#include <fmt/format.h>

#include "attnkit/tensor/error.hpp"

namespace attnkit::nn {

PrecisionPlan::PrecisionPlan(ops::Precision precision, std::vector<std::string> keep_fp32)
    : precision_(precision), keep_(std::move(keep_fp32)), used_(keep_.size(), false) {
  for (const std::string& p : keep_) AK_CHECK(!p.empty(), "a keep-in-float32 pattern is empty");
}

ops::Precision PrecisionPlan::for_weight(const std::string& name, int64_t out, int64_t in, bool float_too) {
  bool keep = false;
  for (size_t i = 0; i < keep_.size(); ++i)
    if (fnmatch(keep_[i].c_str(), name.c_str(), 0) == 0) keep = true, used_[i] = true;
  const double n = double(out) * double(in);
  ++matrices_;
  names_.push_back(name);
  fp32_bytes_ += 4 * n;
  if (keep || precision_ == ops::Precision::Fp32) {
    kept_ += keep;
    bytes_ += 4 * n;
    decisions_.push_back({name, out, in, ops::Precision::Fp32, float_too});
    return ops::Precision::Fp32;
  }
  ++lowered_;
  bytes_ += precision_ == ops::Precision::Int8 ? n + 4.0 * double(out) : 2 * n;  // int8: + a scale per row
  decisions_.push_back({name, out, in, precision_, float_too});
  return precision_;
}

const ops::LowpWeights* PrecisionPlan::stored(const std::string& name, ops::Precision precision, int64_t out,
                                              int64_t in) const {
  const auto it = stored_.find(name);
  if (precision == ops::Precision::Fp32 || it == stored_.end() || it->second.precision != precision) return nullptr;
  AK_CHECK(it->second.out == out && it->second.in == in, "{}: stored in {} as [{}, {}], but the model multiplies by "
           "[{}, {}]", name, ops::precision_name(precision), it->second.out, it->second.in, out, in);
  return &it->second;
}

std::vector<std::string> PrecisionPlan::unmatched() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < keep_.size(); ++i)
    if (!used_[i]) out.push_back(keep_[i]);
  return out;
}

std::string PrecisionPlan::summary() const {
  std::string s = fmt::format("{}: {} weight matrices", ops::precision_name(precision_), matrices_);
  if (precision_ == ops::Precision::Fp32) return s + fmt::format(", {:.1f} MB", fp32_bytes_ / 1e6);
  s += fmt::format(", {:.1f} MB -> {:.1f} MB", fp32_bytes_ / 1e6, bytes_ / 1e6);
  if (kept_ > 0) {
    std::string patterns;
    for (size_t i = 0; i < keep_.size(); ++i)
      if (used_[i]) patterns += (patterns.empty() ? "" : ", ") + keep_[i];
    s += fmt::format("; {} kept in float32 ({})", kept_, patterns);
  }
  return s;
}

}  // namespace attnkit::nn
