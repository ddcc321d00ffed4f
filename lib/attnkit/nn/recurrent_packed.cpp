// W_hh packed for the library's own GEMM micro-kernel (recurrent_packed.hpp): ops::GemmPackedB and
// ops::gemm_packed, so the time loop runs on the same kernel as every other product (no
// Eigen::internal here any more).
#include "attnkit/nn/recurrent_packed.hpp"

#include <algorithm>

#include "attnkit/ops/recurrent.hpp"

namespace attnkit::nn {

// C [N, nc] += h [N, H] x wh[:, c0:c0+nc] [H, nc]
PackedColumns::PackedColumns(const float* wh, int64_t H, int64_t GH, int64_t c0, int64_t nc, ops::GemmPackedB::Layout layout)
    : H_(H), c0_(c0), b_(ops::Trans::No, H, nc, wh + c0, GH, layout) {}

void PackedColumns::multiply_add(const float* h, int64_t N, float* res, int64_t ld, int64_t ldh) const {
  if (ldh < 0) ldh = H_;
  ops::gemm_packed(ops::Trans::No, N, 1.0f, h, ldh, b_, 1.0f, res + c0_, ld, ops::GemmThreads::This);  // [N, nc]
}

void PackedColumns::multiply(const float* a, int64_t M, int64_t lda, float* res, int64_t ld,
                             ops::GemmThreads threads) const {
  ops::gemm_packed(ops::Trans::No, M, 1.0f, a, lda, b_, 0.0f, res + c0_, ld, threads);  // [M, nc]
}

void PackedColumns::multiply_panels(const float* pa, int64_t M, int64_t j0, int64_t j1, float beta, float* res,
                                    int64_t ld) const {
  ops::gemm_panels(M, j1 - j0, H_, 1.0f, pa, b_.panels(j0), beta, res, ld, ops::RowBlocks::Balanced);
}

TeamParts make_parts(const Recurrent::Packed& p, int64_t H, int G, int team, ops::GemmPackedB::Layout layout) {
  const int64_t blocks = (H + ops::kUnitBlock - 1) / ops::kUnitBlock;
  TeamParts parts;
  for (int c = 0; c < team; ++c) {
    const int64_t u0 = blocks * c / team * ops::kUnitBlock, u1 = std::min(H, blocks * (c + 1) / team * ops::kUnitBlock);
    parts.units.emplace_back(u0, u1);
    parts.columns.emplace_back(p.wh.data(), H, G * H, G * u0, G * (u1 - u0), layout);
    parts.input.emplace_back(p.wx.data(), p.wx.dim(0), G * H, G * u0, G * (u1 - u0));
  }
  return parts;
}

const TeamParts& PackCache::parts(int index, int team, const Recurrent::Packed& p, int64_t H, ops::CellKind cell,
                                  bool one_row) {
  std::lock_guard<std::mutex> lock(mutex);
  auto& m = one_row ? built_rows : built;
  auto it = m.find({index, team});
  if (it == m.end()) {
    using Layout = ops::GemmPackedB::Layout;
    TeamParts parts = make_parts(p, H, ops::gate_count(cell), team, one_row ? Layout::Rows : Layout::Panels);
    it = m.emplace(std::make_pair(index, team), std::move(parts)).first;
  }
  return it->second;
}

const TeamParts& PackCache::backward_parts(int index, int team, const Tensor& w_hh, int64_t H) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = built_backward.find({index, team});
  if (it == built_backward.end()) {
    const int64_t blocks = (H + ops::kUnitBlock - 1) / ops::kUnitBlock, GH = w_hh.dim(0);
    TeamParts parts;
    for (int c = 0; c < team; ++c) {  // the units of part c, as make_parts splits them
      const int64_t u0 = blocks * c / team * ops::kUnitBlock, u1 = std::min(H, blocks * (c + 1) / team * ops::kUnitBlock);
      parts.units.emplace_back(u0, u1);
      parts.columns.emplace_back(w_hh.data(), GH, H, u0, u1 - u0);  // W_hh [G*H, H]: columns u0..u1
    }
    it = built_backward.emplace(std::make_pair(index, team), std::move(parts)).first;
  }
  return it->second;
}

void PackCache::forget(int index) {
  std::lock_guard<std::mutex> lock(mutex);
  for (auto* m : {&built, &built_rows, &built_backward})
    for (auto it = m->begin(); it != m->end();) it = it->first.first == index ? m->erase(it) : std::next(it);
}

}  // namespace attnkit::nn
