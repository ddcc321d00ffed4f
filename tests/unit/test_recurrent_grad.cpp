// Recurrent backward: each cell's batch backward (ops) and the layer backward (nn: layers,
// bidirectional, h0/c0, padded lengths, every weight) against central finite differences of a loss
// computed in double (the reference cell / a double reference layer), and against PyTorch autograd
// golden gradients (tests/fixtures/gen_recurrent_grad.py).
// Legend: N batch, T steps, D input size, H hidden size, G gates, L layers, dirs 1 or 2.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnkit/app/recurrent_request.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/ops/recurrent.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "gradcheck.hpp"
#include "test_util.hpp"

using namespace attnkit;
using nn::Recurrent;
using ops::CellKind;
using ops::Trans;

namespace {

const CellKind kCells[] = {CellKind::RnnTanh, CellKind::RnnRelu, CellKind::Lstm, CellKind::Gru};

Tensor scaled(Tensor t, float k) {
  for (float& v : t.values()) v *= k;
  return t;
}

// ---- one cell step ----

struct CellCase {
  CellKind cell;
  int64_t N, D, H;
  Tensor x, h_prev, c_prev, w_ih, w_hh, b_ih, b_hh;  // PyTorch layouts
  std::vector<int64_t> lengths;                         // t = 0: a row with length 0 is padded
  Tensor dyh, dyc;                                      // upstream d loss / d h, d c
};

// h and c of the step from the double reference cell; padded rows carry h_prev, c_prev.
double cell_loss(const CellCase& k) {
  ops::CellReference r = ops::cell_reference(k.cell, k.x, k.h_prev, k.c_prev, k.w_ih, k.w_hh, k.b_ih, k.b_hh);
  double L = 0;
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t u = 0; u < k.H; ++u) {
      const int64_t i = n * k.H + u;
      const bool pad = k.lengths[n] == 0;
      L += double(k.dyh[i]) * (pad ? k.h_prev[i] : r.h[i]);
      if (k.cell == CellKind::Lstm) L += double(k.dyc[i]) * (pad ? k.c_prev[i] : r.c[i]);
    }
  return L;
}

}  // namespace

TEST_CASE("recurrent cell backward: every cell against finite differences of the double reference cell") {
  Rng rng(101);
  for (CellKind cell : kCells) {
    for (int64_t H : {5, 17}) {  // a tail block only; a full block of 16 and a tail of 1
      const std::string cell_name = ops::cell_name(cell);
    CAPTURE(cell_name);
      CAPTURE(H);
      const int G = ops::gate_count(cell);
      const int64_t N = 3, D = 4, GH = G * H;
      CellCase k;
      k.cell = cell, k.N = N, k.D = D, k.H = H;
      k.x = rand_normal({N, D}, rng), k.h_prev = rand_normal({N, H}, rng), k.c_prev = rand_normal({N, H}, rng);
      k.w_ih = scaled(rand_normal({GH, D}, rng), 0.5f), k.w_hh = scaled(rand_normal({GH, H}, rng), 0.5f);
      k.b_ih = rand_normal({GH}, rng), k.b_hh = rand_normal({GH}, rng);
      k.lengths = {1, 0, 1};  // row 1 is padded at this step
      k.dyh = rand_normal({N, H}, rng), k.dyc = rand_normal({N, H}, rng);

      // the forward's records, from the reference cell
      ops::CellReference r = ops::cell_reference(cell, k.x, k.h_prev, k.c_prev, k.w_ih, k.w_hh, k.b_ih, k.b_hh);
      Tensor tanh_c({N, H}), hn({N, H});
      for (int64_t i = 0; i < N * H; ++i) tanh_c[i] = std::tanh(r.c[i]);
      if (cell == CellKind::Gru)  // W_hn h_prev + b_hn
        for (int64_t n = 0; n < N; ++n)
          for (int64_t u = 0; u < H; ++u) {
            double s = k.b_hh[2 * H + u];
            for (int64_t j = 0; j < H; ++j) s += double(k.w_hh[(2 * H + u) * H + j]) * k.h_prev[n * H + j];
            hn[n * H + u] = float(s);
          }
      Tensor da({N, GH}), dha({N, GH}), dh_prev({N, H}), dc_prev({N, H});
      ops::CellBackStep s;
      s.cell = cell, s.rows = N, s.hidden = H, s.lengths = k.lengths.data(), s.t = 0;
      s.gates = r.gates.data(), s.gates_stride = GH;
      s.h = r.h.data(), s.h_stride = H;
      s.h_prev = k.h_prev.data(), s.h_prev_stride = H;
      s.c_prev = k.c_prev.data(), s.c_prev_stride = H;
      s.tanh_c = tanh_c.data(), s.tanh_c_stride = H;
      s.hn = hn.data(), s.hn_stride = H;
      s.dh = k.dyh.data(), s.dh_stride = H;
      if (cell == CellKind::Lstm) {
        s.dc = k.dyc.data(), s.dc_stride = H;
        s.dc_prev = dc_prev.data(), s.dc_prev_stride = H;
      }
      s.da = da.data(), s.da_stride = GH;
      if (cell == CellKind::Gru) s.dha = dha.data(), s.dha_stride = GH;
      s.dh_prev = dh_prev.data(), s.dh_prev_stride = H;
      ops::cell_backward(s);
      const Tensor& dah = cell == CellKind::Gru ? dha : da;

      // a = x W_ih^T + b_ih + h_prev W_hh^T + b_hh: the products the layer does with ops::gemm
      Tensor dx({N, D}), dw_ih({GH, D}), dw_hh({GH, H}), db_ih({GH}), db_hh({GH});
      ops::gemm_naive(Trans::No, Trans::No, N, D, GH, 1, da.data(), GH, k.w_ih.data(), D, 0, dx.data(), D);
      ops::gemm_naive(Trans::No, Trans::No, N, H, GH, 1, dah.data(), GH, k.w_hh.data(), H, 1, dh_prev.data(), H);
      ops::gemm_naive(Trans::Yes, Trans::No, GH, D, N, 1, da.data(), GH, k.x.data(), D, 0, dw_ih.data(), D);
      ops::gemm_naive(Trans::Yes, Trans::No, GH, H, N, 1, dah.data(), GH, k.h_prev.data(), H, 0, dw_hh.data(), H);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t j = 0; j < GH; ++j) db_ih[j] += da[n * GH + j], db_hh[j] += dah[n * GH + j];

      auto loss = [&] { return cell_loss(k); };
      const bool lstm = cell == CellKind::Lstm;
      CHECK(test::gradient_mismatch({&k.x, &k.h_prev, &k.c_prev, &k.w_ih, &k.w_hh, &k.b_ih, &k.b_hh},
                                    {"x", "h_prev", "c_prev", "w_ih", "w_hh", "b_ih", "b_hh"}, loss,
                                    {&dx, &dh_prev, lstm ? &dc_prev : nullptr, &dw_ih, &dw_hh, &db_ih, &db_hh}) == "");
      // the check can fail: one wrong element is named
      Tensor wrong = dw_hh;
      wrong[1] += 0.1f;
      CHECK(test::gradient_mismatch({&k.w_hh}, {"w_hh"}, loss, {&wrong}) != "");
      // the padded row passed dh (and dc) through and put nothing into da
      for (int64_t j = 0; j < GH; ++j) CHECK(da[GH + j] == 0.0f);
    }
  }
}

// ---- the layer ----

namespace {

// The whole layer in double, straight from the Parameters (PyTorch layouts), with packed-sequence
// semantics: steps t >= lengths[n] carry the state and output zero; the reverse direction starts
// at each sequence's last real step.
struct RefResult {
  std::vector<double> output, h_n, c_n;
};

RefResult reference_layer(const Recurrent& m, const Tensor& x, const Tensor* h0, const Tensor* c0,
                          const std::vector<int64_t>& lengths) {
  const auto& cfg = m.config();
  const CellKind cell = cfg.cell;
  const int dirs = cfg.directions(), G = ops::gate_count(cell);
  const int64_t N = x.dim(0), T = x.dim(1), H = cfg.hidden_size, GH = G * H;
  auto sigmoid = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  std::vector<double> in(x.values().begin(), x.values().end());
  int64_t Din = x.dim(2);
  RefResult r;
  r.h_n.assign(size_t(cfg.layers * dirs * N * H), 0.0);
  r.c_n = r.h_n;
  for (int k = 0; k < cfg.layers; ++k) {
    std::vector<double> out(size_t(N * T * dirs * H), 0.0);
    for (int d = 0; d < dirs; ++d) {
      const int idx = k * dirs + d;
      const auto& w = m.direction(idx);
      const Tensor &w_ih = w.w_ih.value, &w_hh = w.w_hh.value, &b_ih = w.b_ih.value, &b_hh = w.b_hh.value;
      for (int64_t n = 0; n < N; ++n) {
        std::vector<double> h(static_cast<size_t>(H), 0.0), c(static_cast<size_t>(H), 0.0);
        std::vector<double> xa(static_cast<size_t>(GH)), ha(static_cast<size_t>(GH));
        for (int64_t u = 0; u < H; ++u) {
          if (h0) h[u] = (*h0)[(idx * N + n) * H + u];
          if (c0) c[u] = (*c0)[(idx * N + n) * H + u];
        }
        for (int64_t i = 0; i < T; ++i) {
          const int64_t t = d ? T - 1 - i : i;
          if (t >= lengths[n]) continue;  // padded: the state is carried, the output stays 0
          for (int64_t j = 0; j < GH; ++j) {
            double sx = b_ih[j], sh = b_hh[j];
            for (int64_t e = 0; e < Din; ++e) sx += double(w_ih[j * Din + e]) * in[(n * T + t) * Din + e];
            for (int64_t e = 0; e < H; ++e) sh += double(w_hh[j * H + e]) * h[e];
            xa[j] = sx, ha[j] = sh;
          }
          std::vector<double> hnew(static_cast<size_t>(H));
          for (int64_t u = 0; u < H; ++u) {
            if (cell == CellKind::Lstm) {
              const double ig = sigmoid(xa[u] + ha[u]), fg = sigmoid(xa[H + u] + ha[H + u]);
              const double gg = std::tanh(xa[2 * H + u] + ha[2 * H + u]), og = sigmoid(xa[3 * H + u] + ha[3 * H + u]);
              c[u] = fg * c[u] + ig * gg;
              hnew[u] = og * std::tanh(c[u]);
            } else if (cell == CellKind::Gru) {
              const double rg = sigmoid(xa[u] + ha[u]), zg = sigmoid(xa[H + u] + ha[H + u]);
              const double ng = std::tanh(xa[2 * H + u] + rg * ha[2 * H + u]);
              hnew[u] = (1 - zg) * ng + zg * h[u];
            } else {
              const double a = xa[u] + ha[u];
              hnew[u] = cell == CellKind::RnnRelu ? std::max(0.0, a) : std::tanh(a);
            }
          }
          h = hnew;
          for (int64_t u = 0; u < H; ++u) out[size_t((n * T + t) * dirs * H + d * H + u)] = h[u];
        }
        for (int64_t u = 0; u < H; ++u) {
          r.h_n[size_t((idx * N + n) * H + u)] = h[u];
          r.c_n[size_t((idx * N + n) * H + u)] = c[u];
        }
      }
    }
    in = std::move(out);
    Din = dirs * H;
  }
  r.output = std::move(in);
  return r;
}

double dot(const Tensor& dy, const std::vector<double>& y) {
  double s = 0;
  for (int64_t i = 0; i < dy.numel(); ++i) s += double(dy[i]) * y[size_t(i)];
  return s;
}

}  // namespace

TEST_CASE("recurrent layer backward: layers, bidirectional, h0/c0, ragged lengths against finite differences") {
  Rng rng(202);
  for (CellKind cell : kCells) {
    const std::string cell_name = ops::cell_name(cell);
    CAPTURE(cell_name);
    const bool lstm = cell == CellKind::Lstm;
    ops::RecurrentConfig cfg;
    cfg.cell = cell, cfg.input_size = 3, cfg.hidden_size = 4, cfg.layers = 2, cfg.bidirectional = true;
    Recurrent m = Recurrent::random(cfg, rng);
    const int64_t N = 3, T = 4, H = 4, LD = 4;
    Tensor x = rand_normal({N, T, 3}, rng), h0 = rand_normal({LD, N, H}, rng), c0 = rand_normal({LD, N, H}, rng);
    const std::vector<int64_t> lengths = {2, 4, 0};  // unsorted, one full, one empty
    Tensor dy_out = rand_normal({N, T, 2 * H}, rng), dy_hn = rand_normal({LD, N, H}, rng),
           dy_cn = rand_normal({LD, N, H}, rng);
    auto loss = [&] {
      RefResult r = reference_layer(m, x, &h0, lstm ? &c0 : nullptr, lengths);
      double L = 0;
      // the padded outputs are constant zeros: whatever dy says there changes nothing
      L += dot(dy_out, r.output) + dot(dy_hn, r.h_n);
      if (lstm) L += dot(dy_cn, r.c_n);
      return L;
    };
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      const int old = num_threads();
      set_num_threads(threads);
      ops::RecurrentInputs in;
      in.x = &x, in.h0 = &h0, in.c0 = lstm ? &c0 : nullptr, in.lengths = &lengths;
      ops::RunOptions opt;
      opt.keep_cache = true, opt.min_macs_per_thread = opt.min_macs_per_thread_backward = 1;
      ops::RecurrentResult r = m.forward(in, opt);
      // the fast forward agrees with the double reference
      RefResult ref = reference_layer(m, x, &h0, lstm ? &c0 : nullptr, lengths);
      for (int64_t i = 0; i < r.output.numel(); ++i) REQUIRE(r.output[i] == doctest::Approx(ref.output[size_t(i)]).epsilon(1e-4));
      m.zero_grad();
      Tensor dx(x.shape()), dh0(h0.shape()), dc0(c0.shape());
      ops::RecurrentGradOutputs dy;
      dy.output = &dy_out, dy.h_n = &dy_hn, dy.c_n = lstm ? &dy_cn : nullptr;
      ops::RecurrentGradInputs g;
      g.x = &dx, g.h0 = &dh0, g.c0 = lstm ? &dc0 : nullptr;
      m.backward(in, r, dy, g);
      set_num_threads(old);

      std::vector<Tensor*> inputs = {&x, &h0};
      std::vector<std::string> names = {"x", "h0"};
      std::vector<const Tensor*> analytic = {&dx, &dh0};
      if (lstm) inputs.push_back(&c0), names.push_back("c0"), analytic.push_back(&dc0);
      for (Parameter* p : m.named_parameters()) {
        inputs.push_back(&p->value), names.push_back(p->name), analytic.push_back(&p->grad);
      }
      // The loss is computed in double, so a small nudge costs no precision, and keeps the nudged
      // pre-activations of relu on the side of its kink they were on.
      const test::GradTolerance tol{1e-4, 1e-3, 1e-2};
      CHECK(test::gradient_mismatch(inputs, names, loss, analytic, tol) == "");
      // the check can fail: a wrong weight gradient is named
      Tensor wrong = m.direction(2).w_hh.grad;
      wrong[3] -= 0.05f;
      CHECK(test::gradient_mismatch({&m.direction(2).w_hh.value}, {"weight_hh_l1"}, loss, {&wrong}, tol) != "");
      // the empty sequence: its h0 gradient is dy_h_n itself (the state was carried through)
      for (int64_t u = 0; u < H; ++u) CHECK(dh0[(0 * N + 2) * H + u] == doctest::Approx(dy_hn[(0 * N + 2) * H + u]));
    }
  }
}

TEST_CASE("recurrent layer backward: PyTorch autograd golden gradients (pack_padded_sequence semantics)") {
  const std::vector<std::string> cases = {
      "rnn_2layer_bi_h0_lengths",  "rnn_1layer",  "rnn_relu_2layer_bi_h0_lengths", "rnn_relu_1layer",
      "lstm_2layer_bi_h0_lengths", "lstm_1layer", "gru_2layer_bi_h0_lengths",      "gru_1layer",
      "lstm_h20_lengths",          "gru_h20"};
  for (const auto& name : cases) {
    CAPTURE(name);
    const std::string path = std::string(ATTNKIT_FIXTURES) + "/recurrent_grad/" + name + ".json";
    io::Value f = io::parse_json(test::fixture_text("recurrent_grad/" + name + ".json"), path);
    const std::string cell_text = f.find("cell")->is_tensor() ? "" : name.substr(0, name.find('_'));
    const CellKind cell = name.rfind("rnn_relu", 0) == 0 ? CellKind::RnnRelu
                          : name.rfind("rnn", 0) == 0    ? CellKind::RnnTanh
                          : name.rfind("lstm", 0) == 0   ? CellKind::Lstm
                                                         : CellKind::Gru;
    Recurrent m = Recurrent::from_bundle(*f.find("weights"), cell, nn::WeightLayout::Torch);
    auto get = [&](const io::Value& v, const std::string& n) { return io::find_tensor(v, n, "fixture"); };
    const Tensor& x = *get(f, "x");
    const Tensor* h0 = get(f, "h0");
    const Tensor* c0 = get(f, "c0");
    std::vector<int64_t> lengths;
    ops::RecurrentInputs in;
    in.x = &x, in.h0 = h0, in.c0 = c0;
    if (const Tensor* l = get(f, "lengths")) {
      lengths = io::lengths_from(*l, x.dim(0), x.dim(1), "lengths");
      in.lengths = &lengths;
    }
    for (int threads : {1, 2}) {  // 2: the H = 20 cases split their two unit blocks between the threads
    CAPTURE(threads);
    const int old_threads = num_threads();
    set_num_threads(threads);
    m.zero_grad();
    ops::RunOptions opt;
    opt.keep_cache = true;
    opt.min_macs_per_thread = opt.min_macs_per_thread_backward = 1;
    ops::RecurrentResult r = m.forward(in, opt);
    const io::Value& e = *f.find("expected");
    const io::Value& dyv = *f.find("dy");
    const io::Value& gv = *f.find("grad");
    auto close = [&](const Tensor& got, const Tensor& want, const std::string& what) {
      Comparison c = compare(got, want, Tolerance{1e-5, 1e-4});
      CHECK_MESSAGE(c.same_shape, what << ": shape " << got.shape_str() << " vs " << want.shape_str());
      CHECK_MESSAGE(c.close, what << ": max abs error " << c.max_abs_error << " at " << shape_str(c.max_abs_at));
    };
    close(r.output, *get(e, "output"), "output");
    close(r.h_n, *get(e, "h_n"), "h_n");
    ops::RecurrentGradOutputs dy;
    dy.output = get(dyv, "output"), dy.h_n = get(dyv, "h_n"), dy.c_n = get(dyv, "c_n");
    Tensor dx(x.shape()), dh0(h0 ? h0->shape() : Shape{0}), dc0(c0 ? c0->shape() : Shape{0});
    ops::RecurrentGradInputs g;
    g.x = &dx, g.h0 = h0 ? &dh0 : nullptr, g.c0 = c0 ? &dc0 : nullptr;
    m.backward(in, r, dy, g, opt);
    set_num_threads(old_threads);
    close(dx, *get(gv, "input"), "d input");
    if (h0) close(dh0, *get(gv, "h0"), "d h0");
    if (c0) close(dc0, *get(gv, "c0"), "d c0");
    for (const Parameter* p : m.named_parameters()) close(p->grad, *get(gv, p->name), "d " + p->name);
    // backward adds: a second pass doubles every gradient
    m.backward(in, r, dy, g);
    for (const Parameter* p : m.named_parameters()) close(p->grad, scaled(*get(gv, p->name), 2.0f), "2 x d " + p->name);
    }
  }
}

TEST_CASE("recurrent layer backward: refuses a forward without a cache and misshapen gradients") {
  Rng rng(7);
  ops::RecurrentConfig cfg;
  cfg.cell = CellKind::Gru, cfg.input_size = 2, cfg.hidden_size = 3;
  Recurrent m = Recurrent::random(cfg, rng);
  Tensor x = rand_normal({2, 3, 2}, rng);
  ops::RecurrentInputs in;
  in.x = &x;
  ops::RecurrentResult plain = m.forward(in);
  CHECK(test::error_of([&] { m.backward(in, plain, {}, {}); }) ==
        "recurrent backward: the forward pass kept no cache (run it with RunOptions::keep_cache)");
  ops::RunOptions opt;
  opt.keep_cache = true;
  ops::RecurrentResult r = m.forward(in, opt);
  Tensor bad({2, 3, 4});
  ops::RecurrentGradOutputs dy;
  dy.output = &bad;
  CHECK(test::error_of([&] { m.backward(in, r, dy, {}); }) ==
        "recurrent backward: the gradient of output has shape [2, 3, 4], expected [2, 3, 3]");
}

TEST_CASE("run_sequence with grad_output: cs231n weights get gradients named Wx, Wh, b in their layout") {
  // The documents' sequence (cs231n layout); loss = sum(dy ⊙ output) through lstm-run's path; the
  // gradient of each cs231n tensor against central differences of that loss.
  const std::string path = std::string(ATTNKIT_FIXTURES) + "/recurrent/cs231n_lstm_sequence.json";
  io::Value f = io::parse_json(test::fixture_text("recurrent/cs231n_lstm_sequence.json"), path);
  io::Value weights = *f.find("weights");
  const Tensor x = *io::find_tensor(f, "x", "fixture");
  Rng rng(5);
  io::Value dy(rand_normal({x.dim(0), x.dim(1), 4}, rng));
  app::SequenceRequest req;
  req.x = x;
  req.layout = nn::WeightLayout::Cs231n;
  req.grad_output = &dy;
  Recurrent m = Recurrent::from_bundle(weights, CellKind::Lstm, nn::WeightLayout::Cs231n);
  io::Value out = app::run_sequence(m, req);
  const io::Value& grad = *out.find("grad");
  std::vector<std::string> names;
  for (const auto& [name, v] : grad.members()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"input", "Wx", "Wh", "b"});
  // nudge the cs231n tensors themselves
  Tensor wx = *io::find_tensor(weights, "Wx", "w"), wh = *io::find_tensor(weights, "Wh", "w"),
         b = *io::find_tensor(weights, "b", "w");
  auto loss = [&] {
    io::Value w = io::Value::bundle();
    w.set("Wx", wx), w.set("Wh", wh), w.set("b", b);
    Recurrent n = Recurrent::from_bundle(w, CellKind::Lstm, nn::WeightLayout::Cs231n);
    app::SequenceRequest plain;
    plain.x = x;
    return test::dot(dy.tensor(), *io::find_tensor(app::run_sequence(n, plain), "output", "result"));
  };
  const Tensor& gwx = *io::find_tensor(grad, "Wx", "grad");
  CHECK(test::gradient_mismatch({&wx, &wh, &b}, {"Wx", "Wh", "b"}, loss,
                                {&gwx, io::find_tensor(grad, "Wh", "grad"), io::find_tensor(grad, "b", "grad")}) == "");
  Tensor wrong = gwx;  // torch gate order instead of cs231n's (g and o swapped) is caught
  for (int64_t d = 0; d < wrong.dim(0); ++d)
    for (int64_t u = 0; u < 4; ++u) std::swap(wrong[d * 16 + 8 + u], wrong[d * 16 + 12 + u]);
  CHECK(test::gradient_mismatch({&wx}, {"Wx"}, loss, {&wrong}) != "");
}

TEST_CASE("recurrent layer backward: after a parameter changed (touch), backward uses the new value") {
  // The backward's packed W_hh is derived like the forward's: a changed, touched parameter repacks.
  Rng rng(404);
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru}) {
    const std::string cell_name = ops::cell_name(cell);
    CAPTURE(cell_name);
    ops::RecurrentConfig cfg;
    cfg.cell = cell, cfg.input_size = 3, cfg.hidden_size = 20;
    Recurrent m = Recurrent::random(cfg, rng);
    Tensor x = rand_normal({2, 3, 3}, rng), dy_out = rand_normal({2, 3, 20}, rng);
    const int old = num_threads();
    set_num_threads(2);
    ops::RunOptions opt;
    opt.keep_cache = true, opt.min_macs_per_thread = opt.min_macs_per_thread_backward = 1;  // two parts of 16 and 4 units
    ops::RecurrentInputs in;
    in.x = &x;
    ops::RecurrentGradOutputs dy;
    dy.output = &dy_out;
    auto grads_of = [&](Recurrent& model) {
      model.zero_grad();
      Tensor dx(x.shape());
      ops::RecurrentGradInputs g;
      g.x = &dx;
      model.backward(in, model.forward(in, opt), dy, g, opt);
      return dx;
    };
    grads_of(m);  // packs W_hh for backward
    for (float& v : m.direction(0).w_hh.value.values()) v *= -0.5f;
    m.direction(0).w_hh.touch();
    const Tensor dx = grads_of(m);
    Recurrent fresh = Recurrent::from_bundle(m.to_bundle(nn::WeightLayout::Torch), cell, nn::WeightLayout::Torch);
    const Tensor dx_fresh = grads_of(fresh);
    set_num_threads(old);
    CHECK(compare(dx, dx_fresh, Tolerance{0, 0}).close);
    CHECK(compare(m.direction(0).w_ih.grad, fresh.direction(0).w_ih.grad, Tolerance{0, 0}).close);
  }
}
