// Internal (include from ops/quantized*.cpp only): the loop every lower-precision kernel runs its register
// tiles in. Rows in chunks whose activations stay in L2, blocks of 16 output channels in groups whose weights
// stay in L1 / L2 while every row of the chunk passes over them (one row, decoding: the weights stream once);
// inside, tiles of R rows and B blocks: tile(std::integral_constant<int, R>, std::integral_constant<int, B>,
// first row, first block), R = RMain and B = BFor(R) where they fit, then smaller.
#pragma once
#include <algorithm>
#include <cstdint>
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

}  // namespace attnkit::ops::detail
