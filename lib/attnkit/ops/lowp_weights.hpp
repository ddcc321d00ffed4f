// A linear layer's weights in lower precision, for inference: what a layer holds beside its float32 weights once
// a precision is chosen (nn/precision.hpp), and the one product every layer calls with them.
//   y [rows, O] (row stride ldy) = x [rows, I] (row stride ldx) W^T + b
// int8: W symmetric per output channel, x quantized per row as it is multiplied (ops::q8_linear); bf16: W rounded
// to bfloat16, x and the sums float32 (ops::bf16_linear). Everything after the product (bias, activation,
// residual, softmax, norms) stays float32. The kernels are chosen at run time (ops/quantized.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "attnkit/ops/quantized.hpp"
#include "attnkit/tensor/enum_names.hpp"

namespace attnkit::ops {

enum class Precision { Fp32, Bf16, Int8 };
inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::Fp32, "fp32"}, {Precision::Bf16, "bf16"}, {Precision::Int8, "int8"}};
// "fp32", "bf16", "int8" -> Precision; anything else is an attnkit::Error listing them.
Precision precision_from_name(std::string_view name);
std::string_view precision_name(Precision precision);

struct LowpWeights {
  Precision precision = Precision::Int8;  // Int8 or Bf16
  Q8Matrix q8;                            // int8
  Bf16Matrix bf16;                        // bf16
  int64_t out = 0, in = 0;                // O, I
  int64_t bytes() const { return precision == Precision::Int8 ? q8.bytes() : bf16.bytes(); }
};

// W [O, I] row-major (nn.Linear's layout) in `precision` (Int8 or Bf16; a NaN or infinity is refused, naming
// `what`).
LowpWeights make_lowp_weights(const float* W, int64_t out, int64_t in, Precision precision, std::string_view what);

// From stored values (a quantized checkpoint), taken as they are: int8 q [O, I] row-major with a scale per row
// s [O], or bfloat16 bits [O, I]. Refused (naming `what`): sizes that disagree, -128, a scale that is not finite
// or negative, a scale of 0 over a row that is not all zeros, a bfloat16 NaN or infinity.
LowpWeights lowp_from_q8(std::vector<int8_t> q, std::vector<float> scale, int64_t out, int64_t in,
                         std::string_view what);
LowpWeights lowp_from_bf16(std::vector<uint16_t> w, int64_t out, int64_t in, std::string_view what);
// The rows `rows` of w, in that order, each with its own values and scale: [rows.size(), I]. Quantization is per
// row, so this equals lowering the same rows of the float32 matrix.
LowpWeights lowp_rows(const LowpWeights& w, const std::vector<int64_t>& rows);
// W [O, I] in float32 (O*I floats at W): int8 q[o, i] * s[o], bfloat16 widened.
void dequantize(const LowpWeights& w, float* W);

// y [rows, O] (stride ldy) = x [rows, I] (stride ldx) W^T + b (b [O] or null). Threads: the kernels' policy.
void lowp_linear(const LowpWeights& w, const float* x, int64_t rows, int64_t ldx, const float* b, float* y,
                 int64_t ldy);

}  // namespace attnkit::ops
