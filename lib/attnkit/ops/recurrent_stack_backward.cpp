// The recurrent stack's backward (recurrent_stack.hpp): every layer and direction from the top, each
// back through its time loop (one thread, or a team over the hidden units meeting at a barrier a step),
// then its weights' gradients in one GEMM each.
// Legend: N batch, T steps, D input size, H hidden size, L layers, G gates, dirs 1 or 2.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "attnkit/ops/linear.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/recurrent_packed.hpp"
#include "attnkit/ops/recurrent_stack.hpp"
#include "attnkit/tensor/barrier.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/parallel_errors.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::ops {

namespace {

struct DirectionBackJob {
  CellKind cell = CellKind::Lstm;
  int64_t N = 0, T = 0, Din = 0, H = 0;
  bool reverse = false;
  const float* x = nullptr;          // [N, T, Din] the layer's input
  const int64_t* lengths = nullptr;
  const float* h0 = nullptr;         // [N, H] or nullptr (zeros)
  const float* c0 = nullptr;
  const RecurrentCache* cache = nullptr;
  const float* dout = nullptr;       // column dir*H of [N, T, dirs*H], or nullptr
  int64_t dout_width = 0;
  const float* dh_n = nullptr;       // [N, H] or nullptr
  const float* dc_n = nullptr;
  const RecurrentDirection* w = nullptr;  // W_ih for d x
  Tensor* g_w_ih = nullptr;          // [G*H, Din] (added into)
  Tensor* g_w_hh = nullptr;          // [G*H, H]
  Tensor* g_b_ih = nullptr;          // [G*H]
  Tensor* g_b_hh = nullptr;          // [G*H]
  float* dx = nullptr;               // [N, T, Din] (added into) or nullptr
  float* dh0 = nullptr;              // [N, H] (added into) or nullptr
  float* dc0 = nullptr;
  int team = 1;                      // threads of the time loop
  const TeamParts* parts = nullptr;  // W_hh [G*H, H] packed by the team's unit runs
};

// Back through the time loop (the forward's steps in reverse), then the weights in one GEMM each:
// the forward hoisted the input projection out of the loop, so d W_ih, d x (and d W_hh, d b) are
// products over all N*T rows at once; only dh_prev += da_h W_hh stays per step.
void backward_direction(const DirectionBackJob& job) {
  const int G = gate_count(job.cell);
  const int64_t N = job.N, T = job.T, H = job.H, GH = G * H, Din = job.Din;
  const bool gru = job.cell == CellKind::Gru, lstm = job.cell == CellKind::Lstm;
  const RecurrentCache& cache = *job.cache;
  // d loss / d gate arguments of every step, batch-first like x: row n*T + t.
  // Uninitialised (scratch, not zero-filled by one thread while the team waits): each step zeroes its
  // rows' columns below, in the team, before the cell backward adds into them.
  RecurrentScratch dA_buf(size_t(N * T * GH), 0), dAh_buf(gru ? size_t(N * T * GH) : 0, 1);
  float* dA = dA_buf.data();                      // [N*T, G*H] the W_ih x + b_ih part
  float* dAh = gru ? dAh_buf.data() : nullptr;    // [N*T, G*H] GRU's W_hh h_prev + b_hh part
  const float* dah = gru ? dAh : dA;
  // d h and d c double-buffered by step parity: step i reads buffer (T-1-i) & 1 and writes the other.
  Tensor dhb[2] = {Tensor({N, H}), Tensor({N, H})}, dcb[2] = {Tensor({N, H}), Tensor({N, H})};  // [N, H]
  Tensor zeros({N, H});
  if (job.dh_n) std::memcpy(dhb[0].data(), job.dh_n, sizeof(float) * N * H);
  if (job.dc_n) std::memcpy(dcb[0].data(), job.dc_n, sizeof(float) * N * H);
  auto time_of = [&](int64_t i) { return job.reverse ? T - 1 - i : i; };
  auto h_before = [&](int64_t i) -> const float* {  // h_prev of step i
    if (i > 0) return cache.h.data() + time_of(i - 1) * N * H;
    return job.h0 ? job.h0 : zeros.data();
  };
  auto c_before = [&](int64_t i) -> const float* {
    if (i > 0) return cache.c.data() + time_of(i - 1) * N * H;
    return job.c0 ? job.c0 : zeros.data();
  };
  // A team splits the hidden units in runs of whole blocks, as the forward does: part c owns the
  // columns [u0, u1) of d h and d c and the gate columns of those units, so the only meeting point
  // of a step is between the cell backward (every unit's da_h) and the product da_h W_hh.
  const int team = job.team;
  const TeamParts& parts = *job.parts;  // W_hh packed for the micro-kernel, per part (PackCache)
  auto units = [&](int c) { return parts.units[size_t(c)]; };
  // Step i, part c: the cell backward of its units (after adding d output), or (phase 1) its
  // columns of dh_prev += da_h W_hh.
  auto cell_part = [&](int c, int64_t i) {
    const int64_t t = time_of(i);
    const auto [u0, u1] = units(c);
    if (u0 >= u1) return;
    float* dh = dhb[(T - 1 - i) & 1].data();
    float* dh_next = dhb[(T - i) & 1].data();
    float* dc = dcb[(T - 1 - i) & 1].data();
    float* dc_next = dcb[(T - i) & 1].data();
    for (int64_t n = 0; n < N; ++n) {
      // output[n, t] = h_t for a real step (a padded step's output is a constant zero)
      if (job.dout && (!job.lengths || t < job.lengths[n])) {
        const float* src = job.dout + (n * T + t) * job.dout_width;
        for (int64_t u = u0; u < u1; ++u) dh[n * H + u] += src[u];
      }
      std::fill(dh_next + n * H + u0, dh_next + n * H + u1, 0.0f);
      std::fill(dc_next + n * H + u0, dc_next + n * H + u1, 0.0f);
    }
    for (int64_t n = 0; n < N; ++n)  // this part's columns of rows n*T + t (a padded step adds nothing)
      for (int g = 0; g < G; ++g) {
        std::fill_n(dA + (n * T + t) * GH + g * H + u0, u1 - u0, 0.0f);
        if (gru) std::fill_n(dAh + (n * T + t) * GH + g * H + u0, u1 - u0, 0.0f);
      }
    CellBackStep s;
    s.cell = job.cell, s.rows = N, s.hidden = H, s.unit_begin = u0, s.unit_end = u1;
    s.lengths = job.lengths, s.t = t;
    if (!cache.gates.empty()) s.gates = cache.gates.data() + t * N * GH, s.gates_stride = GH;
    s.h = cache.h.data() + t * N * H, s.h_stride = H;
    s.h_prev = h_before(i), s.h_prev_stride = H;
    if (lstm) {
      s.c_prev = c_before(i), s.c_prev_stride = H;
      s.tanh_c = cache.tanh_c.data() + t * N * H, s.tanh_c_stride = H;
      s.dc = dc, s.dc_stride = H;
      s.dc_prev = dc_next, s.dc_prev_stride = H;
    }
    if (gru) {
      s.hn = cache.hn.data() + t * N * H, s.hn_stride = H;
      s.dha = dAh + t * GH, s.dha_stride = T * GH;
    }
    s.dh = dh, s.dh_stride = H;
    s.da = dA + t * GH, s.da_stride = T * GH;
    s.dh_prev = dh_next, s.dh_prev_stride = H;
    cell_backward(s);
  };
  auto product_part = [&](int c, int64_t i) {
    const int64_t t = time_of(i);
    const auto [u0, u1] = units(c);
    if (u0 >= u1) return;
    // a = ... + h_prev W_hh^T:  dh_prev[:, u0:u1] [N, u1-u0] += da_h [N, G*H] W_hh[:, u0:u1] [G*H, u1-u0]
    // (W_hh's columns packed once with the model, as the forward's; only da_h is packed each step)
    parts.columns[size_t(c)].multiply_add(dah + t * GH, N, dhb[(T - i) & 1].data(), H, T * GH);
  };
  if (team <= 1) {
    for (int64_t i = T - 1; i >= 0; --i) {
      cell_part(0, i);
      product_part(0, i);
    }
  } else {
    // One parallel region, one barrier a step (between the two phases); the next step's cell part
    // touches only its own columns, which no other part reads. An exception must not leave the
    // region, nor a thread stop meeting the barrier: the first one is kept and rethrown after.
    StepBarrier barrier(team);
    ParallelErrors errors;
#pragma omp parallel num_threads(team)
    {
      const int id = omp_get_thread_num(), nt = omp_get_num_threads();  // OpenMP may give fewer
#pragma omp single
      barrier.resize(nt);
      for (int64_t i = T - 1; i >= 0; --i) {
        for (int c = id; c < team; c += nt) errors.run([&] { cell_part(c, i); });
        barrier.wait();
        for (int c = id; c < team; c += nt) errors.run([&] { product_part(c, i); });
      }
    }
    errors.rethrow();
  }
  const Tensor& dh = dhb[T & 1];  // after step 0: the gradient of h0
  const Tensor& dc = dcb[T & 1];
  if (job.dh0)
    for (int64_t k = 0; k < N * H; ++k) job.dh0[k] += dh[k];
  if (job.dc0 && lstm)
    for (int64_t k = 0; k < N * H; ++k) job.dc0[k] += dc[k];

  // h_prev of every step, batch-first: row n*T + t   [N*T, H]
  RecurrentScratch hprev_buf(size_t(N * T * H), 2);  // every row written below
  float* hprev = hprev_buf.data();
  for (int64_t i = 0; i < T; ++i) {
    const int64_t t = time_of(i);
    const float* src = h_before(i);
    for (int64_t n = 0; n < N; ++n) std::memcpy(hprev + (n * T + t) * H, src + n * H, sizeof(float) * H);
  }
  // xproj = x W_ih^T + b_ih:  d W_ih [G*H, Din] += dA^T [G*H, N*T] x [N*T, Din];  d b_ih += sum of dA's rows
  gemm(Trans::Yes, Trans::No, GH, Din, N * T, 1.0f, dA, GH, job.x, Din, 1.0f, job.g_w_ih->data(), Din);
  // hproj = h_prev W_hh^T + b_hh:  d W_hh [G*H, H] += dA_h^T [G*H, N*T] h_prev [N*T, H]
  gemm(Trans::Yes, Trans::No, GH, H, N * T, 1.0f, dah, GH, hprev, H, 1.0f, job.g_w_hh->data(), H);
  // d b_ih and d b_hh: the column sums of dA (one sum for both unless GRU keeps dA_h apart)
  std::vector<float> db(static_cast<size_t>(GH)), dbh(gru ? static_cast<size_t>(GH) : 0);
  column_sums(dA, N * T, GH, db.data());
  if (gru) column_sums(dAh, N * T, GH, dbh.data());
  for (int64_t j = 0; j < GH; ++j) {
    (*job.g_b_ih)[j] += db[size_t(j)];
    (*job.g_b_hh)[j] += (gru ? dbh : db)[size_t(j)];
  }
  // dx [N*T, Din] += dA [N*T, G*H] W_ih [G*H, Din]
  if (job.dx)
    gemm(Trans::No, Trans::No, N * T, Din, GH, 1.0f, dA, GH, job.w->w_ih->data(), Din, 1.0f, job.dx,
              Din);
}

// A weight's gradient to add into: zeros of the weight's shape first if it has another (an empty grad).
Tensor* grad_buffer(Tensor* grad, const Shape& shape) {
  if (grad->shape() != shape) *grad = Tensor(shape);
  return grad;
}

}  // namespace

void recurrent_stack_backward(const RecurrentWeights& weights, const RecurrentInputs& in, const RecurrentResult& r,
                              const RecurrentGradOutputs& dy, const RecurrentGradInputs& grads,
                              const std::vector<RecurrentWeightGrads>& weight_grads, const RunOptions& options) {
  const RecurrentConfig& config = weights.config;
  const int dirs = config.directions(), L = config.layers;
  const int64_t H = config.hidden_size, GH = gate_count(config.cell) * H;
  AK_CHECK(weights.directions.size() == size_t(L * dirs) && weight_grads.size() == weights.directions.size(),
           "recurrent backward: {} weight sets and {} gradient sets for {} layers x {} directions",
           weights.directions.size(), weight_grads.size(), L, dirs);
  for (const RecurrentDirection& d : weights.directions)
    AK_CHECK(!d.lowp_ih && !d.lowp_hh, "recurrent backward: the weights are in lower precision (inference only); "
             "a backward pass needs the float32 weights");
  AK_CHECK(in.x, "recurrent backward: no input");
  const Tensor& x = *in.x;
  const int64_t N = x.dim(0), T = x.dim(1);
  AK_CHECK(r.caches.size() == size_t(L * dirs) && r.layer_inputs.size() == size_t(L - 1),
           "recurrent backward: the forward pass kept no cache (run it with RunOptions::keep_cache)");
  const Shape out_shape{N, T, dirs * H}, state_shape{L * dirs, N, H};
  auto check = [](const Tensor* t, const Shape& want, const char* name) {
    AK_CHECK(!t || t->shape() == want, "recurrent backward: the gradient of {} has shape {}, expected {}", name,
             t ? t->shape_str() : "", shape_str(want));
  };
  check(dy.output, out_shape, "output");
  check(dy.h_n, state_shape, "h_n");
  check(dy.c_n, state_shape, "c_n");
  AK_CHECK(!dy.c_n || config.cell == CellKind::Lstm, "recurrent backward: a gradient of c_n, but a {} has no c_n",
           cell_name(config.cell));
  check(grads.x, x.shape(), "input");
  check(grads.h0, state_shape, "h0");
  check(grads.c0, state_shape, "c0");

  // d loss / d (layer k's output) -> d loss / d (its input) = the layer below's output
  Tensor d_above;  // [N, T, dirs*H]
  const float* dout = dy.output ? dy.output->data() : nullptr;
  for (int k = L - 1; k >= 0; --k) {
    const Tensor& input = k == 0 ? x : r.layer_inputs[size_t(k - 1)];
    const int64_t Din = input.dim(2);
    Tensor d_input;
    float* dx = nullptr;
    if (k > 0) {
      d_input = Tensor({N, T, Din});
      dx = d_input.data();
    } else if (grads.x) {
      dx = grads.x->data();
    }
    for (int d = 0; d < dirs; ++d) {
      const int idx = k * dirs + d;
      const RecurrentDirection& w = weights.directions[size_t(idx)];
      const RecurrentWeightGrads& wg = weight_grads[size_t(idx)];
      DirectionBackJob j;
      j.cell = config.cell;
      j.N = N, j.T = T, j.Din = Din, j.H = H;
      j.reverse = d == 1;
      j.x = input.data();
      j.lengths = in.lengths ? in.lengths->data() : nullptr;
      j.h0 = in.h0 ? in.h0->data() + idx * N * H : nullptr;
      j.c0 = in.c0 ? in.c0->data() + idx * N * H : nullptr;
      j.cache = &r.caches[size_t(idx)];
      j.dout = dout ? dout + d * H : nullptr;
      j.dout_width = dirs * H;
      j.dh_n = dy.h_n ? dy.h_n->data() + idx * N * H : nullptr;
      j.dc_n = dy.c_n ? dy.c_n->data() + idx * N * H : nullptr;
      j.w = &w;
      j.g_w_ih = grad_buffer(wg.w_ih, w.w_ih->shape()), j.g_w_hh = grad_buffer(wg.w_hh, w.w_hh->shape());
      j.g_b_ih = grad_buffer(wg.b_ih, {GH}), j.g_b_hh = grad_buffer(wg.b_hh, {GH});
      j.dx = dx;
      j.dh0 = grads.h0 ? grads.h0->data() + idx * N * H : nullptr;
      j.dc0 = grads.c0 ? grads.c0->data() + idx * N * H : nullptr;
      j.team = recurrent_team_size(num_threads(), N, H, gate_count(config.cell), options.min_macs_per_thread_backward);
      j.parts = &w.packed->backward_parts(j.team, *w.w_hh, H);
      backward_direction(j);
    }
    d_above = std::move(d_input);
    dout = d_above.empty() ? nullptr : d_above.data();
  }
}

}  // namespace attnkit::ops
