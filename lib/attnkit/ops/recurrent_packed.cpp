// The recurrent stack's derived weight layout (recurrent_packed.hpp): the blocked transposes, and W_hh
// packed for the library's own GEMM micro-kernel (GemmPackedB and gemm_packed, so the time loop runs
// on the same kernel as every other product), per team size.
#include "attnkit/ops/recurrent_packed.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "attnkit/tensor/scratch_pool.hpp"

namespace attnkit::ops {

// C [N, nc] += h [N, H] x wh[:, c0:c0+nc] [H, nc]
PackedColumns::PackedColumns(const float* wh, int64_t H, int64_t GH, int64_t c0, int64_t nc,
                             GemmPackedB::Layout layout)
    : H_(H), c0_(c0), b_(Trans::No, H, nc, wh + c0, GH, layout) {}

void PackedColumns::multiply_add(const float* h, int64_t N, float* res, int64_t ld, int64_t ldh) const {
  if (ldh < 0) ldh = H_;
  gemm_packed(Trans::No, N, 1.0f, h, ldh, b_, 1.0f, res + c0_, ld, GemmThreads::This);  // [N, nc]
}

void PackedColumns::multiply(const float* a, int64_t M, int64_t lda, float* res, int64_t ld, GemmThreads threads) const {
  gemm_packed(Trans::No, M, 1.0f, a, lda, b_, 0.0f, res + c0_, ld, threads);  // [M, nc]
}

void PackedColumns::multiply_panels(const float* pa, int64_t M, int64_t j0, int64_t j1, float beta, float* res,
                                    int64_t ld) const {
  if (const uint32_t* pairs = b_.pairs(j0))  // packed under MatmulPrecision::BFloat16
    return gemm_panels_pairs(M, j1 - j0, H_, 1.0f, pa, pairs, beta, res, ld, RowBlocks::Balanced);
  gemm_panels(M, j1 - j0, H_, 1.0f, pa, b_.panels(j0), beta, res, ld, RowBlocks::Balanced);
}

namespace {

// Part c of a team of `team` over H units: a run of whole unit blocks [u0, u1).
std::pair<int64_t, int64_t> team_units(int64_t H, int c, int team) {
  const int64_t blocks = (H + kUnitBlock - 1) / kUnitBlock;
  return {blocks * c / team * kUnitBlock, std::min(H, blocks * (c + 1) / team * kUnitBlock)};
}

// W_hh's columns in `layout` (Rows for a batch of one); W_ih's always in panels (N*T rows).
TeamParts make_parts(const RecurrentPacked& p, int64_t H, int G, int team, GemmPackedB::Layout layout) {
  TeamParts parts;
  for (int c = 0; c < team; ++c) {
    const auto [u0, u1] = team_units(H, c, team);
    parts.units.emplace_back(u0, u1);
    parts.columns.emplace_back(p.wh.data(), H, G * H, G * u0, G * (u1 - u0), layout);
    parts.input.emplace_back(p.wx.data(), p.wx.dim(0), G * H, G * u0, G * (u1 - u0));
  }
  return parts;
}

}  // namespace

const TeamParts& RecurrentPacked::parts(int team, int64_t H, CellKind cell, bool one_row) const {
  std::lock_guard<std::mutex> lock(packs_->mutex);
  auto& m = one_row ? packs_->forward_rows : packs_->forward;
  auto it = m.find(team);
  if (it == m.end()) {
    using Layout = GemmPackedB::Layout;
    TeamParts parts = make_parts(*this, H, gate_count(cell), team, one_row ? Layout::Rows : Layout::Panels);
    it = m.emplace(team, std::move(parts)).first;
  }
  return it->second;
}

const TeamParts& RecurrentPacked::backward_parts(int team, const Tensor& w_hh, int64_t H) const {
  std::lock_guard<std::mutex> lock(packs_->mutex);
  auto it = packs_->backward.find(team);
  if (it == packs_->backward.end()) {
    const int64_t GH = w_hh.dim(0);
    TeamParts parts;
    for (int c = 0; c < team; ++c) {  // the units of part c, as make_parts splits them
      const auto [u0, u1] = team_units(H, c, team);
      parts.units.emplace_back(u0, u1);
      parts.columns.emplace_back(w_hh.data(), GH, H, u0, u1 - u0);  // W_hh [G*H, H]: columns u0..u1
    }
    it = packs_->backward.emplace(team, std::move(parts)).first;
  }
  return it->second;
}

// The internal layout of one direction: transposed, blocked columns, folded biases.
RecurrentPacked pack_recurrent_direction(CellKind cell, int64_t H, const Tensor& w_ih, const Tensor& w_hh,
                                         const Tensor& b_ih, const Tensor& b_hh) {
  const int G = gate_count(cell);
  const int64_t Din = w_ih.dim(1);
  const int64_t GH = G * H;
  RecurrentPacked p;
  p.wx = Tensor({Din, GH}), p.wh = Tensor({H, GH}), p.bias = Tensor({GH}), p.b_hn = Tensor({H});
  std::vector<int64_t> col_of(static_cast<size_t>(GH));  // row g*H + u of W -> its column in the blocked layout
  for (int g = 0; g < G; ++g) {
    for (int64_t u = 0; u < H; ++u) {
      const int64_t col = blocked_column(u, g, H, G), row = g * H + u;
      col_of[size_t(row)] = col;
      const bool hn = cell == CellKind::Gru && g == 2;  // b_hn stays inside r ⊙ (W_hn h + b_hn)
      p.bias[col] = b_ih[row] + (hn ? 0.0f : b_hh[row]);
      if (hn) p.b_hn[u] = b_hh[row];
    }
  }
  // dst[k, col_of[row]] = src[row, k], a band of 16 rows at a time: the weights are repacked after every optimizer
  // step. A band of one gate's 16 units of a whole block lands in 16 neighbouring columns (col_of[r0 + i] =
  // col_of[r0] + i): it goes through 16 x 16 tiles (16 contiguous reads of a src row into a tile, 16 contiguous
  // writes of a dst row out of it; scattering one element at a time cost several times the copy). A band that
  // crosses gates (H not a multiple of 16) goes element by element.
  auto transpose_into = [&](const Tensor& src, int64_t K, Tensor& dst) {  // src [G*H, K] -> dst [K, G*H]
    constexpr int64_t kBand = 16;
    alignas(64) float tile[kBand][kBand];
    for (int64_t r0 = 0; r0 < GH; r0 += kBand) {
      const int64_t r1 = std::min(GH, r0 + kBand);
      bool contiguous = r1 - r0 == kBand;
      for (int64_t r = r0; r < r1 && contiguous; ++r) contiguous = col_of[size_t(r)] == col_of[size_t(r0)] + (r - r0);
      int64_t k0 = 0;
      if (contiguous) {
        const int64_t c0 = col_of[size_t(r0)];
        for (; k0 + kBand <= K; k0 += kBand) {
          for (int64_t i = 0; i < kBand; ++i) std::copy_n(src.data() + (r0 + i) * K + k0, kBand, tile[i]);
          for (int64_t j = 0; j < kBand; ++j) {
            float* out = dst.data() + (k0 + j) * GH + c0;
            for (int64_t i = 0; i < kBand; ++i) out[i] = tile[i][j];
          }
        }
      }
      for (int64_t k = k0; k < K; ++k) {
        float* out = dst.data() + k * GH;
        for (int64_t r = r0; r < r1; ++r) out[col_of[size_t(r)]] = src[r * K + k];
      }
    }
  };
  transpose_into(w_ih, Din, p.wx);  // [Din, G*H]
  transpose_into(w_hh, H, p.wh);    // [H, G*H]
  p.wh_finite = std::all_of(w_hh.data(), w_hh.data() + w_hh.numel(), [](float v) { return std::isfinite(v); });
  return p;
}

int recurrent_team_size(int threads, int64_t N, int64_t H, int G, int64_t min_macs) {
  const int64_t work = N * H * G * H;
  const int64_t blocks = (H + kUnitBlock - 1) / kUnitBlock;
  int64_t useful = std::max<int64_t>(1, work / std::max<int64_t>(1, min_macs));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({threads, useful, blocks})));
}

RecurrentScratch::RecurrentScratch(size_t floats, int slot) {
  constexpr size_t kSmall = size_t(1) << 20;  // floats (4 MB)
  if (floats > kSmall) {
    large_ = ScratchPool::get(static_cast<int64_t>(floats));
    data_ = large_.get();
    return;
  }
  thread_local std::vector<float, Eigen::aligned_allocator<float>> kept[3];
  if (kept[slot].size() < floats + 16) kept[slot].resize(floats + 16);
  // to a cache line (Eigen's allocator aligns to its packet size, 32 bytes with AVX2): a team's
  // parts write runs of whole lines, never one line from two cores
  const uintptr_t p = reinterpret_cast<uintptr_t>(kept[slot].data());
  data_ = reinterpret_cast<float*>((p + 63) / 64 * 64);
}

}  // namespace attnkit::ops
