// The recurrent stack's forward with lower-precision weights (RecurrentDirection::lowp_ih / lowp_hh,
// recurrent_stack.hpp): per layer and direction, one product x W_ih^T over all the steps, then a time loop of
// h_prev W_hh^T (N rows) and the float32 cell. Inference only: no cache for backward.
// Legend: N batch, T steps, D_k a layer's input size, H hidden size, G gates, GH = G*H blocked columns.
#include <algorithm>
#include <cstring>
#include <vector>

#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/recurrent_packed.hpp"
#include "attnkit/ops/recurrent_stack.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {

LowpWeights make_recurrent_lowp(CellKind cell, int64_t H, const Tensor& w, Precision precision,
                                std::string_view what) {
  const int G = gate_count(cell);
  AK_CHECK(w.rank() == 2 && w.dim(0) == G * H, "{}: shape {}, expected [{}, K] ({} gates x {} units)", what,
           w.shape_str(), G * H, G, H);
  const int64_t K = w.dim(1);
  std::vector<float> blocked(static_cast<size_t>(G * H * K));  // [G*H, K], row blocked_column(u, g)
  for (int g = 0; g < G; ++g)
    for (int64_t u = 0; u < H; ++u)
      std::memcpy(blocked.data() + blocked_column(u, g, H, G) * K, w.data() + (g * H + u) * K, sizeof(float) * K);
  return make_lowp_weights(blocked.data(), G * H, K, precision, what);
}

LowpWeights recurrent_lowp_from_stored(CellKind cell, int64_t H, const LowpWeights& stored, std::string_view what) {
  const int G = gate_count(cell);
  AK_CHECK(stored.out == G * H, "{}: {} rows, expected {} ({} gates x {} units)", what, stored.out, G * H, G, H);
  std::vector<int64_t> rows(static_cast<size_t>(G * H));  // blocked row blocked_column(u, g) = stored row g*H + u
  for (int g = 0; g < G; ++g)
    for (int64_t u = 0; u < H; ++u) rows[static_cast<size_t>(blocked_column(u, g, H, G))] = g * H + u;
  return lowp_rows(stored, rows);
}

namespace {

// y [rows, GH] (stride ldy) = x [rows, K] (stride ldx) W^T: the lower-precision copy when set, else float32 from
// the blocked W^T [K, GH].
void project(const LowpWeights* lowp, const Tensor& w_t, const float* x, int64_t rows, int64_t K, int64_t ldx,
             float* y, int64_t ldy) {
  if (lowp) {
    lowp_linear(*lowp, x, rows, ldx, nullptr, y, ldy);
    return;
  }
  const int64_t GH = w_t.dim(1);
  gemm(Trans::No, Trans::No, rows, GH, K, 1.0f, x, ldx, w_t.data(), GH, 0.0f, y, ldy);
}

}  // namespace

RecurrentResult recurrent_stack_forward_lowp(const RecurrentWeights& weights, const RecurrentInputs& in,
                                             const RunOptions& options) {
  const RecurrentConfig& config = weights.config;
  const int dirs = config.directions(), L = config.layers, G = gate_count(config.cell);
  const int64_t H = config.hidden_size, GH = G * H;
  const Tensor& x = *in.x;
  const int64_t N = x.dim(0), T = x.dim(1);
  const bool lstm = config.cell == CellKind::Lstm, gru = config.cell == CellKind::Gru;
  AK_CHECK(!options.keep_cache, "recurrent: weights in lower precision are for inference only; a forward for a "
           "backward pass needs the float32 weights");

  RecurrentResult r;
  r.h_n = Tensor({L * dirs, N, H});
  if (lstm) r.c_n = Tensor({L * dirs, N, H});
  if (options.trace) r.caches.resize(dirs);

  std::vector<float> xproj(static_cast<size_t>(N * T * GH)), hproj(static_cast<size_t>(N * GH));
  std::vector<float> hbuf(static_cast<size_t>(2 * N * H)), cbuf(static_cast<size_t>(2 * N * H));
  Tensor layer_in;
  for (int k = 0; k < L; ++k) {
    const Tensor& input = k == 0 ? x : layer_in;
    const int64_t Din = input.dim(2);
    Tensor layer_out({N, T, dirs * H});
    for (int d = 0; d < dirs; ++d) {
      const int idx = k * dirs + d;
      const RecurrentDirection& dw = weights.directions[size_t(idx)];
      const RecurrentPacked& p = *dw.packed;
      const bool reverse = d == 1;
      // [N*T, GH] row n*T + t: x_t W_ih^T of every step at once
      project(dw.lowp_ih.get(), p.wx, input.data(), N * T, Din, Din, xproj.data(), GH);
      RecurrentCache* cache = options.trace && k == 0 ? &r.caches[size_t(d)] : nullptr;
      if (cache) {
        if (!(config.cell == CellKind::RnnTanh || config.cell == CellKind::RnnRelu))
          cache->gates = attnkit::detail::ScratchTensor({T, N, GH});
        cache->pre = attnkit::detail::ScratchTensor({T, N, GH});
        if (lstm) cache->c = attnkit::detail::ScratchTensor({T, N, H}), cache->tanh_c = attnkit::detail::ScratchTensor({T, N, H});
        if (gru) cache->hn = attnkit::detail::ScratchTensor({T, N, H});
        cache->h = attnkit::detail::ScratchTensor({T, N, H});
      }
      // the initial state into slot 1 (step i reads slot (i + 1) & 1, writes slot i & 1)
      float* h_init = hbuf.data() + N * H;
      float* c_init = cbuf.data() + N * H;
      if (in.h0) std::memcpy(h_init, in.h0->data() + idx * N * H, sizeof(float) * N * H);
      else std::fill_n(h_init, N * H, 0.0f);
      if (in.c0) std::memcpy(c_init, in.c0->data() + idx * N * H, sizeof(float) * N * H);
      else std::fill_n(c_init, N * H, 0.0f);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t t = reverse ? T - 1 - i : i;
        const float* h_prev = hbuf.data() + ((i + 1) & 1) * N * H;
        float* h = hbuf.data() + (i & 1) * N * H;
        project(dw.lowp_hh.get(), p.wh, h_prev, N, H, H, hproj.data(), GH);  // [N, GH] h_prev W_hh^T
        CellStep s;
        s.cell = config.cell;
        s.rows = N, s.hidden = H, s.unit_begin = 0, s.unit_end = H;
        s.lengths = in.lengths ? in.lengths->data() : nullptr;
        s.t = t;
        s.xproj = xproj.data() + t * GH, s.xproj_stride = T * GH;
        s.hproj = hproj.data(), s.hproj_stride = GH;
        s.bias = p.bias.data();
        s.b_hn = gru ? p.b_hn.data() : nullptr;
        s.h_prev = h_prev, s.h_prev_stride = H;
        s.h = h, s.h_stride = H;
        if (lstm) {
          s.c_prev = cbuf.data() + ((i + 1) & 1) * N * H, s.c_prev_stride = H;
          s.c = cbuf.data() + (i & 1) * N * H, s.c_stride = H;
        }
        s.out = layer_out.data() + t * dirs * H + d * H, s.out_stride = T * dirs * H;
        if (cache) {
          if (!cache->gates.empty()) s.gates = cache->gates.data() + t * N * GH, s.gates_stride = GH;
          s.pre = cache->pre.data() + t * N * GH, s.pre_stride = GH;
          if (lstm) s.tanh_c = cache->tanh_c.data() + t * N * H, s.tanh_c_stride = H;
          if (gru) s.hn = cache->hn.data() + t * N * H, s.hn_stride = H;
        }
        cell_forward(s);
        if (cache) {
          std::memcpy(cache->h.data() + t * N * H, h, sizeof(float) * N * H);
          if (lstm) std::memcpy(cache->c.data() + t * N * H, s.c, sizeof(float) * N * H);
        }
      }
      const int64_t last = T == 0 ? 1 : (T - 1) & 1;  // T = 0: the initial state
      std::memcpy(r.h_n.data() + idx * N * H, hbuf.data() + last * N * H, sizeof(float) * N * H);
      if (lstm) std::memcpy(r.c_n.data() + idx * N * H, cbuf.data() + last * N * H, sizeof(float) * N * H);
    }
    layer_in = std::move(layer_out);
  }
  r.output = std::move(layer_in);
  return r;
}

}  // namespace attnkit::ops
