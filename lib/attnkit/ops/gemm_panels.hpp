// The GEMM's panel level (internal: include from .cpp files only; the kernels' packing, which may change
// with any release): operands packed into the kernel's panels and products on blocks of them, for the
// kernels built on ops::gemm (attention's tiles, the recurrent stack, the multi-head attention stages).
#pragma once
#include <cstdint>

#include "attnkit/ops/matmul.hpp"

namespace attnkit::ops {

// Operands packed once into the kernel's panels for many products on blocks of them: attention's
// tiles, where a head's K^T serves every query tile and a query tile every key tile (packing them
// per product would repeat the same copy many times). On this thread:
//   C [M, N] = alpha * A [M, K] * B [K, N] + beta * C   from pa = pack_a_panels(op(A)), pb = pack_b_panels(op(B))
// A block of rows [i0, ..) is pa + i0 * K (i0 a multiple of mr), of columns [j0, ..) pb + j0 * K (j0 a
// multiple of nr). Only where gemm_panel_shape().mr > 0 (the own kernels, not Eigen's) and K <=
// max_depth (one K block: the same bits as ops::gemm's register blocks on the same operands).
struct PanelShape {
  int64_t mr = 0, nr = 0, max_depth = 0;
  int64_t max_width = 0;  // the most columns a GemmPackedB holds in one block (see GemmPackedB::panels)
};
PanelShape gemm_panel_shape();
// Floats of the panels of `rows` rows (or columns) in panels of `panel`: ceil(rows / panel) * panel * K.
inline int64_t panels_size(int64_t rows, int64_t K, int64_t panel) { return (rows + panel - 1) / panel * panel * K; }
// RowBlocks::Balanced: A's M rows in ceil(M / mr) near-equal blocks (64 rows: 11, 11, 11, 11, 10, 10)
// instead of mr-row panels and a short last one (12 x 5 + 4: a 4-row block wastes most of the register block);
// such panels serve products of all M rows only (no block [i0, ..) of them), packed and multiplied alike.
// The bits are the same either way.
enum class RowBlocks { Panels, Balanced };
// The first row of block i of M rows in RowBlocks::Balanced blocks of at most mr rows (block i holds rows
// [balanced_block_start(M, mr, i), balanced_block_start(M, mr, i + 1)); the longer blocks first). Block i's
// panel starts at i * mr * K. A run of consecutive blocks, taken as rows of their own, splits into the same blocks.
inline int64_t balanced_block_start(int64_t M, int64_t mr, int64_t i) {
  const int64_t P = (M + mr - 1) / mr, base = M / P, extra = M % P;
  return i * base + (i < extra ? i : extra);
}
void pack_a_panels(Trans ta, int64_t M, int64_t K, const float* A, int64_t lda, float* dst,
                   RowBlocks blocks = RowBlocks::Panels);
void pack_b_panels(Trans tb, int64_t K, int64_t N, const float* B, int64_t ldb, float* dst);
void gemm_panels(int64_t M, int64_t N, int64_t K, float alpha, const float* pa, const float* pb, float beta, float* C,
                 int64_t ldc, RowBlocks blocks = RowBlocks::Panels);
// The same with B as bfloat16 pair panels (GemmPackedB::pairs, packed under MatmulPrecision::BFloat16): A's panels
// rounded to bfloat16 too, the products added in float32 (ops::MatmulPrecision).
void gemm_panels_pairs(int64_t M, int64_t N, int64_t K, float alpha, const float* pa, const uint32_t* pb, float beta,
                       float* C, int64_t ldc, RowBlocks blocks = RowBlocks::Panels);
// The same with op(A) [M, K] read in place (no panels: for a narrow C, N <= 64, where each element
// of A serves few multiply-adds and packing it costs more than it saves).
void gemm_panels_a_in_place(Trans ta, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                            const float* pb, float beta, float* C, int64_t ldc);
// And with B [K, N] read in place too, N a multiple of nr (the same sums as B's panels would give): for a B whose
// rows are an odd number of cache lines apart (its rows then spread over every cache set, so reading them as
// they lie costs what reading panels does, and packing them is saved).
void gemm_in_place(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
                   int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace attnkit::ops
