#include "attnkit/ops/lowp_weights.hpp"

#include <algorithm>
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

LowpWeights lowp_from_q8(std::vector<int8_t> q, std::vector<float> scale, int64_t out, int64_t in,
                         std::string_view what) {
  AK_CHECK(static_cast<int64_t>(scale.size()) == out, "{}: {} scales for {} output channels", what, scale.size(), out);
  for (int64_t o = 0; o < out; ++o) {
    const float s = scale[size_t(o)];
    AK_CHECK(std::isfinite(s) && s >= 0, "{}: scale [{}] is {} (a scale is finite and >= 0)", what, o, s);
    if (s == 0 && static_cast<int64_t>(q.size()) == out * in)  // a row of zeros has scale 0, and only such a row
      for (int64_t i = 0; i < in; ++i)
        AK_CHECK(q[size_t(o * in + i)] == 0, "{}: scale [{}] is 0 but row {} holds {} at [{}]", what, o, o,
                 q[size_t(o * in + i)], i);
  }
  LowpWeights w;
  w.precision = Precision::Int8, w.out = out, w.in = in;
  try {
    w.q8 = q8_from_stored(std::move(q), std::move(scale), out, in);
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
  return w;
}

LowpWeights lowp_from_bf16(std::vector<uint16_t> bits, int64_t out, int64_t in, std::string_view what) {
  LowpWeights w;
  w.precision = Precision::Bf16, w.out = out, w.in = in;
  try {
    w.bf16 = bf16_from_stored(std::move(bits), out, in);
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
  return w;
}

LowpWeights lowp_rows(const LowpWeights& w, const std::vector<int64_t>& rows) {
  const int64_t I = w.in, R = static_cast<int64_t>(rows.size());
  for (int64_t r : rows) AK_ASSERT(r >= 0 && r < w.out, "lowp_rows: row {} of {}", r, w.out);
  if (w.precision == Precision::Int8) {
    std::vector<int8_t> q(static_cast<size_t>(R * I));
    std::vector<float> scale(static_cast<size_t>(R));
    for (int64_t j = 0; j < R; ++j) {
      const int64_t r = rows[size_t(j)];
      std::copy_n(w.q8.q.begin() + r * I, I, q.begin() + j * I);
      scale[size_t(j)] = w.q8.scale[size_t(r)];
    }
    return lowp_from_q8(std::move(q), std::move(scale), R, I, "lowp_rows");
  }
  std::vector<uint16_t> bits(static_cast<size_t>(R * I));
  for (int64_t j = 0; j < R; ++j) std::copy_n(w.bf16.w.begin() + rows[size_t(j)] * I, I, bits.begin() + j * I);
  return lowp_from_bf16(std::move(bits), R, I, "lowp_rows");
}

void dequantize(const LowpWeights& w, float* W) {
  const int64_t n = w.out * w.in;
  if (w.precision == Precision::Int8) {
    for (int64_t i = 0; i < n; ++i) W[i] = float(w.q8.q[size_t(i)]) * w.q8.scale[size_t(i / w.in)];
  } else {
    for (int64_t i = 0; i < n; ++i) W[i] = from_bf16(w.bf16.w[size_t(i)]);
  }
}

void lowp_linear(const LowpWeights& w, const float* x, int64_t rows, int64_t ldx, const float* b, float* y,
                 int64_t ldy) {
  if (w.precision == Precision::Int8)
    q8_linear(w.q8, x, rows, ldx, b, y, ldy);
  else
    bf16_linear(w.bf16, x, rows, ldx, b, y, ldy);
}

}  // namespace attnkit::ops
