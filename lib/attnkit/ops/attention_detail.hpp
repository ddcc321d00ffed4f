// Internal (include from .cpp files only): what the attention kernels' sources (ops/attention*.cpp) share:
// the masks as the kernels apply them, and the score-kind entries' checked sizes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>

#include "attnkit/ops/attention.hpp"
#include "attnkit/ops/attention_scores.hpp"

namespace attnkit::ops::detail {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Keys [0, limit) pass the causal and key-length masks for query t of batch element n.
inline int64_t row_limit(const SdpaProblem& p, int64_t n, int64_t t) {
  int64_t lim = p.S;
  if (!p.mask) return lim;
  if (p.mask->causal == CausalKind::UpperLeft) lim = std::min(lim, t + 1);
  if (p.mask->causal == CausalKind::LowerRight) lim = std::min(lim, t + (p.S - p.T) + 1);
  if (!p.mask->key_lengths.empty()) lim = std::min(lim, p.mask->key_lengths[static_cast<size_t>(n)]);
  return std::max<int64_t>(lim, 0);
}

// The explicit mask's row [S] for (n, h, t), or null.
inline const float* mask_row(const SdpaProblem& p, int64_t n, int64_t h, int64_t t) {
  if (!p.mask || p.mask->mask.empty()) return nullptr;
  const Tensor& m = p.mask->mask;
  const int64_t TS = p.T * p.S;
  switch (m.rank()) {
    case 2: return m.data() + t * p.S;
    case 3: return m.data() + n * TS + t * p.S;
    default: return m.data() + (n * p.NH + h) * TS + t * p.S;
  }
}

// Sets masked entries of a score row (keys s0 .. s0+len) to -inf.
inline void mask_scores(float* e, int64_t s0, int64_t len, int64_t limit, const float* mrow) {
  for (int64_t c = std::max<int64_t>(limit - s0, 0); c < len; ++c) e[c] = kNegInf;
  if (mrow)
    for (int64_t c = 0; c < std::min(len, limit - s0); ++c)
      if (mrow[s0 + c] == 0.0f) e[c] = kNegInf;
}

// Multiply-adds of the two products (Q K^T, P V), times 2: what decides whether a team pays.
inline double sdpa_flops(const SdpaProblem& p) { return 2.0 * p.N * p.NH * p.T * p.S * (p.Dk + p.Dv); }

// ---- the score-kind entries (ops/attention_scores.cpp; attention_forward_naive reads them too) ----
struct Dims : QkvDims {
  int64_t Dq = 0, Dk = 0, Dv = 0;
};
// Checks query, keys, values and the options' weights and mask; throws attnkit::Error naming shapes.
Dims check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o);
// The problem over [N, T, D] contiguous buffers.
SdpaProblem make_problem(const Dims& d, const float* q, int64_t dq, const float* k, const float* v, float* out,
                         const MaskSpec& mask, float scale);
// The result's tensors reshaped to the inputs' rank.
AttentionResult shaped(AttentionResult r, const Dims& d);

}  // namespace attnkit::ops::detail
