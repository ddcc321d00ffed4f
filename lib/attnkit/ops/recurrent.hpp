// Recurrent cells: vanilla RNN (tanh, relu), LSTM, GRU. Fused forward kernels that apply a cell to a
// whole batch at once (vectorised gate arithmetic), and slow, obvious reference cells beside them
// for the tests.
//
// Legend: N batch, T time steps, D input size, H hidden size, G gates per cell (RNN 1, LSTM 4, GRU 3).
//
// Gate orders are PyTorch's: LSTM i, f, g, o; GRU r, z, n.
//   RNN   h = act(a),                      a = W_ih x + b_ih + W_hh h_prev + b_hh, act = tanh | relu
//   LSTM  i, f, o = σ(a_i, a_f, a_o);  g = tanh(a_g);  c = f ⊙ c_prev + i ⊙ g;  h = o ⊙ tanh(c)
//   GRU   r = σ(x_r + h_r);  z = σ(x_z + h_z);  n = tanh(x_n + r ⊙ h_n);  h = (1 - z) ⊙ n + z ⊙ h_prev
//         with x_* = W_i* x + b_i* and h_* = W_h* h_prev + b_h* (r multiplies W_hn h + b_hn, as PyTorch)
//
// Column layouts of the G*H pre-activation columns:
//   standard  gate-major, column g*H + u (the rows of PyTorch's weight_ih)
//   blocked   units in blocks of kUnitBlock; block k (units kB .. kB+w-1, w <= kUnitBlock) owns the
//             G*w columns starting at G*k*B, gate g of unit u at G*k*B + g*w + (u - k*B).
//             A run of whole blocks is a contiguous run of columns that holds every gate of its
//             units: one thread multiplies h_prev by its own columns of W_hh and applies the cell to
//             its own units, with no barrier between the GEMM and the gates.
#pragma once
#include <cstdint>
#include <string>

#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/scratch_tensor.hpp"
#include "attnkit/tensor/tensor.hpp"

namespace attnkit::ops {

enum class CellKind { RnnTanh, RnnRelu, Lstm, Gru };

int gate_count(CellKind cell);        // 1, 1, 4, 3
const char* cell_name(CellKind cell); // "rnn", "rnn-relu", "lstm", "gru"
inline constexpr EnumName<CellKind> kCellNames[] = {
    {CellKind::RnnTanh, "rnn"}, {CellKind::RnnRelu, "rnn-relu"}, {CellKind::Lstm, "lstm"}, {CellKind::Gru, "gru"}};

constexpr int64_t kUnitBlock = 16;  // one AVX-512 register of float32

// Column of (unit, gate) in the blocked layout of G*H columns.
int64_t blocked_column(int64_t unit, int gate, int64_t hidden, int gates);

// One time step of a cell over a batch, for the units [unit_begin, unit_end) (block-aligned:
// unit_begin a multiple of kUnitBlock, unit_end one too or H). Pointers with a row stride; the
// optional records are nullptr to skip. A row n with lengths != nullptr and t >= lengths[n] is a
// padded step: its state is carried over unchanged and its output and records are zero.
struct CellStep {
  CellKind cell = CellKind::Lstm;
  int64_t rows = 0;    // N
  int64_t hidden = 0;  // H
  int64_t unit_begin = 0, unit_end = 0;
  const int64_t* lengths = nullptr;  // [N] or nullptr (every row active)
  int64_t t = 0;                     // the step, compared with lengths

  // inputs, blocked layout [N, G*H]: the gate arguments are xproj + hproj + bias
  const float* xproj = nullptr; int64_t xproj_stride = 0;  // W_ih x (LSTM, RNN: may already hold + W_hh h_prev)
  const float* hproj = nullptr; int64_t hproj_stride = 0;  // W_hh h_prev, or nullptr when xproj holds it (not GRU)
  int64_t proj_col0 = 0;  // the blocked column at xproj[0] and hproj[0] (buffers of some units' columns only)
  const float* bias = nullptr;                              // [G*H] blocked: b_ih + b_hh (GRU's n: b_in only)
  const float* b_hn = nullptr;                              // GRU: [H]
  // state in, standard layout [N, H]
  const float* h_prev = nullptr; int64_t h_prev_stride = 0;
  const float* c_prev = nullptr; int64_t c_prev_stride = 0;  // LSTM
  // state out [N, H]
  float* h = nullptr; int64_t h_stride = 0;
  float* c = nullptr; int64_t c_stride = 0;  // LSTM
  float* out = nullptr; int64_t out_stride = 0;  // optional: the output row (h, or zero when padded)

  // optional records for backward and --trace (standard layout)
  float* gates = nullptr; int64_t gates_stride = 0;    // [N, G*H] activated gates
  float* pre = nullptr; int64_t pre_stride = 0;        // [N, G*H] each gate's argument: a (GRU: x_n + r ⊙ h_n for n)
  float* tanh_c = nullptr; int64_t tanh_c_stride = 0;  // LSTM [N, H]
  float* hn = nullptr; int64_t hn_stride = 0;          // GRU [N, H]: W_hn h_prev + b_hn
};

// Fast kernels (Eigen arrays, one AVX-512 block of units at a time).
void rnn_cell_forward(const CellStep& s);
void lstm_cell_forward(const CellStep& s);
void gru_cell_forward(const CellStep& s);
void cell_forward(const CellStep& s);  // dispatches on s.cell

// The backward of one time step over a batch, all H units, standard layouts (gate q of unit u at
// column q*H + u). Reads the forward's records of the step (RecurrentCache rows), d loss / d h and
// d loss / d c of the step, and ADDS into: the gate-argument gradients (da: the W_ih x + b_ih part,
// dha: GRU's W_hh h_prev + b_hh part, which differs in n) and the part of d h_prev / d c_prev that
// does not go through W_hh (the caller adds dha W_hh into dh_prev). A padded row (t >= lengths[n])
// carried its state: dh_prev += dh, dc_prev += dc, nothing into da.
//   RNN   da = dh ⊙ act'(a)                     (tanh: 1 - h², relu: h > 0)
//   LSTM  dc_t = dc + dh ⊙ o ⊙ (1 - tanh²(c));  da_i = dc_t ⊙ g ⊙ i(1-i);  da_f = dc_t ⊙ c_prev ⊙ f(1-f)
//         da_g = dc_t ⊙ i ⊙ (1 - g²);  da_o = dh ⊙ tanh(c) ⊙ o(1-o);  dc_prev = dc_t ⊙ f
//   GRU   da_n = dh ⊙ (1-z) ⊙ (1-n²);  da_z = dh ⊙ (h_prev - n) ⊙ z(1-z);  da_r = da_n ⊙ h_n ⊙ r(1-r)
//         dha = [da_r, da_z, da_n ⊙ r];  dh_prev += dh ⊙ z
struct CellBackStep {
  CellKind cell = CellKind::Lstm;
  int64_t rows = 0;    // N
  int64_t hidden = 0;  // H
  int64_t unit_begin = 0, unit_end = -1;  // the units [begin, end), block-aligned as CellStep's; -1: H
  const int64_t* lengths = nullptr;  // [N] or nullptr
  int64_t t = 0;

  // the forward's records of this step
  const float* gates = nullptr; int64_t gates_stride = 0;    // [N, G*H] activated (LSTM, GRU)
  const float* h = nullptr; int64_t h_stride = 0;            // [N, H] this step's h (RNN)
  const float* h_prev = nullptr; int64_t h_prev_stride = 0;  // [N, H] GRU
  const float* c_prev = nullptr; int64_t c_prev_stride = 0;  // [N, H] LSTM
  const float* tanh_c = nullptr; int64_t tanh_c_stride = 0;  // [N, H] LSTM
  const float* hn = nullptr; int64_t hn_stride = 0;          // [N, H] GRU: W_hn h_prev + b_hn
  // gradients in
  const float* dh = nullptr; int64_t dh_stride = 0;  // [N, H] d loss / d h_t (output + later steps)
  const float* dc = nullptr; int64_t dc_stride = 0;  // [N, H] LSTM: d loss / d c_t from later steps
  // gradients out (added into)
  float* da = nullptr; int64_t da_stride = 0;            // [N, G*H]
  float* dha = nullptr; int64_t dha_stride = 0;          // [N, G*H] GRU
  float* dh_prev = nullptr; int64_t dh_prev_stride = 0;  // [N, H]
  float* dc_prev = nullptr; int64_t dc_prev_stride = 0;  // [N, H] LSTM
};
void rnn_cell_backward(const CellBackStep& s);
void lstm_cell_backward(const CellBackStep& s);
void gru_cell_backward(const CellBackStep& s);
void cell_backward(const CellBackStep& s);  // dispatches on s.cell

// What the backward pass of one layer and direction needs, time-major, standard layout.
// Filled by the recurrent stack when asked (RunOptions::keep_cache, recurrent_stack.hpp); `pre` only for traces.
// Scratch (recycled, never zero-filled): every step writes all of its rows, padded ones included.
struct RecurrentCache {
  attnkit::detail::ScratchTensor gates;   // [T, N, G*H] activated gates (RNN: empty, h is its own derivative source)
  attnkit::detail::ScratchTensor pre;     // [T, N, G*H] gate arguments (trace only)
  attnkit::detail::ScratchTensor c;       // [T, N, H] LSTM
  attnkit::detail::ScratchTensor tanh_c;  // [T, N, H] LSTM
  attnkit::detail::ScratchTensor hn;      // [T, N, H] GRU: W_hn h_prev + b_hn
  attnkit::detail::ScratchTensor h;       // [T, N, H]
};

// The slow, obvious reference: one step in double precision, standard layouts, straight from
// PyTorch-layout weights. x [N, D], h_prev [N, H], c_prev [N, H] (LSTM, else ignored),
// w_ih [G*H, D], w_hh [G*H, H], b_ih [G*H], b_hh [G*H].
struct CellReference {
  Tensor h;      // [N, H]
  Tensor c;      // [N, H] LSTM
  Tensor gates;  // [N, G*H] activated (RNN: h)
  Tensor pre;    // [N, G*H] gate arguments
};
CellReference cell_reference(CellKind cell, const Tensor& x, const Tensor& h_prev, const Tensor& c_prev,
                             const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh);

}  // namespace attnkit::ops
