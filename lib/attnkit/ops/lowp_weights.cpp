#include "attnkit/ops/lowp_weights.hpp"

#include <cmath>

#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {

Precision precision_from_name(std::string_view name) {
  const std::optional<Precision> p = parse_name(kPrecisionNames, name);
  AK_CHECK(p.has_value(), "unknown precision \"{}\" (expected {})", name, names_or(kPrecisionNames));
  return *p;
}

std::string_view precision_name(Precision precision) { return name_of(kPrecisionNames, precision); }

LowpWeights make_lowp_weights(const float* W, int64_t out, int64_t in, Precision precision, std::string_view what) {
  AK_CHECK(precision != Precision::Fp32, "{}: float32 weights need no lower-precision copy", what);
  for (int64_t i = 0; i < out * in; ++i)
    AK_CHECK(std::isfinite(W[i]), "{}: weight [{}, {}] is {}; it cannot be held in {}", what, i / in, i % in, W[i],
             precision_name(precision));
  LowpWeights w;
  w.precision = precision, w.out = out, w.in = in;
  if (precision == Precision::Int8)
    w.q8 = quantize_q8(W, out, in);
  else
    w.bf16 = quantize_bf16(W, out, in);
  return w;
}

void lowp_linear(const LowpWeights& w, const float* x, int64_t rows, int64_t ldx, const float* b, float* y,
                 int64_t ldy) {
  if (w.precision == Precision::Int8)
    q8_linear(w.q8, x, rows, ldx, b, y, ldy);
  else
    bf16_linear(w.bf16, x, rows, ldx, b, y, ldy);
}

}  // namespace attnkit::ops
