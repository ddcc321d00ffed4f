// Recurrent layers: golden values from PyTorch (tests/fixtures/gen_recurrent.py), the documents'
// LSTM in the cs231n layout against float64 numpy, fast cells against the reference cells, errors.
// Legend: N batch, T steps, D input size, H hidden size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/app/recurrent_request.hpp"
#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/nn/recurrent.hpp"
#include "attnkit/ops/recurrent.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/scratch_pool.hpp"
#include "attnkit/tensor/threads.hpp"
#include "test_util.hpp"

using namespace attnkit;
using nn::Recurrent;
using nn::WeightLayout;
using ops::CellKind;

namespace {

// The library's thread policy for one scope (the runner reads num_threads()).
struct ThreadsFor {
  int old = num_threads();
  explicit ThreadsFor(int n) { set_num_threads(n); }
  ~ThreadsFor() { set_num_threads(old); }
};

io::Value fixture(const std::string& name) {
  std::string path = std::string(ATTNKIT_FIXTURES) + "/recurrent/" + name + ".json";
  return io::parse_json(io::read_text(path), path);
}

const Tensor& member(const io::Value& v, const std::string& name) {
  const io::Value* m = v.find(name);
  REQUIRE_MESSAGE(m, "missing member " << name);
  REQUIRE(m->is_tensor());
  return m->tensor();
}

const Tensor* optional_member(const io::Value& v, const std::string& name) {
  const io::Value* m = v.find(name);
  return m && m->is_tensor() ? &m->tensor() : nullptr;
}

CellKind cell_of(const std::string& s) {
  if (s == "lstm") return CellKind::Lstm;
  if (s == "gru") return CellKind::Gru;
  if (s == "rnn") return CellKind::RnnTanh;
  return CellKind::RnnRelu;
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what, double tol = 1e-5) {
  Comparison c = compare(got, want, Tolerance{tol, tol});
  CHECK_MESSAGE(c.same_shape, what << ": shape " << got.shape_str() << " vs " << want.shape_str());
  CHECK_MESSAGE(c.close, what << ": max abs error " << c.max_abs_error << " at " << shape_str(c.max_abs_at));
}

using test::error_of;

}  // namespace

TEST_CASE("recurrent: PyTorch golden values (nn.RNN / nn.LSTM / nn.GRU)") {
  const std::vector<std::string> cases = {
      "torch_lstm_1layer",         "torch_lstm_2layer_bi_h0",  "torch_lstm_2layer_bi_lengths",
      "torch_gru_1layer",          "torch_gru_2layer_bi_h0",   "torch_gru_2layer_bi_lengths",
      "torch_rnn_1layer",          "torch_rnn_2layer_bi_h0",   "torch_rnn_2layer_bi_lengths",
      "torch_rnn_relu_1layer",     "torch_rnn_relu_2layer_bi_h0", "torch_rnn_relu_2layer_bi_lengths",
      "torch_lstm_h20_bi",         "torch_gru_h20_lengths",    "torch_lstm_2layer_lengths",
      "torch_lstm_nobias",         "torch_lstm_unbatched_h0",  "torch_gru_unbatched"};
  for (const auto& name : cases) {
    CAPTURE(name);
    io::Value f = fixture(name);
    // torch_<cell>_...: the cell from the name
    const CellKind cell = cell_of(name.rfind("torch_rnn_relu", 0) == 0 ? "rnn-relu"
                                  : name.rfind("torch_rnn", 0) == 0   ? "rnn"
                                  : name.rfind("torch_gru", 0) == 0   ? "gru"
                                                                      : "lstm");
    Recurrent model = Recurrent::from_bundle(*f.find("weights"), cell, WeightLayout::Torch);
    const io::Value& expected = *f.find("expected");
    // Through run_sequence (what lstm-run calls), then forward() with the threaded time loop forced on.
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      ThreadsFor policy(threads);
      app::SequenceRequest req;
      req.x = member(f, "x");
      req.h0 = optional_member(f, "h0");
      req.c0 = optional_member(f, "c0");
      req.lengths = optional_member(f, "lengths");
      io::Value out = app::run_sequence(model, req);
      check_close(member(out, "output"), member(expected, "output"), name + " output");
      check_close(member(out, "h_n"), member(expected, "h_n"), name + " h_n");
      if (cell == CellKind::Lstm) check_close(member(out, "c_n"), member(expected, "c_n"), name + " c_n");
      else CHECK(out.find("c_n") == nullptr);
    }
    if (member(f, "x").rank() == 3) {
      ops::RecurrentInputs in;
      in.x = &member(f, "x");
      in.h0 = optional_member(f, "h0");
      in.c0 = optional_member(f, "c0");
      std::vector<int64_t> lengths;
      if (const Tensor* l = optional_member(f, "lengths")) {
        lengths = io::lengths_from(*l, in.x->dim(0), in.x->dim(1), "lengths");
        in.lengths = &lengths;
      }
      ThreadsFor policy(2);
      ops::RunOptions opt;
      opt.min_macs_per_thread = 1;  // split even these tiny layers across the threads
      opt.keep_cache = true;
      ops::RecurrentResult r = model.forward(in, opt);
      check_close(r.output, member(expected, "output"), name + " output (threaded loop)");
      check_close(r.h_n, member(expected, "h_n"), name + " h_n (threaded loop)");
      CHECK(r.caches.size() == size_t(model.config().layers * model.config().directions()));
    }
  }
}

TEST_CASE("recurrent: fast cells match the reference cells step by step") {
  Rng rng(11);
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru, CellKind::RnnTanh, CellKind::RnnRelu}) {
    for (int64_t H : {4, 16, 20, 37}) {
      CAPTURE(ops::cell_name(cell));
      CAPTURE(H);
      const int64_t N = 3, D = 5, T = 3;
      ops::RecurrentConfig cfg;
      cfg.cell = cell, cfg.input_size = D, cfg.hidden_size = H;
      Recurrent model = Recurrent::random(cfg, rng);
      Tensor x = rand_normal({N, T, D}, rng), h0 = rand_normal({1, N, H}, rng), c0 = rand_normal({1, N, H}, rng);
      ops::RecurrentInputs in;
      in.x = &x, in.h0 = &h0;
      if (cell == CellKind::Lstm) in.c0 = &c0;
      for (int threads : {1, 2}) {
        ThreadsFor policy(threads);
        ops::RunOptions opt;
        opt.min_macs_per_thread = 1, opt.trace = true;
        ops::RecurrentResult r = model.forward(in, opt);
        const auto& w = model.direction(0);
        Tensor h = h0.reshaped({N, H}), c = c0.reshaped({N, H});
        const ops::RecurrentCache& cache = r.caches[0];
        for (int64_t t = 0; t < T; ++t) {
          Tensor xt({N, D});
          for (int64_t n = 0; n < N; ++n)
            for (int64_t d = 0; d < D; ++d) xt[n * D + d] = x[(n * T + t) * D + d];
          ops::CellReference ref = ops::cell_reference(cell, xt, h, c, w.w_ih.value, w.w_hh.value, w.b_ih.value,
                                                     w.b_hh.value);
          const int64_t GH = ops::gate_count(cell) * H;
          Tensor pre({N, GH}), hs({N, H});
          std::copy(cache.pre.data() + t * N * GH, cache.pre.data() + (t + 1) * N * GH, pre.data());
          std::copy(cache.h.data() + t * N * H, cache.h.data() + (t + 1) * N * H, hs.data());
          check_close(pre, ref.pre, "pre-activation", 1e-5);
          check_close(hs, ref.h, "h", 1e-5);
          if (cell == CellKind::Lstm || cell == CellKind::Gru) {
            Tensor gates({N, GH});
            std::copy(cache.gates.data() + t * N * GH, cache.gates.data() + (t + 1) * N * GH, gates.data());
            check_close(gates, ref.gates, "gates", 1e-5);
          }
          if (cell == CellKind::Lstm) {
            Tensor cs({N, H});
            std::copy(cache.c.data() + t * N * H, cache.c.data() + (t + 1) * N * H, cs.data());
            check_close(cs, ref.c, "c", 1e-5);
          }
          h = ref.h, c = ref.c;
        }
        check_close(r.h_n.reshaped({N, H}), h, "h_n");
      }
    }
  }
}

TEST_CASE("recurrent: a forward that keeps the training cache gives the bits of one that does not") {
  // Without records the LSTM cell runs a row's blocks in one loop (lstm_rows_plain), with them block by
  // block (lstm_block with its records): the same arithmetic, so the same bits; padded rows, a partial
  // block (H = 37), two layers, the hoisted projection (N = 5) and fused steps (N = 18), 1 and 2 threads.
  Rng rng(37);
  ops::RecurrentConfig cfg;
  cfg.cell = CellKind::Lstm, cfg.input_size = 6, cfg.hidden_size = 37, cfg.layers = 2;
  Recurrent m = Recurrent::random(cfg, rng);
  for (int64_t N : {5, 18}) {
    const int64_t T = 7;
    Tensor x = rand_normal({N, T, 6}, rng);
    std::vector<int64_t> lengths(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) lengths[size_t(n)] = T - n % 4;  // unsorted, some rows padded
    for (int threads : {1, 2}) {
      CAPTURE(N);
      CAPTURE(threads);
      ThreadsFor policy(threads);
      ops::RecurrentInputs in;
      in.x = &x, in.lengths = &lengths;
      ops::RunOptions plain, kept;
      kept.keep_cache = true;
      const ops::RecurrentResult a = m.forward(in, plain), b = m.forward(in, kept);
      REQUIRE(a.output.values() == b.output.values());
      REQUIRE(a.h_n.values() == b.h_n.values());
      REQUIRE(a.c_n.values() == b.c_n.values());
    }
  }
}

TEST_CASE("recurrent: the documents' LSTM step in the cs231n layout (float64 numpy)") {
  io::Value f = fixture("cs231n_lstm_step");
  Recurrent model = Recurrent::from_bundle(*f.find("weights"), CellKind::Lstm, WeightLayout::Cs231n);
  const Tensor& x = member(f, "x");  // [N, D], one step
  const int64_t N = x.dim(0), D = x.dim(1), H = model.config().hidden_size;
  app::SequenceRequest req;
  req.x = x.reshaped({N, 1, D});
  Tensor h0 = member(f, "prev_h").reshaped({1, N, H}), c0 = member(f, "prev_c").reshaped({1, N, H});
  req.h0 = &h0, req.c0 = &c0;
  req.trace = true;
  req.layout = WeightLayout::Cs231n;
  io::Value out = app::run_sequence(model, req);
  const io::Value& e = *f.find("expected");
  check_close(member(out, "h_n").reshaped({N, H}), member(e, "next_h"), "next_h");
  check_close(member(out, "c_n").reshaped({N, H}), member(e, "next_c"), "next_c");
  const io::Value& trace = *out.find("trace");
  check_close(member(trace, "a").reshaped({N, 4 * H}), member(e, "a"), "a (i, f, o, g)", 1e-5);
  for (const char* g : {"i", "f", "o", "g"}) check_close(member(trace, g).reshaped({N, H}), member(e, g), g);
  // The same weights written in the torch layout and read back give the same step.
  Recurrent torch = Recurrent::from_bundle(model.to_bundle(WeightLayout::Torch), CellKind::Lstm, WeightLayout::Torch);
  check_close(member(app::run_sequence(torch, req), "h_n"), member(out, "h_n"), "torch round trip");
}

TEST_CASE("recurrent: a whole sequence in the cs231n layout (float64 numpy)") {
  io::Value f = fixture("cs231n_lstm_sequence");
  Recurrent model = Recurrent::from_bundle(*f.find("weights"), CellKind::Lstm, WeightLayout::Cs231n);
  app::SequenceRequest req;
  req.x = member(f, "x");
  req.h0 = &member(f, "h0");
  io::Value out = app::run_sequence(model, req);
  const io::Value& e = *f.find("expected");
  for (const char* m : {"output", "h_n", "c_n"}) check_close(member(out, m), member(e, m), m);
  // cs231n -> cs231n round trip keeps every bit
  io::Value again = model.to_bundle(WeightLayout::Cs231n);
  check_close(member(again, "Wx"), member(*f.find("weights"), "Wx"), "Wx round trip", 0);
  check_close(member(again, "b"), member(*f.find("weights"), "b"), "b round trip", 0);
}

TEST_CASE("recurrent: layers, directions and sizes follow from the names") {
  Rng rng(3);
  ops::RecurrentConfig cfg;
  cfg.cell = CellKind::Gru, cfg.input_size = 3, cfg.hidden_size = 4, cfg.layers = 3, cfg.bidirectional = true;
  Recurrent m = Recurrent::random(cfg, rng);
  io::Value b = m.to_bundle(WeightLayout::Torch);
  CHECK(b.names().size() == 3 * 2 * 4);
  Recurrent back = Recurrent::from_bundle(b, CellKind::Gru, WeightLayout::Torch);
  CHECK(back.config().layers == 3);
  CHECK(back.config().bidirectional);
  CHECK(back.config().input_size == 3);
  CHECK(back.config().hidden_size == 4);
  CHECK(back.direction(5).w_ih.value.shape() == Shape{12, 8});
}

TEST_CASE("recurrent: bad weights and inputs say what is wrong") {
  Rng rng(5);
  ops::RecurrentConfig cfg;
  cfg.cell = CellKind::Lstm, cfg.input_size = 3, cfg.hidden_size = 4, cfg.layers = 2;
  Recurrent m = Recurrent::random(cfg, rng);
  io::Value good = m.to_bundle(WeightLayout::Torch);

  io::Value bad = good;
  bad.set("weight_ih_l0", Tensor({8, 3}));
  CHECK(error_of([&] { Recurrent::from_bundle(bad, CellKind::Lstm, WeightLayout::Torch); }) ==
        "weight_ih_l0 has shape [8, 3], expected [16, 3] (4*H, D) for hidden size 4");
  bad = good;
  bad.set("weight_ih_l1", Tensor({16, 3}));
  CHECK(error_of([&] { Recurrent::from_bundle(bad, CellKind::Lstm, WeightLayout::Torch); }) ==
        "weight_ih_l1 has shape [16, 3], expected [16, 4] (4*H, H) for hidden size 4");
  bad = io::Value::bundle();
  for (const auto& [name, v] : good.members())
    if (name != "weight_hh_l1") bad.set(name, v);
  CHECK(error_of([&] { Recurrent::from_bundle(bad, CellKind::Lstm, WeightLayout::Torch); })
            .rfind("missing weight weight_hh_l1 (expected shape [16, 4] (4*H, H))", 0) == 0);
  CHECK(error_of([&] { Recurrent::from_bundle(good, CellKind::Gru, WeightLayout::Torch); }) ==
        "weight_hh_l0 has shape [16, 4], expected [12, 4] (3*H, H) for hidden size 4: a gru has 3 gates "
        "(its 16 rows fit --cell lstm)");
  bad = good;
  bad.set("weight_ih_l0x", Tensor({1}));
  CHECK(error_of([&] { Recurrent::from_bundle(bad, CellKind::Lstm, WeightLayout::Torch); })
            .rfind("weights: unexpected member \"weight_ih_l0x\"", 0) == 0);
  CHECK(error_of([&] { Recurrent::from_bundle(good, CellKind::Lstm, WeightLayout::Cs231n); })
            .rfind("weights: unexpected member \"weight_ih_l0\"", 0) == 0);
  CHECK(error_of([&] { Recurrent::from_bundle(Tensor({2}), CellKind::Lstm, WeightLayout::Torch); })
            .rfind("weights: expected a bundle", 0) == 0);

  app::SequenceRequest req;
  req.x = Tensor({2, 5, 6});
  CHECK(error_of([&] { app::run_sequence(m, req); }) ==
        "input has shape [2, 5, 6], expected [N, T, 3] (the weights' input size D is 3)");
  req.x = Tensor({5, 6});
  CHECK(error_of([&] { app::run_sequence(m, req); }) ==
        "input has shape [5, 6], expected [T, 3] (the weights' input size D is 3)");
  req.x = Tensor({2, 5, 3});
  Tensor h0({2, 2, 5});
  req.h0 = &h0;
  CHECK(error_of([&] { app::run_sequence(m, req); }) ==
        "h0 has shape [2, 2, 5], expected [2, 2, 4] (layers*dirs, N, H) for 2 layers x 1 direction and hidden size 4");
  req.h0 = nullptr;
  Tensor lengths(Shape{2}, {5, 6});
  req.lengths = &lengths;
  CHECK(error_of([&] { app::run_sequence(m, req); }) == "lengths[1] is 6, expected 0 <= length <= 5");
  lengths = Tensor(Shape{3}, {1, 2, 3});
  CHECK(error_of([&] { app::run_sequence(m, req); }) ==
        "lengths has shape [3], expected [2] (one length per sequence)");
  lengths = Tensor(Shape{2}, {1.5f, 2});
  CHECK(error_of([&] { app::run_sequence(m, req); }) == "lengths[0] is 1.5, expected a whole number");
}

TEST_CASE("recurrent: padded steps change nothing") {
  // A sequence of length 2 padded to 5 gives the same state as the 2-step sequence alone.
  Rng rng(9);
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru}) {
    ops::RecurrentConfig cfg;
    cfg.cell = cell, cfg.input_size = 3, cfg.hidden_size = 5, cfg.bidirectional = true;
    Recurrent m = Recurrent::random(cfg, rng);
    Tensor x = rand_normal({1, 5, 3}, rng);
    Tensor x2({1, 2, 3});
    std::copy(x.data(), x.data() + 6, x2.data());
    Tensor len(Shape{1}, {2});
    app::SequenceRequest a, b;
    a.x = x, a.lengths = &len;
    b.x = x2;
    io::Value ra = app::run_sequence(m, a), rb = app::run_sequence(m, b);
    check_close(member(ra, "h_n"), member(rb, "h_n"), "h_n", 1e-6);
    const Tensor& out = member(ra, "output");  // [1, 5, 10]
    for (int64_t i = 20; i < 50; ++i) CHECK(out[i] == 0.0f);
  }
}

TEST_CASE("recurrent: the trace of each direction is the first layer's output") {
  Rng rng(21);
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru, CellKind::RnnTanh}) {
    CAPTURE(ops::cell_name(cell));
    ops::RecurrentConfig cfg;
    cfg.cell = cell, cfg.input_size = 3, cfg.hidden_size = 5, cfg.bidirectional = true;
    Recurrent m = Recurrent::random(cfg, rng);
    app::SequenceRequest req;
    req.x = rand_normal({2, 4, 3}, rng);
    Tensor len(Shape{2}, {4, 2});
    req.lengths = &len;
    req.trace = true;
    io::Value out = app::run_sequence(m, req);
    const Tensor& o = member(out, "output");  // [2, 4, 10]: forward | reverse
    const Tensor& hf = member(*out.find("trace"), "h");
    const Tensor& hr = member(*out.find("trace_reverse"), "h");
    for (int64_t row = 0; row < 8; ++row)
      for (int64_t u = 0; u < 5; ++u) {
        CHECK(hf[row * 5 + u] == o[row * 10 + u]);
        CHECK(hr[row * 5 + u] == o[row * 10 + 5 + u]);
      }
    const int G = ops::gate_count(cell);
    CHECK(member(*out.find("trace"), "a").shape() == Shape{2, 4, G * 5});
  }
}

TEST_CASE("recurrent: one thread and a team give the same bits") {
  // The forward may run a loop on one thread or on a team (the threads, the step size, and how
  // recent team runs fared decide): each column is the same sum in the same order either way.
  Rng rng(31);
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru, CellKind::RnnTanh}) {
    CAPTURE(ops::cell_name(cell));
    ops::RecurrentConfig cfg;
    cfg.cell = cell, cfg.input_size = 7, cfg.hidden_size = 40;  // blocks of 16, 16, 8 units
    Recurrent m = Recurrent::random(cfg, rng);
    Tensor x = rand_normal({2, 12, 7}, rng), h0 = rand_normal({1, 2, 40}, rng);
    ops::RecurrentInputs in;
    in.x = &x, in.h0 = &h0;
    ops::RunOptions opt;
    opt.min_macs_per_thread = 1;
    ops::RecurrentResult one, team;
    {
      ThreadsFor policy(1);
      one = m.forward(in, opt);
    }
    {
      ThreadsFor policy(2);
      team = m.forward(in, opt);
    }
    check_close(team.output, one.output, "output", 0);
    check_close(team.h_n, one.h_n, "h_n", 0);
    if (cell == CellKind::Lstm) check_close(team.c_n, one.c_n, "c_n", 0);
    // A batch of one packs W_hh for one row (GemmPackedB::Layout::Rows): the same sums as the first
    // row of the batch, on one thread and on a team.
    Tensor x1({1, 12, 7}), h01({1, 1, 40});
    std::copy(x.data(), x.data() + 12 * 7, x1.data());
    std::copy(h0.data(), h0.data() + 40, h01.data());
    ops::RecurrentInputs in1;
    in1.x = &x1, in1.h0 = &h01;
    for (int threads : {1, 2}) {
      ThreadsFor policy(threads);
      const ops::RecurrentResult r = m.forward(in1, opt);
      for (int64_t k = 0; k < 12 * 40; ++k) REQUIRE(r.output[k] == one.output[k]);
      for (int64_t k = 0; k < 40; ++k) REQUIRE(r.h_n[k] == one.h_n[k]);
    }
  }
}

TEST_CASE("recurrent: a batch of 16 rows or more (steps with their own input product) gives a small batch's bits") {
  // From nn FusedSteps::kMinRows = 16 rows a step computes x_t W_ih itself, beside h_prev W_hh, a
  // chunk of columns at a time followed by the cell; fewer rows take the projection hoisted out of
  // the loop; without a cache to fill, two threads take 20 rows each. Each row is the same sums in
  // the same order every way: every four rows of a batch of 40 equal a batch of those rows alone, bit
  // for bit, for every cell, a partial block of units (H = 40), two layers, both directions, sorted
  // lengths (finished rows), one thread and two, with and without the training cache.
  Rng rng(35);
  const int64_t N = 40, n = 4, T = 9, D = 7, H = 40;
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru, CellKind::RnnTanh}) {
    for (bool bidirectional : {false, true}) {
      CAPTURE(ops::cell_name(cell));
      CAPTURE(bidirectional);
      ops::RecurrentConfig cfg;
      cfg.cell = cell, cfg.input_size = D, cfg.hidden_size = H, cfg.layers = 2, cfg.bidirectional = bidirectional;
      Recurrent m = Recurrent::random(cfg, rng);
      const int64_t S = 2 * (bidirectional ? 2 : 1);  // layers x directions
      Tensor x = rand_normal({N, T, D}, rng), h0 = rand_normal({S, N, H}, rng), c0 = rand_normal({S, N, H}, rng);
      std::vector<int64_t> lengths(N);
      for (int64_t r = 0; r < N; ++r) lengths[size_t(r)] = std::max<int64_t>(0, T - r / 4);  // 9 9 9 9 8 .. 0 0
      ops::RunOptions opt;
      opt.min_macs_per_thread = 1;  // a team even for these small steps
      for (int64_t r0 = 0; r0 < N; r0 += n) {  // rows [r0, r0 + n) alone
        CAPTURE(r0);
        Tensor xs({n, T, D}), h0s({S, n, H}), c0s({S, n, H});
        std::copy(x.data() + r0 * T * D, x.data() + (r0 + n) * T * D, xs.data());
        for (int64_t k = 0; k < S; ++k) {
          std::copy(h0.data() + (k * N + r0) * H, h0.data() + (k * N + r0 + n) * H, h0s.data() + k * n * H);
          std::copy(c0.data() + (k * N + r0) * H, c0.data() + (k * N + r0 + n) * H, c0s.data() + k * n * H);
        }
        std::vector<int64_t> lengths_s(lengths.begin() + r0, lengths.begin() + r0 + n);
        for (int threads : {1, 2})
          for (bool ragged : {false, true})
            for (bool cache : {false, true}) {  // with the cache (time-major rows) a team splits the units
              CAPTURE(threads);
              CAPTURE(ragged);
              CAPTURE(cache);
              opt.keep_cache = cache;
              ThreadsFor policy(threads);
              ops::RecurrentInputs big, small;
              big.x = &x, big.h0 = &h0, small.x = &xs, small.h0 = &h0s;
              if (cell == CellKind::Lstm) big.c0 = &c0, small.c0 = &c0s;
              if (ragged) big.lengths = &lengths, small.lengths = &lengths_s;
              const ops::RecurrentResult a = m.forward(big, opt), b = m.forward(small, opt);
              const int64_t W = a.output.dim(2);
              for (int64_t r = 0; r < n; ++r)
                for (int64_t k = 0; k < T * W; ++k)
                  REQUIRE(a.output[(r0 + r) * T * W + k] == b.output[r * T * W + k]);
              for (int64_t k = 0; k < S; ++k)
                for (int64_t u = 0; u < n * H; ++u) {
                  REQUIRE(a.h_n[(k * N + r0) * H + u] == b.h_n[k * n * H + u]);
                  if (cell == CellKind::Lstm) REQUIRE(a.c_n[(k * N + r0) * H + u] == b.c_n[k * n * H + u]);
                }
            }
      }
    }
  }
}

TEST_CASE("recurrent: a batch sorted by length (the finished rows skip the hidden product)") {
  // Each sequence of a padded batch, sorted or not, equals the sequence run alone, truncated.
  Rng rng(33);
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru, CellKind::RnnRelu}) {
    for (bool bidirectional : {false, true}) {
      CAPTURE(ops::cell_name(cell));
      CAPTURE(bidirectional);
      ops::RecurrentConfig cfg;
      cfg.cell = cell, cfg.input_size = 3, cfg.hidden_size = 20, cfg.layers = 2, cfg.bidirectional = bidirectional;
      Recurrent m = Recurrent::random(cfg, rng);
      const int64_t N = 4, T = 5, H = 20, dirs = bidirectional ? 2 : 1;
      Tensor x = rand_normal({N, T, 3}, rng);
      for (const std::vector<float>& lens : {std::vector<float>{5, 3, 3, 0}, std::vector<float>{3, 5, 0, 3}}) {
        Tensor len(Shape{N}, lens);
        app::SequenceRequest req;
        req.x = x, req.lengths = &len;
        io::Value batch = app::run_sequence(m, req);
        for (int64_t n = 0; n < N; ++n) {
          const int64_t L = int64_t(lens[size_t(n)]);
          if (L == 0) continue;
          app::SequenceRequest one;
          one.x = Tensor({1, L, 3});
          std::copy(x.data() + n * T * 3, x.data() + n * T * 3 + L * 3, one.x.data());
          io::Value alone = app::run_sequence(m, one);
          const Tensor& hb = member(batch, "h_n");  // [2*dirs, N, H]
          const Tensor& ha = member(alone, "h_n");  // [2*dirs, 1, H]
          for (int64_t k = 0; k < 2 * dirs; ++k)
            for (int64_t u = 0; u < H; ++u) CHECK(hb[(k * N + n) * H + u] == doctest::Approx(ha[k * H + u]).epsilon(1e-5));
        }
      }
    }
  }
}

TEST_CASE("recurrent: one Parameter per state_dict tensor, in state_dict order") {
  Rng rng(41);
  ops::RecurrentConfig cfg;
  cfg.cell = CellKind::Lstm, cfg.input_size = 3, cfg.hidden_size = 4, cfg.layers = 2, cfg.bidirectional = true;
  Recurrent m = Recurrent::random(cfg, rng);
  std::vector<std::string> names;
  for (const Parameter* p : m.named_parameters()) names.push_back(p->name);
  // nn.LSTM(3, 4, num_layers=2, bidirectional=True).state_dict().keys()
  const std::vector<std::string> torch_order = {
      "weight_ih_l0",         "weight_hh_l0",         "bias_ih_l0",         "bias_hh_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_ih_l1",         "weight_hh_l1",         "bias_ih_l1",         "bias_hh_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  CHECK(names == torch_order);
  CHECK(m.named_parameters()[8]->value.shape() == Shape{16, 8});  // weight_ih_l1: [4*H, 2*H]
  // The bundle holds the same tensors under the same names.
  io::Value b = m.to_bundle(WeightLayout::Torch);
  for (const Parameter* p : m.named_parameters()) check_close(member(b, p->name), p->value, p->name, 0);
  // A copy owns its parameters.
  Recurrent copy = m;
  copy.direction(0).w_hh.value[0] += 1.0f;
  CHECK(copy.direction(0).w_hh.value[0] != m.direction(0).w_hh.value[0]);
}

TEST_CASE("recurrent: a forward after a parameter changed (touch) uses the new value") {
  Rng rng(43);
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru, CellKind::RnnTanh}) {
    CAPTURE(ops::cell_name(cell));
    ops::RecurrentConfig cfg;
    cfg.cell = cell, cfg.input_size = 3, cfg.hidden_size = 20, cfg.layers = 2;
    Recurrent m = Recurrent::random(cfg, rng);
    Tensor x = rand_normal({2, 4, 3}, rng);
    ops::RecurrentInputs in;
    in.x = &x;
    for (int threads : {1, 2}) {
      ThreadsFor policy(threads);
      ops::RunOptions opt;
      opt.min_macs_per_thread = 1;
      const Tensor before = m.forward(in, opt).output;  // packs every layer (and the team's W_hh)
      // Change W_hh of layer 1 and b_ih of layer 0 in place, as an optimizer step does, then touch.
      for (Parameter* p : {&m.direction(1).w_hh, &m.direction(0).b_ih}) {
        for (float& v : p->value.values()) v *= 0.5f;
        p->touch();
      }
      const Tensor after = m.forward(in, opt).output;
      // A model built from the changed weights from scratch gives the same output.
      Recurrent fresh = Recurrent::from_bundle(m.to_bundle(WeightLayout::Torch), cell, WeightLayout::Torch);
      check_close(after, fresh.forward(in, opt).output, "after touch", 0);
      CHECK(compare(after, before, Tolerance{1e-4, 1e-4}).close == false);
    }
  }
}

TEST_CASE("recurrent: the constructor refuses wrong or empty weights and biases with a message") {
  const int64_t D = 3, H = 4;
  auto make = [&](Tensor b_ih, Tensor b_hh, Tensor w_hh = Tensor({16, 4})) {
    ops::RecurrentConfig cfg;
    cfg.cell = CellKind::Lstm, cfg.input_size = D, cfg.hidden_size = H;
    std::vector<nn::DirectionWeights> w(1);
    w[0].w_ih = Tensor({16, D}), w[0].w_hh = std::move(w_hh), w[0].b_ih = std::move(b_ih), w[0].b_hh = std::move(b_hh);
    return error_of([&] { Recurrent m(cfg, std::move(w)); });
  };
  CHECK(make(Tensor({16}), Tensor({16})) == "");
  CHECK(make(Tensor(), Tensor({16})) ==
        "recurrent: bias_ih_l0 has shape [0], expected [16] (4*H) (a bias-free model passes zeros) for a lstm with D 3 "
        "and H 4");
  CHECK(make(Tensor({16}), Tensor({12})) ==
        "recurrent: bias_hh_l0 has shape [12], expected [16] (4*H) (a bias-free model passes zeros) for a lstm with D 3 "
        "and H 4");
  CHECK(make(Tensor({16}), Tensor({16}), Tensor({16, 3})) ==
        "recurrent: weight_hh_l0 has shape [16, 3], expected [16, 4] (4*H, H) for a lstm with D 3 and H 4");
}

TEST_CASE("the training cache is written whole: recycled scratch full of NaN changes no bit of it or of the gradients") {
  // The cache is uninitialised scratch (ScratchTensor): every step must write all of its rows, padded
  // ones included. Buffers of at least 2^16 floats are recycled, so H = 1024 with N = T = 8.
  Rng rng(41);
  const int64_t N = 8, T = 8, D = 8, H = 1024;
  const std::vector<int64_t> lengths = {8, 8, 7, 5, 5, 3, 1, 0};
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru}) {
    CAPTURE(ops::cell_name(cell));
    ops::RecurrentConfig cfg;
    cfg.cell = cell, cfg.input_size = D, cfg.hidden_size = H;
    Recurrent m = Recurrent::random(cfg, rng);
    const Tensor x = rand_normal({N, T, D}, rng), dy = rand_normal({N, T, H}, rng);
    ops::RecurrentInputs in;
    in.x = &x, in.lengths = &lengths;
    ops::RunOptions opt;
    opt.keep_cache = true;
    auto run = [&](Tensor& dx, std::vector<Tensor>& kept) {
      ops::RecurrentResult r = m.forward(in, opt);
      const ops::RecurrentCache& c = r.caches.at(0);
      kept.clear();
      for (const attnkit::detail::ScratchTensor* t : {&c.gates, &c.c, &c.tanh_c, &c.hn, &c.h}) kept.push_back(t->to_tensor());
      m.zero_grad();
      ops::RecurrentGradOutputs g;
      g.output = &dy;
      ops::RecurrentGradInputs gi;
      dx = Tensor({N, T, D});
      gi.x = &dx;
      m.backward(in, r, g, gi);
    };
    Tensor dx1, dx2;
    std::vector<Tensor> kept1, kept2;
    run(dx1, kept1);
    const Tensor dw1 = m.named_parameters()[1]->grad;  // d weight_hh_l0
    {  // fill the pool's free buffers of these sizes with NaN
      std::vector<std::shared_ptr<float>> held;
      for (int64_t floats : {T * N * 4 * H, T * N * 3 * H, T * N * H, T * N * H, T * N * H, T * N * H}) {
        held.push_back(ScratchPool::get(floats));
        std::fill(held.back().get(), held.back().get() + floats, std::nanf(""));
      }
    }
    run(dx2, kept2);
    for (size_t i = 0; i < kept1.size(); ++i) {
      CAPTURE(i);
      CHECK(std::all_of(kept2[i].values().begin(), kept2[i].values().end(), [](float v) { return std::isfinite(v); }));
      CHECK(kept2[i].values() == kept1[i].values());
    }
    CHECK(dx2.values() == dx1.values());
    CHECK(m.named_parameters()[1]->grad.values() == dw1.values());
  }
}

TEST_CASE("the output is written whole: recycled buffers full of NaN change no bit of it") {
  // Recurrent::forward's output is Tensor::uninitialized: a big one takes a freed tensor's buffer with its old
  // values. Every step must write all of its rows, padded ones (zeros) included, in every path: the unit team
  // and the row split (N = 64), both directions, a second layer, lengths sorted and not.
  Rng rng(43);
  ThreadsFor two(2);
  struct Case {
    int64_t N, T, H;
    int layers;
    bool bidirectional;
    std::vector<int64_t> lengths;
  };
  const std::vector<Case> cases = {
      {8, 64, 512, 2, true, {64, 64, 50, 33, 20, 5, 1, 0}},   // sorted
      {8, 64, 512, 1, false, {5, 64, 0, 33, 64, 1, 20, 50}},  // not sorted
      {64, 8, 512, 1, false, {}},                              // the row split
  };
  for (const Case& k : cases)
    for (CellKind cell : {CellKind::Lstm, CellKind::Gru}) {
      CAPTURE(k.N);
      CAPTURE(k.layers);
      CAPTURE(ops::cell_name(cell));
      ops::RecurrentConfig cfg;
      cfg.cell = cell, cfg.input_size = 16, cfg.hidden_size = k.H, cfg.layers = k.layers,
      cfg.bidirectional = k.bidirectional;
      Recurrent m = Recurrent::random(cfg, rng);
      const Tensor x = rand_normal({k.N, k.T, 16}, rng);
      ops::RecurrentInputs in;
      in.x = &x;
      if (!k.lengths.empty()) in.lengths = &k.lengths;
      const int64_t floats = k.N * k.T * k.H * (k.bidirectional ? 2 : 1);
      REQUIRE(floats >= (int64_t(1) << 18));  // big enough to be recycled
      test::fill_recycled_buffers(floats, 0.0f);
      const Tensor zeros = m.forward(in, {}).output;
      test::fill_recycled_buffers(floats, std::nanf(""));
      const Tensor nans = m.forward(in, {}).output;
      CHECK(std::all_of(nans.values().begin(), nans.values().end(), [](float v) { return std::isfinite(v); }));
      CHECK(nans.values() == zeros.values());
    }
}

TEST_CASE("recurrent: one row with x W_ih projected ahead on a second thread gives one thread's bits") {
  // N = 1 with steps of 2^14 .. 2^18 multiply-adds a thread: after a call on one thread (the team watch measures
  // it), the steps run on this thread while another projects the input in chunks of 8 steps ahead of them
  // (T = 37: a last chunk of 5). Each row's projection is the same sum whichever thread computes it.
  Rng rng(59);
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru}) {
    CAPTURE(ops::cell_name(cell));
    ops::RecurrentConfig cfg;
    cfg.cell = cell, cfg.input_size = 16, cfg.hidden_size = 128;
    Recurrent m = Recurrent::random(cfg, rng);
    const Tensor x = rand_normal({1, 37, 16}, rng), h0 = rand_normal({1, 1, 128}, rng);
    const std::vector<int64_t> lengths = {30};
    ops::RecurrentInputs in;
    in.x = &x, in.h0 = &h0, in.lengths = &lengths;
    ops::RecurrentResult one;
    {
      ThreadsFor policy(1);
      one = m.forward(in, {});
    }
    ThreadsFor policy(2);
    for (int call = 0; call < 6; ++call) {
      CAPTURE(call);
      const ops::RecurrentResult r = m.forward(in, {});
      CHECK(r.output.values() == one.output.values());
      CHECK(r.h_n.values() == one.h_n.values());
      if (cell == CellKind::Lstm) CHECK(r.c_n.values() == one.c_n.values());
    }
  }
}

TEST_CASE("recurrent: a thread done with its rows takes chunks of the other part's steps, with the same bits") {
  // N = 64 on two threads: each runs 32 rows (row parts); the one that ends first takes chunks of the other's
  // remaining steps (ChunkTickets). Rows 32.. are one step long, so their thread is free almost at once and
  // computes a share of the long rows' steps: their values must be one thread's, bit for bit. Also both
  // directions (a job each, side by side), which help each other the same way. H = 320: a step is several chunks
  // (LSTM 128, 128 and 64 units; GRU 192 and 128), the last one partial.
  Rng rng(61);
  const int64_t N = 64, T = 24, D = 16, H = 320;
  std::vector<int64_t> lengths(N, 1);
  std::fill(lengths.begin(), lengths.begin() + N / 2, T);
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru})
    for (bool bidirectional : {false, true}) {
      CAPTURE(ops::cell_name(cell));
      CAPTURE(bidirectional);
      ops::RecurrentConfig cfg;
      cfg.cell = cell, cfg.input_size = D, cfg.hidden_size = H, cfg.bidirectional = bidirectional;
      Recurrent m = Recurrent::random(cfg, rng);
      const Tensor x = rand_normal({N, T, D}, rng), h0 = rand_normal({bidirectional ? 2 : 1, N, H}, rng);
      ops::RecurrentInputs in;
      in.x = &x, in.h0 = &h0, in.lengths = &lengths;
      ops::RunOptions opt;
      opt.min_macs_per_thread = 1;
      ops::RecurrentResult one;
      {
        ThreadsFor policy(1);
        one = m.forward(in, opt);
      }
      ThreadsFor policy(2);
      for (int call = 0; call < 4; ++call) {
        CAPTURE(call);
        const ops::RecurrentResult r = m.forward(in, opt);
        CHECK(r.output.values() == one.output.values());
        CHECK(r.h_n.values() == one.h_n.values());
        if (cell == CellKind::Lstm) CHECK(r.c_n.values() == one.c_n.values());
      }
    }
}

TEST_CASE("recurrent: a zero initial state skips step 0's h_prev W_hh, with the bits of the product; an inf in W_hh still gives NaN") {
  // nn run_direction: with h0 zero (or absent) and W_hh finite, step 0's hidden product is exactly +0 and is
  // skipped. A batch whose h0 is zero but in its last row computes it for every row: the other rows must equal,
  // bit for bit, the same rows run from a zero h0 (rows do not depend on their neighbours). Hoisted input
  // projection (4 rows), own input product per step (40 rows, two threads: row parts), one row; every cell,
  // both directions. An inf in W_hh makes 0 * inf = NaN in step 0's gate arguments (as PyTorch's product does).
  Rng rng(57);
  const int64_t T = 5, D = 6, H = 40;
  for (CellKind cell : {CellKind::Lstm, CellKind::Gru, CellKind::RnnTanh})
    for (bool bidirectional : {false, true})
      for (int64_t N : {1, 4, 40})
        for (int threads : {1, 2}) {
          CAPTURE(ops::cell_name(cell));
          CAPTURE(bidirectional);
          CAPTURE(N);
          CAPTURE(threads);
          ThreadsFor policy(threads);
          ops::RecurrentConfig cfg;
          cfg.cell = cell, cfg.input_size = D, cfg.hidden_size = H, cfg.bidirectional = bidirectional;
          Recurrent m = Recurrent::random(cfg, rng);
          const int64_t S = bidirectional ? 2 : 1, M = N + 1;  // one more row, with a nonzero h0
          Tensor x = rand_normal({M, T, D}, rng), h0({S, M, H}), xs({N, T, D});
          for (int64_t k = 0; k < S; ++k)
            for (int64_t u = 0; u < H; ++u) h0[(k * M + N) * H + u] = 0.5f;
          std::copy(x.data(), x.data() + N * T * D, xs.data());
          ops::RecurrentInputs with_h, zero;
          with_h.x = &x, with_h.h0 = &h0, zero.x = &xs;
          const ops::RecurrentResult a = m.forward(with_h), b = m.forward(zero);
          const int64_t W = a.output.dim(2);
          for (int64_t k = 0; k < N * T * W; ++k) REQUIRE(a.output[k] == b.output[k]);
          for (int64_t k = 0; k < S; ++k)
            for (int64_t u = 0; u < N * H; ++u) REQUIRE(a.h_n[k * M * H + u] == b.h_n[k * N * H + u]);

          for (Parameter* p : {&m.direction(0).w_hh}) {
            p->value[3 * H + 7] = std::numeric_limits<float>::infinity();  // row 3 of W_hh: unit 3 of the first gate
            p->touch();
          }
          const Tensor y = m.forward(zero).output;
          const int64_t t0 = 0;  // the forward direction's first step
          bool nan = false;
          for (int64_t n = 0; n < N; ++n) nan = nan || std::isnan(y[(n * T + t0) * W + 3]);
          CHECK(nan);
        }
}
