// Recurrent cell kernels (legend and equations in recurrent.hpp).
// GCC 12 reports false "may be used uninitialized" inside Eigen's AVX-512 packet code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "attnkit/ops/recurrent.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::ops {

int gate_count(CellKind cell) {
  switch (cell) {
    case CellKind::Lstm: return 4;
    case CellKind::Gru: return 3;
    default: return 1;
  }
}

const char* cell_name(CellKind cell) { return name_of(kCellNames, cell); }

int64_t blocked_column(int64_t unit, int gate, int64_t hidden, int gates) {
  int64_t start = unit / kUnitBlock * kUnitBlock;
  int64_t width = std::min(kUnitBlock, hidden - start);
  return gates * start + gate * width + (unit - start);
}

namespace {

// A full block is a fixed-size array (one packet, unrolled); the last, partial block a dynamic
// array with a fixed maximum size: both live on the stack, so the time loop allocates nothing.
using FullBlock = Eigen::Array<float, kUnitBlock, 1>;
using TailBlock = Eigen::Array<float, Eigen::Dynamic, 1, Eigen::ColMajor, kUnitBlock, 1>;

template <typename A>
Eigen::Map<const A> in(const float* p, int64_t w) { return Eigen::Map<const A>(p, w); }
template <typename A>
Eigen::Map<A> out(float* p, int64_t w) { return Eigen::Map<A>(p, w); }

bool padded(const CellStep& s, int64_t n) { return s.lengths && s.t >= s.lengths[n]; }

void zero(float* p, int64_t w) {
  if (p) std::memset(p, 0, sizeof(float) * static_cast<size_t>(w));
}

// A padded row: carry the state, zero the output and the records of this block.
void carry_block(const CellStep& s, int64_t n, int64_t u0, int64_t w, int gates) {
  const int64_t H = s.hidden;
  std::memcpy(s.h + n * s.h_stride + u0, s.h_prev + n * s.h_prev_stride + u0, sizeof(float) * w);
  if (s.c) std::memcpy(s.c + n * s.c_stride + u0, s.c_prev + n * s.c_prev_stride + u0, sizeof(float) * w);
  if (s.out) zero(s.out + n * s.out_stride + u0, w);
  for (int g = 0; g < gates; ++g) {
    if (s.gates) zero(s.gates + n * s.gates_stride + g * H + u0, w);
    if (s.pre) zero(s.pre + n * s.pre_stride + g * H + u0, w);
  }
  if (s.tanh_c) zero(s.tanh_c + n * s.tanh_c_stride + u0, w);
  if (s.hn) zero(s.hn + n * s.hn_stride + u0, w);
}

void check_units(const CellStep& s) {
  AK_CHECK(s.unit_begin % kUnitBlock == 0 && s.unit_begin <= s.unit_end && s.unit_end <= s.hidden,
           "recurrent cell: units [{}, {}) are not block-aligned within hidden size {}", s.unit_begin, s.unit_end,
           s.hidden);
}

// Calls block(n, u0, w) with the right array type for every (row, block) of the step.
template <typename Full, typename Tail>
void for_blocks(const CellStep& s, int gates, Full full, Tail tail) {
  check_units(s);
  for (int64_t n = 0; n < s.rows; ++n) {
    for (int64_t u0 = s.unit_begin; u0 < s.unit_end; u0 += kUnitBlock) {
      int64_t w = std::min(kUnitBlock, s.hidden - u0);
      if (padded(s, n)) carry_block(s, n, u0, w, gates);
      else if (w == kUnitBlock) full(n, u0, w);
      else tail(n, u0, w);
    }
  }
}

// Writes one block's per-gate values into a standard-layout record (gate q at column q*H).
template <typename A, size_t K>
void record(float* base, int64_t stride, int64_t H, int64_t n, int64_t u0, int64_t w, const std::array<const A*, K>& v) {
  if (!base) return;
  for (size_t q = 0; q < K; ++q) out<A>(base + n * stride + int64_t(q) * H + u0, w) = *v[q];
}

// Argument of gate g for the w units at u0 (blocked columns): xproj + hproj + bias.
template <typename A>
A gate_input(const CellStep& s, int gates, int64_t n, int64_t u0, int64_t w, int g) {
  const int64_t col = gates * u0 + g * w, at = col - s.proj_col0;
  A a = in<A>(s.xproj + n * s.xproj_stride + at, w);
  if (s.hproj) a += in<A>(s.hproj + n * s.hproj_stride + at, w);
  if (s.bias) a += in<A>(s.bias + col, w);
  return a;
}

template <typename A>
void rnn_block(const CellStep& s, int64_t n, int64_t u0, int64_t w) {
  // a = x W_ih^T + h_prev W_hh^T + b;  h = act(a)   [w]
  A a = gate_input<A>(s, 1, n, u0, w, 0);
  A h = s.cell == CellKind::RnnRelu ? A(a.max(0.0f)) : A(a.tanh());
  out<A>(s.h + n * s.h_stride + u0, w) = h;
  if (s.out) out<A>(s.out + n * s.out_stride + u0, w) = h;
  record<A, 1>(s.gates, s.gates_stride, s.hidden, n, u0, w, {&h});
  record<A, 1>(s.pre, s.pre_stride, s.hidden, n, u0, w, {&a});
}

// kRecords false: the tanh(c) and gate records compiled out (inference, lstm_rows_plain).
template <typename A, bool kRecords = true>
inline __attribute__((always_inline)) void lstm_block(const CellStep& s, int64_t n, int64_t u0, int64_t w) {
  const int64_t H = s.hidden;
  // blocked: i, f, g, o of these w units
  A ai = gate_input<A>(s, 4, n, u0, w, 0), af = gate_input<A>(s, 4, n, u0, w, 1);
  A ag = gate_input<A>(s, 4, n, u0, w, 2), ao = gate_input<A>(s, 4, n, u0, w, 3);
  A i = ai.logistic(), f = af.logistic(), g = ag.tanh(), o = ao.logistic();
  A c = f * in<A>(s.c_prev + n * s.c_prev_stride + u0, w) + i * g;  // c = f ⊙ c_prev + i ⊙ g
  A tc = c.tanh();
  A h = o * tc;  // h = o ⊙ tanh(c)
  out<A>(s.c + n * s.c_stride + u0, w) = c;
  out<A>(s.h + n * s.h_stride + u0, w) = h;
  if (s.out) out<A>(s.out + n * s.out_stride + u0, w) = h;
  if constexpr (kRecords) {
    if (s.tanh_c) out<A>(s.tanh_c + n * s.tanh_c_stride + u0, w) = tc;
    record<A, 4>(s.gates, s.gates_stride, H, n, u0, w, {&i, &f, &g, &o});  // standard: i, f, g, o
    record<A, 4>(s.pre, s.pre_stride, H, n, u0, w, {&ai, &af, &ag, &ao});
  }
}

// Inference (no records): each row's full blocks in one loop, lstm_block inlined without its records,
// so the step's pointers are loaded and the optional outputs tested once a row (called block by block,
// with every record tested each time, the tests cost a visible share of an LSTM step). The same
// arithmetic in the same order: the same bits.
void lstm_rows_plain(const CellStep& s) {
  const int64_t H = s.hidden, full_end = s.unit_begin + (s.unit_end - s.unit_begin) / kUnitBlock * kUnitBlock;
  for (int64_t n = 0; n < s.rows; ++n) {
    if (padded(s, n)) {
      for (int64_t u0 = s.unit_begin; u0 < s.unit_end; u0 += kUnitBlock)
        carry_block(s, n, u0, std::min(kUnitBlock, H - u0), 4);
      continue;
    }
    for (int64_t u0 = s.unit_begin; u0 < full_end; u0 += kUnitBlock) lstm_block<FullBlock, false>(s, n, u0, kUnitBlock);
    if (full_end < s.unit_end) lstm_block<TailBlock, false>(s, n, full_end, s.unit_end - full_end);
  }
}

template <typename A>
void gru_block(const CellStep& s, int64_t n, int64_t u0, int64_t w) {
  const int64_t H = s.hidden;
  // blocked: r, z, n of these w units; hproj is separate (r multiplies only W_hn h_prev + b_hn)
  const float* xp = s.xproj + (n * s.xproj_stride + 3 * u0 - s.proj_col0);
  const float* hp = s.hproj + (n * s.hproj_stride + 3 * u0 - s.proj_col0);
  A ar = gate_input<A>(s, 3, n, u0, w, 0), az = gate_input<A>(s, 3, n, u0, w, 1);
  A hn = in<A>(hp + 2 * w, w) + in<A>(s.b_hn + u0, w);  // W_hn h_prev + b_hn
  A r = ar.logistic(), z = az.logistic();
  A an = in<A>(xp + 2 * w, w) + r * hn;  // x_n + r ⊙ h_n
  if (s.bias) an += in<A>(s.bias + 3 * u0 + 2 * w, w);  // + b_in
  A nn = an.tanh();
  // h = (1 - z) ⊙ n + z ⊙ h_prev, written as PyTorch does: n + z ⊙ (h_prev - n)
  A h = nn + z * (in<A>(s.h_prev + n * s.h_prev_stride + u0, w) - nn);
  out<A>(s.h + n * s.h_stride + u0, w) = h;
  if (s.out) out<A>(s.out + n * s.out_stride + u0, w) = h;
  if (s.hn) out<A>(s.hn + n * s.hn_stride + u0, w) = hn;
  record<A, 3>(s.gates, s.gates_stride, H, n, u0, w, {&r, &z, &nn});
  record<A, 3>(s.pre, s.pre_stride, H, n, u0, w, {&ar, &az, &an});
}

}  // namespace

void rnn_cell_forward(const CellStep& s) {
  for_blocks(s, 1, [&](int64_t n, int64_t u0, int64_t w) { rnn_block<FullBlock>(s, n, u0, w); },
             [&](int64_t n, int64_t u0, int64_t w) { rnn_block<TailBlock>(s, n, u0, w); });
}

void lstm_cell_forward(const CellStep& s) {
  if (!s.gates && !s.pre && !s.tanh_c) {
    check_units(s);
    return lstm_rows_plain(s);
  }
  for_blocks(s, 4, [&](int64_t n, int64_t u0, int64_t w) { lstm_block<FullBlock>(s, n, u0, w); },
             [&](int64_t n, int64_t u0, int64_t w) { lstm_block<TailBlock>(s, n, u0, w); });
}

void gru_cell_forward(const CellStep& s) {
  AK_CHECK(s.hproj, "gru cell: hproj is required (r multiplies W_hn h_prev + b_hn alone)");
  for_blocks(s, 3, [&](int64_t n, int64_t u0, int64_t w) { gru_block<FullBlock>(s, n, u0, w); },
             [&](int64_t n, int64_t u0, int64_t w) { gru_block<TailBlock>(s, n, u0, w); });
}

void cell_forward(const CellStep& s) {
  switch (s.cell) {
    case CellKind::Lstm: return lstm_cell_forward(s);
    case CellKind::Gru: return gru_cell_forward(s);
    default: return rnn_cell_forward(s);
  }
}

// ---- backward (equations in recurrent.hpp), one block of units at a time like the forward ----

namespace {

// Adds `v` into w floats at p.
template <typename A, typename E>
void add_to(float* p, int64_t w, const E& v) {
  out<A>(p, w) += v;
}

// A padded row carried its state: the gradients pass through unchanged.
void carry_back_block(const CellBackStep& s, int64_t n, int64_t u0, int64_t w) {
  using A = Eigen::Array<float, Eigen::Dynamic, 1>;
  if (s.dh_prev) add_to<A>(s.dh_prev + n * s.dh_prev_stride + u0, w, in<A>(s.dh + n * s.dh_stride + u0, w));
  if (s.dc_prev && s.dc) add_to<A>(s.dc_prev + n * s.dc_prev_stride + u0, w, in<A>(s.dc + n * s.dc_stride + u0, w));
}

template <typename Full, typename Tail>
void for_back_blocks(const CellBackStep& s, Full full, Tail tail) {
  const int64_t begin = s.unit_begin, end = s.unit_end < 0 ? s.hidden : s.unit_end;
  AK_CHECK(begin % kUnitBlock == 0 && begin <= end && end <= s.hidden,
           "recurrent cell backward: units [{}, {}) are not block-aligned within hidden size {}", begin, end, s.hidden);
  for (int64_t n = 0; n < s.rows; ++n) {
    const bool pad = s.lengths && s.t >= s.lengths[n];
    for (int64_t u0 = begin; u0 < end; u0 += kUnitBlock) {
      const int64_t w = std::min(kUnitBlock, s.hidden - u0);
      if (pad) carry_back_block(s, n, u0, w);
      else if (w == kUnitBlock) full(n, u0, w);
      else tail(n, u0, w);
    }
  }
}

template <typename A>
void rnn_back_block(const CellBackStep& s, int64_t n, int64_t u0, int64_t w) {
  // forward: h = act(a)
  A dh = in<A>(s.dh + n * s.dh_stride + u0, w), h = in<A>(s.h + n * s.h_stride + u0, w);
  A da = s.cell == CellKind::RnnRelu ? A((h > 0.0f).select(dh, A::Zero(w))) : A(dh * (1.0f - h * h));
  add_to<A>(s.da + n * s.da_stride + u0, w, da);
}

template <typename A>
void lstm_back_block(const CellBackStep& s, int64_t n, int64_t u0, int64_t w) {
  const int64_t H = s.hidden;
  const float* gp = s.gates + n * s.gates_stride + u0;
  A i = in<A>(gp, w), f = in<A>(gp + H, w), g = in<A>(gp + 2 * H, w), o = in<A>(gp + 3 * H, w);
  A dh = in<A>(s.dh + n * s.dh_stride + u0, w), tc = in<A>(s.tanh_c + n * s.tanh_c_stride + u0, w);
  // h = o ⊙ tanh(c):  dc_t = dc + dh ⊙ o ⊙ (1 - tanh²(c))
  A dct = dh * o * (1.0f - tc * tc);
  if (s.dc) dct += in<A>(s.dc + n * s.dc_stride + u0, w);
  // c = f ⊙ c_prev + i ⊙ g
  A cp = in<A>(s.c_prev + n * s.c_prev_stride + u0, w);
  float* da = s.da + n * s.da_stride + u0;
  add_to<A>(da, w, dct * g * i * (1.0f - i));              // i = σ(a_i)
  add_to<A>(da + H, w, dct * cp * f * (1.0f - f));         // f = σ(a_f)
  add_to<A>(da + 2 * H, w, dct * i * (1.0f - g * g));      // g = tanh(a_g)
  add_to<A>(da + 3 * H, w, dh * tc * o * (1.0f - o));      // o = σ(a_o)
  if (s.dc_prev) add_to<A>(s.dc_prev + n * s.dc_prev_stride + u0, w, dct * f);
}

template <typename A>
void gru_back_block(const CellBackStep& s, int64_t n, int64_t u0, int64_t w) {
  const int64_t H = s.hidden;
  const float* gp = s.gates + n * s.gates_stride + u0;
  A r = in<A>(gp, w), z = in<A>(gp + H, w), nn = in<A>(gp + 2 * H, w);
  A dh = in<A>(s.dh + n * s.dh_stride + u0, w), hp = in<A>(s.h_prev + n * s.h_prev_stride + u0, w);
  A hn = in<A>(s.hn + n * s.hn_stride + u0, w);
  // h = (1 - z) ⊙ n + z ⊙ h_prev
  A dan = dh * (1.0f - z) * (1.0f - nn * nn);       // n = tanh(a_n)
  A daz = dh * (hp - nn) * z * (1.0f - z);           // z = σ(a_z)
  A dar = dan * hn * r * (1.0f - r);                 // a_n = x_n + r ⊙ h_n,  r = σ(a_r)
  float* da = s.da + n * s.da_stride + u0;
  add_to<A>(da, w, dar);
  add_to<A>(da + H, w, daz);
  add_to<A>(da + 2 * H, w, dan);
  float* dha = s.dha + n * s.dha_stride + u0;
  add_to<A>(dha, w, dar);
  add_to<A>(dha + H, w, daz);
  add_to<A>(dha + 2 * H, w, dan * r);                // h_n = W_hn h_prev + b_hn enters as r ⊙ h_n
  if (s.dh_prev) add_to<A>(s.dh_prev + n * s.dh_prev_stride + u0, w, dh * z);
}

}  // namespace

void rnn_cell_backward(const CellBackStep& s) {
  for_back_blocks(s, [&](int64_t n, int64_t u0, int64_t w) { rnn_back_block<FullBlock>(s, n, u0, w); },
                  [&](int64_t n, int64_t u0, int64_t w) { rnn_back_block<TailBlock>(s, n, u0, w); });
}

void lstm_cell_backward(const CellBackStep& s) {
  for_back_blocks(s, [&](int64_t n, int64_t u0, int64_t w) { lstm_back_block<FullBlock>(s, n, u0, w); },
                  [&](int64_t n, int64_t u0, int64_t w) { lstm_back_block<TailBlock>(s, n, u0, w); });
}

void gru_cell_backward(const CellBackStep& s) {
  AK_CHECK(s.dha, "gru cell backward: dha is required (the W_hh part differs from the W_ih part in n)");
  for_back_blocks(s, [&](int64_t n, int64_t u0, int64_t w) { gru_back_block<FullBlock>(s, n, u0, w); },
                  [&](int64_t n, int64_t u0, int64_t w) { gru_back_block<TailBlock>(s, n, u0, w); });
}

void cell_backward(const CellBackStep& s) {
  switch (s.cell) {
    case CellKind::Lstm: return lstm_cell_backward(s);
    case CellKind::Gru: return gru_cell_backward(s);
    default: return rnn_cell_backward(s);
  }
}

// ---- reference: plain loops in double, standard layout, PyTorch-layout weights ----

CellReference cell_reference(CellKind cell, const Tensor& x, const Tensor& h_prev, const Tensor& c_prev,
                             const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  const int G = gate_count(cell);
  const int64_t N = x.dim(0), D = x.dim(1), H = h_prev.dim(1);
  AK_CHECK(w_ih.shape() == Shape({G * H, D}) && w_hh.shape() == Shape({G * H, H}) && b_ih.numel() == G * H &&
               b_hh.numel() == G * H && h_prev.dim(0) == N,
           "cell_reference: inconsistent shapes");
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  CellReference r{Tensor({N, H}), Tensor({N, H}), Tensor({N, G * H}), Tensor({N, G * H})};
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> xa(G * H), ha(G * H);  // W_ih x + b_ih, W_hh h + b_hh
    for (int64_t j = 0; j < G * H; ++j) {
      double sx = b_ih[j], sh = b_hh[j];
      for (int64_t d = 0; d < D; ++d) sx += double(w_ih[j * D + d]) * x[n * D + d];
      for (int64_t k = 0; k < H; ++k) sh += double(w_hh[j * H + k]) * h_prev[n * H + k];
      xa[j] = sx;
      ha[j] = sh;
    }
    for (int64_t u = 0; u < H; ++u) {
      double h = 0;
      if (cell == CellKind::Lstm) {
        double a[4], g[4];
        for (int q = 0; q < 4; ++q) a[q] = xa[q * H + u] + ha[q * H + u];
        g[0] = sigmoid(a[0]), g[1] = sigmoid(a[1]), g[2] = std::tanh(a[2]), g[3] = sigmoid(a[3]);
        double c = g[1] * c_prev[n * H + u] + g[0] * g[2];
        h = g[3] * std::tanh(c);
        r.c[n * H + u] = float(c);
        for (int q = 0; q < 4; ++q) r.gates[n * G * H + q * H + u] = float(g[q]), r.pre[n * G * H + q * H + u] = float(a[q]);
      } else if (cell == CellKind::Gru) {
        double ar = xa[u] + ha[u], az = xa[H + u] + ha[H + u];
        double rg = sigmoid(ar), z = sigmoid(az);
        double an = xa[2 * H + u] + rg * ha[2 * H + u];
        double nn = std::tanh(an);
        h = (1 - z) * nn + z * h_prev[n * H + u];
        double g[3] = {rg, z, nn}, a[3] = {ar, az, an};
        for (int q = 0; q < 3; ++q) r.gates[n * G * H + q * H + u] = float(g[q]), r.pre[n * G * H + q * H + u] = float(a[q]);
      } else {
        double a = xa[u] + ha[u];
        h = cell == CellKind::RnnRelu ? std::max(0.0, a) : std::tanh(a);
        r.gates[n * H + u] = float(h);
        r.pre[n * H + u] = float(a);
      }
      r.h[n * H + u] = float(h);
    }
  }
  return r;
}

}  // namespace attnkit::ops
