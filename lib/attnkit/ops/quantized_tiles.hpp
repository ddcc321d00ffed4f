// Internal (include from ops/quantized*.cpp only): the loop every lower-precision kernel runs its register
// tiles in. Rows in chunks whose activations stay in L2, blocks of 16 output channels in groups whose weights
// stay in L1 / L2 while every row of the chunk passes over them (one row, decoding: the weights stream once);
// inside, tiles of R rows and B blocks: tile(std::integral_constant<int, R>, std::integral_constant<int, B>,
// first row, first block), R = RMain and B = BFor(R) where they fit, then smaller.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace attnkit::ops::detail {

constexpr int64_t kLowpRowChunk = 64;

template <int R, int B, typename Tile>
void lowp_row_tiles(int64_t i, int64_t g, int64_t g1, Tile& tile) {
  int64_t b = g;
  for (; b + B <= g1; b += B) tile(std::integral_constant<int, R>{}, std::integral_constant<int, B>{}, i, b);
  for (; b < g1; ++b) tile(std::integral_constant<int, R>{}, std::integral_constant<int, 1>{}, i, b);
}

template <int R, int (*BFor)(int), typename Tile>
void lowp_tail_rows(int64_t left, int64_t i, int64_t g, int64_t g1, Tile& tile) {
  if constexpr (R > 0) {
    if (left == R) return lowp_row_tiles<R, BFor(R)>(i, g, g1, tile);
    lowp_tail_rows<R - 1, BFor>(left, i, g, g1, tile);
  }
}

template <int RMain, int (*BFor)(int), typename Tile>
void lowp_tiles(int64_t m, int64_t b0, int64_t b1, int64_t group, Tile&& tile) {
  for (int64_t c0 = 0; c0 < m; c0 += kLowpRowChunk) {
    const int64_t c1 = std::min(m, c0 + kLowpRowChunk);
    for (int64_t g = b0; g < b1; g += group) {
      const int64_t g1 = std::min(b1, g + group);
      int64_t i = c0;
      for (; i + RMain <= c1; i += RMain) lowp_row_tiles<RMain, BFor(RMain)>(i, g, g1, tile);
      lowp_tail_rows<RMain - 1, BFor>(c1 - i, i, g, g1, tile);
    }
  }
}

// The packed weights interleave panels of kLowpPanel blocks (the last panel narrower: width(b)), so that a tile of
// up to kLowpPanel blocks reads one stream, not one per block: block b's step s (a group of 4 k for int8, one k for
// bfloat16; `step` elements each) is at panel_base(b) + (s width(b) + b % kLowpPanel) step. Tiles and threads'
// shares start at panel boundaries (lowp_group is a multiple of kLowpPanel; ops/quantized.cpp splits by panels).
constexpr int64_t kLowpPanel = 4;
inline int64_t lowp_panel_width(int64_t b, int64_t blocks) {
  return std::min(kLowpPanel, blocks - b / kLowpPanel * kLowpPanel);
}
// Element offset of block b's first step, and the stride from one step to the next (steps of `step` elements).
inline int64_t lowp_panel_offset(int64_t b, int64_t steps, int64_t step) {
  return (b / kLowpPanel * kLowpPanel * steps + b % kLowpPanel) * step;
}

// Groups of blocks whose weights (bytes_per_block each) fill about 32 KB, a multiple of kLowpPanel blocks.
inline int64_t lowp_group(int64_t bytes_per_block) {
  return std::max<int64_t>(kLowpPanel, 32768 / bytes_per_block / kLowpPanel * kLowpPanel);
}

// The activations' row quantization (ops/quantized.hpp), the parts every instruction set's version shares. A row
// of largest magnitude amax has the scale t = amax / 127 and is multiplied by 1 / t, or divided by t when that
// inverse is not finite (a row of subnormal values).
struct RowScale {
  float t = 0, inv = 0;
  bool divide = false;
};
inline RowScale row_scale(float amax) {
  RowScale r;
  r.t = amax / 127.0f;
  r.inv = r.t > 0 ? 1.0f / r.t : 0.0f;
  r.divide = !(r.inv <= std::numeric_limits<float>::max());
  return r;
}
// A row holding NaN or infinity: t = NaN (its products are NaN) and every byte `flip` (zero).
inline void unquantizable_row(int8_t* out, int64_t k4, float* t, int8_t flip) {
  *t = std::numeric_limits<float>::quiet_NaN();
  std::memset(out, flip, static_cast<size_t>(k4));
}
// One value: round to nearest (ties to even) of v / t, clamped to [-127, 127], xor flip.
inline int8_t quantize_value(float v, const RowScale& r, int8_t flip) {
  const float scaled = r.divide ? v / r.t : v * r.inv;
  return static_cast<int8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(scaled), -127.0f, 127.0f)) ^ flip);
}

}  // namespace attnkit::ops::detail
