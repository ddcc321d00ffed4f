// W_hh packed for Eigen's GEMM micro-kernel (recurrent_packed.hpp).
// This file reaches into Eigen::internal (gebp_kernel, gemm_pack_lhs/rhs, gebp_traits, the data
// mappers): those are not Eigen's public API, which is why the top-level CMakeLists.txt pins Eigen
// to 3.4. A newer Eigen may change these signatures; then this file (and ops/matmul.cpp) follow.
// GCC 12 reports false "may be used uninitialized" inside Eigen's AVX-512 packet code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "attnkit/nn/recurrent_packed.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <new>

#include "attnkit/ops/recurrent.hpp"

namespace attnkit::nn {

AlignedFloats::AlignedFloats(size_t n) {
  const size_t bytes = (std::max<size_t>(1, n) * sizeof(float) + 63) / 64 * 64;
  p_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!p_) throw std::bad_alloc();
}

namespace {
using Traits = Eigen::internal::gebp_traits<float, float>;
using Mapper = Eigen::internal::const_blas_data_mapper<float, Eigen::Index, Eigen::ColMajor>;
using ResMapper = Eigen::internal::blas_data_mapper<float, Eigen::Index, Eigen::ColMajor, Eigen::Unaligned, 1>;
constexpr int64_t kDepth = 256;  // depth block: a 48 x 256 panel of W is 48 KB (L1)
}  // namespace

// In gebp's column-major view: C^T [nc, N] += A [nc, H] (W_hh^T rows c0..) x B [H, N] (h_prev^T).
PackedColumns::PackedColumns(const float* wh, int64_t H, int64_t GH, int64_t c0, int64_t nc)
    : H_(H), nc_(nc), c0_(c0), a_(size_t(std::max<int64_t>(1, H * nc))) {
  Eigen::internal::gemm_pack_lhs<float, Eigen::Index, Mapper, Traits::mr, Traits::LhsProgress,
                                 Traits::LhsPacket4Packing, Eigen::ColMajor>
      pack;
  for (int64_t k0 = 0; k0 < H && nc > 0; k0 += kDepth)
    pack(a_.data() + k0 * nc, Mapper(wh + c0 + k0 * GH, GH), std::min(kDepth, H - k0), nc);
}

void PackedColumns::multiply_add(const float* h, int64_t N, float* scratch, float* res, int64_t ld,
                                 int64_t ldh) const {
  if (ldh < 0) ldh = H_;
  Eigen::internal::gemm_pack_rhs<float, Eigen::Index, Mapper, Traits::nr, Eigen::ColMajor> pack;
  Eigen::internal::gebp_kernel<float, float, Eigen::Index, ResMapper, Traits::mr, Traits::nr, false, false> gebp;
  for (int64_t k0 = 0; k0 < H_; k0 += kDepth) {
    const int64_t kc = std::min(kDepth, H_ - k0);
    pack(scratch + k0 * N, Mapper(h + k0, ldh), kc, N);
    gebp(ResMapper(res + c0_, ld), a_.data() + k0 * nc_, scratch + k0 * N, nc_, kc, N, 1.0f);
  }
}

TeamParts make_parts(const Recurrent::Packed& p, int64_t H, int G, int team) {
  const int64_t blocks = (H + ops::kUnitBlock - 1) / ops::kUnitBlock;
  TeamParts parts;
  for (int c = 0; c < team; ++c) {
    const int64_t u0 = blocks * c / team * ops::kUnitBlock, u1 = std::min(H, blocks * (c + 1) / team * ops::kUnitBlock);
    parts.units.emplace_back(u0, u1);
    parts.columns.emplace_back(p.wh.data(), H, G * H, G * u0, G * (u1 - u0));
  }
  return parts;
}

const TeamParts& PackCache::parts(int index, int team, const Recurrent::Packed& p, int64_t H, ops::CellKind cell) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = built.find({index, team});
  if (it == built.end())
    it = built.emplace(std::make_pair(index, team), make_parts(p, H, ops::gate_count(cell), team)).first;
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
  for (auto* m : {&built, &built_backward})
    for (auto it = m->begin(); it != m->end();) it = it->first.first == index ? m->erase(it) : std::next(it);
}

}  // namespace attnkit::nn
