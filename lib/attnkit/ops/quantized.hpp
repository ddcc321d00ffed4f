// Lower-precision weights for inference (docs/architecture.md, kernel families): y = x W^T + b with W [N, K]
// (nn.Linear's layout) held in int8 or bfloat16, x and y in float32.
//
// int8 (Q8Matrix): weights symmetric per output channel, s_n = max_k |W[n, k]| / 127, q[n, k] = round(W[n, k] / s_n)
// (nearest, ties to even) in [-127, 127]; activations quantized per row when multiplied, the same way
// (t_m = max_k |x[m, k]| / 127, a[m, k] in [-127, 127]). The integer part, acc[m, n] = sum_k a[m, k] q[n, k], is
// exact in int32 (|acc| <= K 127^2 < 2^31 for K < 133000) and the same from every kernel; then
// y[m, n] = float(acc[m, n]) * (t_m * s_n) + b[n].
// bfloat16 (Bf16Matrix): each weight rounded to bfloat16 (nearest, ties to even), products and sums in float32.
//
// Kernels, chosen at run time like the sgemm's (ops/gemm_kernels.hpp): a plain loop (Reference, any processor),
// AVX2 (vpmaddubsw on |a| and sign(a) q: no pair sum passes 2 127^2, so nothing saturates), AVX-512 VNNI
// (vpdpbusd on a + 128 as u8, minus 128 sum_k q[n, k]) for int8; AVX2 and AVX-512F widening bfloat16 to
// float32 in registers for bf16. Packed layouts: 16 output channels a block, int8 in groups of 4 along k
// (the VNNI operand), bf16 one k a row of 16.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace attnkit::ops {

enum class LowpKernel { Auto, Reference, Avx2, Avx512 };
// Whether this processor runs it (int8: AVX-512 needs VNNI and BW; bf16: AVX-512F); Auto and Reference always.
bool q8_kernel_available(LowpKernel kernel);
bool bf16_kernel_available(LowpKernel kernel);
LowpKernel q8_kernel_auto();
LowpKernel bf16_kernel_auto();
std::string_view lowp_kernel_name(LowpKernel kernel);  // "reference", "avx2", "avx512"

struct Q8Matrix {
  int64_t n = 0, k = 0;         // N, K
  int64_t k4 = 0;               // K rounded up to a multiple of 4 (zeros past K)
  std::vector<float> scale;     // s_n [N]
  std::vector<int8_t> q;        // q [N, K], row-major (what a checkpoint stores)
  std::vector<int8_t> packed;   // blocks of 16 channels x 4 k (64 bytes), panels interleaved (quantized_tiles.hpp)
  std::vector<int32_t> sums;    // sum_k q[n, k] [N16] (VNNI's offset)
  int64_t bytes() const { return static_cast<int64_t>(q.size() + scale.size() * sizeof(float)); }
};

// From float weights W [N, K] row-major; or from a stored q [N, K] and s [N] (a quantized checkpoint).
Q8Matrix quantize_q8(const float* w, int64_t n, int64_t k);
Q8Matrix q8_from_stored(std::vector<int8_t> q, std::vector<float> scale, int64_t n, int64_t k);

// y [M, N] (row stride ldy) = x [M, K] (row stride ldx) W^T + bias (bias may be null).
void q8_linear(const Q8Matrix& w, const float* x, int64_t m, int64_t ldx, const float* bias, float* y, int64_t ldy,
               LowpKernel kernel = LowpKernel::Auto);
// The integer part alone, for tests: acc [M, N] from activations a [M, k4] already quantized (zeros past K).
void q8_accumulate(const Q8Matrix& w, const int8_t* a, int64_t m, int32_t* acc, LowpKernel kernel);
// Row quantization of x [M, K] into a [M, k4] and t [M] (what q8_linear does first), by `kernel`'s instruction set
// (every one gives the same bytes; a row holding NaN or infinity gets t = NaN and zeros).
void q8_quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t k4, int8_t* a, float* t,
                      LowpKernel kernel = LowpKernel::Auto);

// Products a caller splits among its own team (each thread a share of the output channels, as the recurrent
// stack's lower-precision time loop does, its cell following on the same channels): the activations quantized
// once, then any run of whole panels of blocks on the calling thread. q8_prepare_rows writes x [M, K] as the
// kernel takes it into a [M, k4] (int8 storage) and t [M]; q8_linear_blocks computes the channels of blocks
// [b0, b1) (16 channels a block; b0 a multiple of q8_panel_blocks(), b1 too or the last block) of
// y = x W^T + bias, the same values as q8_linear's. Both with the same `kernel`.
int64_t lowp_panel_blocks();  // blocks in a panel of the packed weights
void q8_prepare_rows(const Q8Matrix& w, const float* x, int64_t m, int64_t ldx, int8_t* a, float* t,
                     LowpKernel kernel = LowpKernel::Auto);
void q8_linear_blocks(const Q8Matrix& w, const int8_t* a, const float* t, int64_t m, int64_t b0, int64_t b1,
                      const float* bias, float* y, int64_t ldy, LowpKernel kernel = LowpKernel::Auto);

struct Bf16Matrix {
  int64_t n = 0, k = 0;
  std::vector<uint16_t> w;       // [N, K] row-major bfloat16 bits
  std::vector<uint16_t> packed;  // blocks of 16 channels x 1 k, panels interleaved (quantized_tiles.hpp)
  int64_t bytes() const { return static_cast<int64_t>(w.size() * sizeof(uint16_t)); }
};

uint16_t to_bf16(float x);    // nearest, ties to even (x finite)
float from_bf16(uint16_t b);
Bf16Matrix quantize_bf16(const float* w, int64_t n, int64_t k);
Bf16Matrix bf16_from_stored(std::vector<uint16_t> w, int64_t n, int64_t k);
void bf16_linear(const Bf16Matrix& w, const float* x, int64_t m, int64_t ldx, const float* bias, float* y, int64_t ldy,
                 LowpKernel kernel = LowpKernel::Auto);

// The bfloat16 product's channels of blocks [b0, b1) on the calling thread (as q8_linear_blocks; no bias).
void bf16_linear_blocks(const Bf16Matrix& w, const float* x, int64_t m, int64_t ldx, int64_t b0, int64_t b1,
                        float* y, int64_t ldy, LowpKernel kernel = LowpKernel::Auto);

namespace detail {
// Where the int8 sums go: with y null, acc [M, n16] (the integer sums); else the float results, in the tile that
// made them, y[i, r] = fma(float(acc), t[i] s[r], bias[r]) (without bias: float(acc) (t[i] s[r])) for r < n.
struct Q8Out {
  int32_t* acc = nullptr;
  int64_t n16 = 0;
  const float* t = nullptr;      // x's scale per row [M]
  const float* scale = nullptr;  // W's scale per channel [N]
  const float* bias = nullptr;   // [N] or null
  float* y = nullptr;
  int64_t ldy = 0, n = 0;
};

// One thread's share, blocks [b0, b1) of 16 output channels, by one instruction set's kernel (the same entries
// in each namespace): int8 into `out`; bf16 into y [M, ldy] for columns < n. q8_quantize_rows: as the plain loop
// of ops/quantized.cpp (quantize_rows), each byte xor `flip`. The AVX-512 int8 kernel takes the
// activations as unsigned bytes a + 128 (a ^ 0x80: vpdpbusd multiplies u8 by s8), the others as they are.
#define ATTNKIT_LOWP_KERNEL_ENTRIES                                                                                 \
  void q8_blocks(const int8_t* packed, const int32_t* sums, int64_t k4, const int8_t* a, int64_t m, int64_t b0, \
                 int64_t b1, const Q8Out& out);                                                                  \
  void bf16_blocks(const uint16_t* packed, int64_t k, int64_t n, const float* x, int64_t m, int64_t ldx,        \
                   int64_t b0, int64_t b1, float* y, int64_t ldy);                                              \
  void q8_quantize_rows(const float* x, int64_t m, int64_t k, int64_t ldx, int64_t k4, int8_t* a, float* t,    \
                        int8_t flip);
namespace lowp_avx2 {
ATTNKIT_LOWP_KERNEL_ENTRIES
}
namespace lowp_avx512 {
ATTNKIT_LOWP_KERNEL_ENTRIES
}
#undef ATTNKIT_LOWP_KERNEL_ENTRIES
}  // namespace detail

}  // namespace attnkit::ops
