// The recurrent stack with lower-precision weights (ops/recurrent_stack.hpp RecurrentDirection::lowp_ih/lowp_hh,
// nn::Recurrent::set_precision): in int8 and bf16 the forward equals, bit for bit, a plain composition of the
// kernels (ops::lowp_linear of x by W_ih and of h_prev by W_hh, from copies made here in PyTorch's gate-major
// layout, then the float32 cell), over every cell kind, two layers, two directions, initial states and lengths,
// on one thread and a team over the units;
// it stays within a bound of PyTorch's float32 outputs (tests/fixtures/recurrent); float32 changes no bit; a
// recorded forward, a forward for backward and backward refuse the copies; --keep-fp32 patterns by name.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attnkit/autograd/var.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/nn/precision.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/ops/lowp_weights.hpp"
#include "attnkit/ops/recurrent.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "test_util.hpp"

using namespace attnkit;
using nn::Recurrent;
using nn::WeightLayout;
using ops::CellKind;
using ops::Precision;

namespace {

io::Value fixture(const std::string& name) {
  std::string path = std::string(ATTNKIT_FIXTURES) + "/recurrent/" + name + ".json";
  return io::parse_json(io::read_text(path), path);
}

const Tensor* optional_member(const io::Value& v, const std::string& name) {
  const io::Value* m = v.find(name);
  return m && m->is_tensor() ? &m->tensor() : nullptr;
}

CellKind cell_of(const std::string& name) {
  if (name.rfind("torch_rnn_relu", 0) == 0) return CellKind::RnnRelu;
  if (name.rfind("torch_rnn", 0) == 0) return CellKind::RnnTanh;
  if (name.rfind("torch_gru", 0) == 0) return CellKind::Gru;
  return CellKind::Lstm;
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  float d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// The composition: per layer and direction, xp = x W_ih^T and, each step, hp = h_prev W_hh^T by ops::lowp_linear
// on copies of the PyTorch-layout weights (gate-major rows), moved into the cells' blocked columns; then the
// float32 cell (ops::cell_forward) with b_ih + b_hh folded (GRU: b_hn apart). Same result shapes as the stack.
ops::RecurrentResult composed(const Recurrent& model, Precision p, const ops::RecurrentInputs& in) {
  const ops::RecurrentConfig& cfg = model.config();
  const int dirs = cfg.directions(), G = ops::gate_count(cfg.cell);
  const int64_t N = in.x->dim(0), T = in.x->dim(1), H = cfg.hidden_size, GH = G * H;
  const bool lstm = cfg.cell == CellKind::Lstm, gru = cfg.cell == CellKind::Gru;
  ops::RecurrentResult r;
  r.h_n = Tensor({cfg.layers * dirs, N, H});
  if (lstm) r.c_n = Tensor({cfg.layers * dirs, N, H});
  std::vector<int64_t> none;
  Tensor layer_in = *in.x;
  for (int k = 0; k < cfg.layers; ++k) {
    const int64_t Din = layer_in.dim(2);
    Tensor out({N, T, dirs * H});
    for (int d = 0; d < dirs; ++d) {
      const int idx = k * dirs + d;
      const Recurrent::DirectionParams& w = model.direction(idx);
      const auto wih = ops::make_lowp_weights(w.w_ih.value.data(), GH, Din, p, "w_ih");
      const auto whh = ops::make_lowp_weights(w.w_hh.value.data(), GH, H, p, "w_hh");
      std::vector<float> bias(static_cast<size_t>(GH)), b_hn(static_cast<size_t>(H));
      for (int g = 0; g < G; ++g)
        for (int64_t u = 0; u < H; ++u) {
          const bool hn = gru && g == 2;
          bias[size_t(ops::blocked_column(u, g, H, G))] = w.b_ih.value[g * H + u] + (hn ? 0.0f : w.b_hh.value[g * H + u]);
          if (hn) b_hn[size_t(u)] = w.b_hh.value[g * H + u];
        }
      auto blocked = [&](const std::vector<float>& standard, int64_t rows) {  // [rows, GH] -> blocked columns
        std::vector<float> b(standard.size());
        for (int64_t n = 0; n < rows; ++n)
          for (int g = 0; g < G; ++g)
            for (int64_t u = 0; u < H; ++u)
              b[size_t(n * GH + ops::blocked_column(u, g, H, G))] = standard[size_t(n * GH + g * H + u)];
        return b;
      };
      std::vector<float> xs(size_t(N * T * GH));
      ops::lowp_linear(wih, layer_in.data(), N * T, Din, nullptr, xs.data(), GH);
      const std::vector<float> xp = blocked(xs, N * T);
      std::vector<float> h(size_t(N * H), 0.0f), c(size_t(N * H), 0.0f), h2(h), c2(c);
      if (in.h0) std::copy_n(in.h0->data() + idx * N * H, N * H, h.begin());
      if (in.c0) std::copy_n(in.c0->data() + idx * N * H, N * H, c.begin());
      for (int64_t i = 0; i < T; ++i) {
        const int64_t t = d == 1 ? T - 1 - i : i;
        std::vector<float> hs(size_t(N * GH));
        ops::lowp_linear(whh, h.data(), N, H, nullptr, hs.data(), GH);
        const std::vector<float> hp = blocked(hs, N);
        ops::CellStep s;
        s.cell = cfg.cell, s.rows = N, s.hidden = H, s.unit_begin = 0, s.unit_end = H;
        s.lengths = in.lengths ? in.lengths->data() : nullptr, s.t = t;
        s.xproj = xp.data() + t * GH, s.xproj_stride = T * GH;
        s.hproj = hp.data(), s.hproj_stride = GH;
        s.bias = bias.data(), s.b_hn = gru ? b_hn.data() : nullptr;
        s.h_prev = h.data(), s.h_prev_stride = H, s.h = h2.data(), s.h_stride = H;
        if (lstm) s.c_prev = c.data(), s.c_prev_stride = H, s.c = c2.data(), s.c_stride = H;
        s.out = out.data() + t * dirs * H + d * H, s.out_stride = T * dirs * H;
        ops::cell_forward(s);
        std::swap(h, h2), std::swap(c, c2);
      }
      std::copy(h.begin(), h.end(), r.h_n.data() + idx * N * H);
      if (lstm) std::copy(c.begin(), c.end(), r.c_n.data() + idx * N * H);
    }
    layer_in = out;
  }
  r.output = layer_in;
  return r;
}

const std::vector<std::string> kCases = {
    "torch_lstm_1layer",    "torch_lstm_2layer_bi_h0",     "torch_lstm_2layer_bi_lengths", "torch_lstm_h20_bi",
    "torch_lstm_2layer_lengths", "torch_lstm_nobias",      "torch_gru_1layer",             "torch_gru_2layer_bi_h0",
    "torch_gru_2layer_bi_lengths", "torch_gru_h20_lengths", "torch_rnn_1layer",            "torch_rnn_2layer_bi_lengths",
    "torch_rnn_relu_2layer_bi_h0"};

// The bound the outputs (h in (-1, 1) for LSTM and GRU) keep from PyTorch's float32 ones on these fixtures.
float bound(Precision p) { return p == Precision::Int8 ? 0.03f : 0.01f; }

}  // namespace

TEST_CASE("recurrent in int8 and bf16: the kernels' products and the float32 cell, and near PyTorch's float32") {
  for (const std::string& name : kCases) {
    CAPTURE(name);
    const io::Value f = fixture(name);
    const CellKind cell = cell_of(name);
    ops::RecurrentInputs in;
    in.x = &f.find("x")->tensor();
    in.h0 = optional_member(f, "h0");
    in.c0 = optional_member(f, "c0");
    std::vector<int64_t> lengths;
    if (const Tensor* l = optional_member(f, "lengths")) {
      lengths = io::lengths_from(*l, in.x->dim(0), in.x->dim(1), "lengths");
      in.lengths = &lengths;
    }
    const io::Value& expected = *f.find("expected");
    for (Precision p : {Precision::Int8, Precision::Bf16}) {
      CAPTURE(ops::precision_name(p));
      Recurrent model = Recurrent::from_bundle(*f.find("weights"), cell, WeightLayout::Torch);
      nn::PrecisionPlan plan(p);
      model.set_precision(plan);
      CHECK(plan.lowered() == 2 * model.direction_count());
      const ops::RecurrentResult got = model.forward(in);
      const ops::RecurrentResult want = composed(model, p, in);
      CHECK(max_abs_diff(got.output, want.output) == 0.0f);
      CHECK(max_abs_diff(got.h_n, want.h_n) == 0.0f);
      if (cell == CellKind::Lstm) CHECK(max_abs_diff(got.c_n, want.c_n) == 0.0f);
      CHECK(max_abs_diff(got.output, expected.find("output")->tensor()) <= bound(p));
      CHECK(max_abs_diff(got.h_n, expected.find("h_n")->tensor()) <= bound(p));
    }
  }
}

TEST_CASE("recurrent: a float32 plan changes no bit; the copies follow the weights; keep patterns by name") {
  const io::Value f = fixture("torch_lstm_2layer_bi_lengths");
  ops::RecurrentInputs in;
  in.x = &f.find("x")->tensor();
  Recurrent plain = Recurrent::from_bundle(*f.find("weights"), CellKind::Lstm, WeightLayout::Torch);
  Recurrent model = plain;
  nn::PrecisionPlan fp32;
  model.set_precision(fp32);
  CHECK(!model.lowered());
  CHECK(max_abs_diff(model.forward(in).output, plain.forward(in).output) == 0.0f);

  nn::PrecisionPlan keep(Precision::Int8, {"weight_hh_*"});
  model.set_precision(keep);
  CHECK(keep.lowered() == 4);
  CHECK(keep.kept() == 4);
  CHECK(keep.unmatched().empty());
  const Tensor mixed = model.forward(in).output;
  CHECK(max_abs_diff(mixed, plain.forward(in).output) > 0.0f);
  CHECK(max_abs_diff(mixed, plain.forward(in).output) <= bound(Precision::Int8));

  // a changed weight (touch): the int8 copy is remade from it
  Recurrent changed = plain;
  nn::PrecisionPlan int8(Precision::Int8);
  changed.set_precision(int8);
  const Tensor before = changed.forward(in).output;
  Recurrent::DirectionParams& d0 = changed.direction(0);
  for (int64_t i = 0; i < d0.w_ih.value.numel(); ++i) d0.w_ih.value[i] *= 0.5f;
  d0.w_ih.touch();
  const Tensor after = changed.forward(in).output;
  CHECK(max_abs_diff(before, after) > 0.0f);
  CHECK(max_abs_diff(after, composed(changed, Precision::Int8, in).output) == 0.0f);
}

TEST_CASE("recurrent in lower precision: a recorded forward, a forward for backward and backward are refused") {
  const io::Value f = fixture("torch_gru_1layer");
  Recurrent model = Recurrent::from_bundle(*f.find("weights"), CellKind::Gru, WeightLayout::Torch);
  nn::PrecisionPlan plan(Precision::Bf16);
  model.set_precision(plan);
  const Tensor& x = f.find("x")->tensor();
  CHECK(test::error_of([&] { model.forward(autograd::Var(x)); }).find("inference only") != std::string::npos);
  {
    autograd::NoGrad no_grad;
    CHECK(model.forward(autograd::Var(x)).output.value().shape() == Shape{x.dim(0), x.dim(1), model.config().hidden_size});
  }
  ops::RecurrentInputs in;
  in.x = &x;
  ops::RunOptions keep;
  keep.keep_cache = true;
  CHECK(test::error_of([&] { model.forward(in, keep); }).find("inference only") != std::string::npos);
  const ops::RecurrentResult r = model.forward(in);
  Tensor dx(x.shape());
  ops::RecurrentGradOutputs dy;
  dy.output = &r.output;
  ops::RecurrentGradInputs gi;
  gi.x = &dx;
  CHECK(test::error_of([&] { model.backward(in, r, dy, gi); }).find("lower precision") != std::string::npos);
}

TEST_CASE("recurrent in lower precision: a team of threads over the units, blocks of steps, the same bits") {
  // Shapes whose steps make two blocks of input products (N rows a step, about 256 rows a block) and whose
  // units split into shares of whole panels (GRU and RNN: 4 unit blocks a share); 1 and 2 threads, a team even
  // for these small steps; against the plain composition, bit for bit, and the trace's records alike.
  struct Case {
    CellKind cell;
    int64_t N, T, D, H;
  };
  const Case cases[] = {{CellKind::Lstm, 5, 70, 24, 40}, {CellKind::Gru, 3, 90, 17, 72}, {CellKind::RnnTanh, 2, 130, 9, 70}};
  for (const Case& c : cases) {
    CAPTURE(std::string(ops::cell_name(c.cell)));
    ops::RecurrentConfig cfg;
    cfg.cell = c.cell, cfg.input_size = c.D, cfg.hidden_size = c.H, cfg.layers = 2, cfg.bidirectional = true;
    Rng rng(17);
    const Recurrent plain = Recurrent::random(cfg, rng);
    const Tensor x = rand_normal({c.N, c.T, c.D}, rng);
    std::vector<int64_t> lengths(static_cast<size_t>(c.N), c.T);
    lengths[1] = c.T / 2 + 1;
    ops::RecurrentInputs in;
    in.x = &x, in.lengths = &lengths;
    for (Precision p : {Precision::Int8, Precision::Bf16}) {
      CAPTURE(ops::precision_name(p));
      Recurrent model = plain;
      nn::PrecisionPlan plan(p);
      model.set_precision(plan);
      const ops::RecurrentResult want = composed(model, p, in);
      std::vector<ops::RecurrentResult> runs;
      for (int threads : {1, 2}) {
        CAPTURE(threads);
        const int old = num_threads();
        set_num_threads(threads);
        ops::RunOptions opt;
        opt.min_macs_per_thread = 1, opt.trace = true;
        runs.push_back(model.forward(in, opt));
        set_num_threads(old);
        CHECK(max_abs_diff(runs.back().output, want.output) == 0.0f);
        CHECK(max_abs_diff(runs.back().h_n, want.h_n) == 0.0f);
        if (c.cell == CellKind::Lstm) CHECK(max_abs_diff(runs.back().c_n, want.c_n) == 0.0f);
      }
      for (int d = 0; d < 2; ++d) {
        const ops::RecurrentCache &one = runs[0].caches[size_t(d)], &two = runs[1].caches[size_t(d)];
        REQUIRE(one.h.numel() == c.T * c.N * c.H);
        REQUIRE(one.pre.numel() == two.pre.numel());
        CHECK(std::memcmp(one.h.data(), two.h.data(), sizeof(float) * size_t(one.h.numel())) == 0);
        CHECK(std::memcmp(one.pre.data(), two.pre.data(), sizeof(float) * size_t(one.pre.numel())) == 0);
      }
    }
    // W_hh kept in float32 (a share of its columns by the float32 GEMM), W_ih in int8: 1 and 2 threads agree
    Recurrent mixed = plain;
    nn::PrecisionPlan keep(Precision::Int8, {"weight_hh_*"});
    mixed.set_precision(keep);
    CHECK(keep.kept() == 4);
    std::vector<Tensor> outs;
    for (int threads : {1, 2}) {
      const int old = num_threads();
      set_num_threads(threads);
      ops::RunOptions opt;
      opt.min_macs_per_thread = 1;
      outs.push_back(mixed.forward(in, opt).output);
      set_num_threads(old);
    }
    CHECK(max_abs_diff(outs[0], outs[1]) <= 1e-6f);
    CHECK(max_abs_diff(outs[0], plain.forward(in).output) <= bound(Precision::Int8));
  }
}
