// Attention backward: the strided core (sdpa_backward_naive / sdpa_backward_tiled) and
// attention_backward for every score kind, against central differences of the double-precision
// forwards (sdpa_naive, attention_forward_naive), the tiled kernel against the naive one, and
// PyTorch autograd golden values (tests/fixtures/gen_attention_grad.py).
// Legend: N batch, NH heads, T queries, S keys, Dk query/key head size, Dv value head size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attnkit/io/bundle_lookup.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/ops/attention_scores.hpp"
#include "attnkit/ops/gemm_panels.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/eigen_bridge.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "gradcheck.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

// Every mask kind of MaskSpec, by name, for a problem of N batch elements and NH heads.
const char* const kMaskKinds[] = {"none",        "causal",      "causal-lower-right", "key-lengths",
                                  "mask-[T,S]",  "mask-[N,T,S]", "mask-[N,NH,T,S]",   "causal+key-lengths+mask"};

ops::MaskSpec make_mask(const std::string& kind, int64_t N, int64_t NH, int64_t T, int64_t S, Rng& rng) {
  ops::MaskSpec m;
  auto random_mask = [&](Shape shape) {
    Tensor t(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = rng.uniform() < 0.7f ? 1.0f : 0.0f;
    // the first row of the first (batch, head) fully masked: zero gradients, never NaN
    for (int64_t s = 0; s < S; ++s) t[s] = 0.0f;
    return t;
  };
  if (kind == "causal") m.causal = ops::CausalKind::UpperLeft;
  if (kind == "causal-lower-right") m.causal = ops::CausalKind::LowerRight;
  if (kind == "key-lengths" || kind == "causal+key-lengths+mask")
    for (int64_t n = 0; n < N; ++n) m.key_lengths.push_back(n == 0 ? S - 1 : n == 1 ? 0 : (n * 3) % (S + 1));
  if (kind == "mask-[T,S]") m.mask = random_mask({T, S});
  if (kind == "mask-[N,T,S]") m.mask = random_mask({N, T, S});
  if (kind == "mask-[N,NH,T,S]") m.mask = random_mask({N, NH, T, S});
  if (kind == "causal+key-lengths+mask") m.causal = ops::CausalKind::UpperLeft, m.mask = random_mask({N, T, S});
  return m;
}

// A multi-head problem laid out like nn::MultiheadAttention reads it: head h of row t at column
// h*Dk of a [N, T, NH*Dk] buffer (head stride inside a row).
struct Heads {
  int64_t N, NH, T, S, Dk, Dv;
  Tensor q, k, v, out, lse, dout;
  ops::MaskSpec mask;
  Heads(int64_t N_, int64_t NH_, int64_t T_, int64_t S_, int64_t Dk_, int64_t Dv_, Rng& rng)
      : N(N_), NH(NH_), T(T_), S(S_), Dk(Dk_), Dv(Dv_),
        q(rand_normal({N, T, NH * Dk}, rng)), k(rand_normal({N, S, NH * Dk}, rng)), v(rand_normal({N, S, NH * Dv}, rng)),
        out({N, T, NH * Dv}), lse({N, NH, T}), dout(rand_normal({N, T, NH * Dv}, rng)) {}
  ops::SdpaProblem problem() {
    ops::SdpaProblem p;
    p.N = N, p.NH = NH, p.T = T, p.S = S, p.Dk = Dk, p.Dv = Dv, p.scale = 1.0f / std::sqrt(float(Dk));
    p.q = {q.data(), T * NH * Dk, Dk, NH * Dk};
    p.k = {k.data(), S * NH * Dk, Dk, NH * Dk};
    p.v = {v.data(), S * NH * Dv, Dv, NH * Dv};
    p.out = {out.data(), T * NH * Dv, Dv, NH * Dv};
    p.mask = &mask;
    return p;
  }
  ops::StridedIn dout_in() const { return {dout.data(), T * NH * Dv, Dv, NH * Dv}; }
  // dq, dk, dv laid out like q, k, v
  ops::SdpaGrads grads(Tensor& dq, Tensor& dk, Tensor& dv) const {
    return {{dq.data(), T * NH * Dk, Dk, NH * Dk}, {dk.data(), S * NH * Dk, Dk, NH * Dk}, {dv.data(), S * NH * Dv, Dv, NH * Dv}};
  }
  // sum(dout ⊙ out) with out from the double-precision forward
  double loss() {
    ops::sdpa_naive(problem(), nullptr, nullptr, nullptr);
    return test::dot(dout, out);
  }
};

bool all_finite(const Tensor& t) {
  return std::all_of(t.values().begin(), t.values().end(), [](float x) { return std::isfinite(x); });
}

}  // namespace

TEST_CASE("sdpa_backward_naive: finite differences, every mask kind, strided heads, N > 1") {
  for (const char* kind : kMaskKinds) {
    CAPTURE(kind);
    Rng rng(101);
    Heads h(3, 2, 4, 5, 3, 2, rng);
    h.mask = make_mask(kind, h.N, h.NH, h.T, h.S, rng);
    ops::check_mask(h.mask, h.N, h.NH, h.T, h.S, "test");
    ops::sdpa_naive(h.problem(), nullptr, nullptr, h.lse.data());
    Tensor dq(h.q.shape()), dk(h.k.shape()), dv(h.v.shape());
    ops::sdpa_backward_naive(h.problem(), h.lse.data(), h.dout_in(), h.grads(dq, dk, dv));
    CHECK((all_finite(dq) && all_finite(dk) && all_finite(dv)));
    CHECK(test::gradient_mismatch({&h.q, &h.k, &h.v}, {"q", "k", "v"}, [&] { return h.loss(); }, {&dq, &dk, &dv}) == "");
  }
  // lower-right causal with T > S: the first queries see no key at all (zero gradients)
  Rng rng(5);
  Heads h(1, 1, 4, 2, 2, 2, rng);
  h.mask.causal = ops::CausalKind::LowerRight;
  Tensor dq(h.q.shape()), dk(h.k.shape()), dv(h.v.shape());
  ops::sdpa_backward_naive(h.problem(), nullptr, h.dout_in(), h.grads(dq, dk, dv));
  for (int64_t i = 0; i < 2 * h.Dk; ++i) CHECK(dq[i] == 0.0f);
  CHECK(dq[3 * h.Dk] != 0.0f);
  // the check can fail: a wrong gradient is caught
  Tensor wrong = dk;
  wrong[1] += 0.1f;
  CHECK(test::gradient_mismatch({&h.k}, {"k"}, [&] { return h.loss(); }, {&wrong}) != "");
}

namespace {

struct TileGuard {
  ops::TileSizes saved = ops::tile_sizes();
  explicit TileGuard(ops::TileSizes s) { ops::set_tile_sizes(s); }
  ~TileGuard() { ops::set_tile_sizes(saved); }
};

struct ThreadGuard {
  int saved = num_threads();
  explicit ThreadGuard(int n) { set_num_threads(n); }
  ~ThreadGuard() { set_num_threads(saved); }
};

void check_close(const Tensor& got, const Tensor& want, const std::string& what, double tol) {
  REQUIRE(got.shape() == want.shape());
  double worst = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
    if (!(err <= worst)) worst = err, at = i;
  }
  CHECK_MESSAGE(worst <= tol, what << ": error " << worst << " at " << shape_str(unravel_index(at, got.shape())) << ": got "
                                   << got[at] << ", want " << want[at]);
}

}  // namespace

TEST_CASE("sdpa_backward_tiled: equals the naive backward on ragged tiles, every mask kind, strided heads, threads, kept probabilities") {
  for (int threads : {1, 2})
    for (ops::TileSizes tiles : {ops::TileSizes{2, 3}, ops::TileSizes{3, 2}, ops::TileSizes{1, 1}, ops::TileSizes{256, 256}})
      for (const char* kind : kMaskKinds) {
        const std::string label = "threads " + std::to_string(threads) + ", tiles " + std::to_string(tiles.query) + " x " +
                                  std::to_string(tiles.key) + ", mask " + kind;
        INFO(label);
        ThreadGuard tg(threads);
        TileGuard guard(tiles);
        Rng rng(202);
        Heads h(3, 2, 7, 9, 4, 3, rng);
        h.mask = make_mask(kind, h.N, h.NH, h.T, h.S, rng);
        ops::sdpa_tiled(h.problem(), h.lse.data());
        // both add into gradients that already hold something
        Tensor dq = rand_normal(h.q.shape(), rng), dk = rand_normal(h.k.shape(), rng), dv = rand_normal(h.v.shape(), rng);
        Tensor nq = dq, nk = dk, nv = dv, sq = dq, sk = dk, sv = dv;
        ops::sdpa_backward_tiled(h.problem(), h.lse.data(), h.dout_in(), h.grads(dq, dk, dv));
        ops::sdpa_backward_naive(h.problem(), h.lse.data(), h.dout_in(), h.grads(nq, nk, nv));
        CHECK((all_finite(dq) && all_finite(dk) && all_finite(dv)));
        check_close(dq, nq, "dq", 2e-5), check_close(dk, nk, "dk", 2e-5), check_close(dv, nv, "dv", 2e-5);
        // from the probabilities FullWorker kept (rows padded to S + 3 with NaN, never read), not
        // recomputed: the same gradients
        const int64_t ld = h.S + 3;
        std::vector<float> probs(static_cast<size_t>(h.N * h.NH * h.T * ld), std::nanf(""));
        Tensor out_full(h.out.shape()), lse_full(h.lse.shape());
        ops::SdpaProblem pf = h.problem();
        pf.out.data = out_full.data();
        ops::FullWorker fw(pf, probs.data(), ld);
        for (int64_t t = 0; t < ops::FullWorker::tasks(pf); ++t) fw.run(t, lse_full.data());
        check_close(out_full, h.out, "full forward's output", 2e-5);
        check_close(lse_full, h.lse, "full forward's row_lse", 2e-5);
        Tensor pq = sq, pk = sk, pv = sv;
        ops::sdpa_backward_tiled(pf, nullptr, h.dout_in(), h.grads(pq, pk, pv), {probs.data(), ld});
        check_close(pq, nq, "dq from kept probabilities", 2e-5), check_close(pk, nk, "dk from kept probabilities", 2e-5),
            check_close(pv, nv, "dv from kept probabilities", 2e-5);
        // from the tiled forward's kept tiles exp(E - m_j) and maxes m_j (NaN wherever the forward
        // writes nothing: a tile it skipped must not be read either)
        const int64_t rows = h.N * h.NH * h.T, key_tiles = ops::TiledWorker::key_tiles(pf);
        std::vector<float> tiled(static_cast<size_t>(rows * ld), std::nanf("")),
            tile_max(static_cast<size_t>(rows * key_tiles), std::nanf(""));
        Tensor out_tiled(h.out.shape()), lse_tiled(h.lse.shape());
        ops::SdpaProblem pt = h.problem();
        pt.out.data = out_tiled.data();
        ops::TiledKvPanels keys(pt);
        for (int64_t t = 0; t < keys.tasks(); ++t) keys.pack(t);
        ops::TiledWorker tw(pt, &keys, tiled.data(), ld, tile_max.data());
        for (int64_t t = 0; t < ops::TiledWorker::tasks(pt); ++t) tw.run(t, lse_tiled.data());
        CHECK(out_tiled.values() == h.out.values());  // keeping them changes no bit of the forward
        CHECK(lse_tiled.values() == h.lse.values());
        Tensor tq = sq, tk = sk, tv = sv;
        const ops::KeptProbs kept{tiled.data(), ld, tile_max.data(), ops::TiledWorker::key_width(pt)};
        ops::sdpa_backward_tiled(pt, lse_tiled.data(), h.dout_in(), h.grads(tq, tk, tv), kept);
        check_close(tq, nq, "dq from kept tiles", 2e-5), check_close(tk, nk, "dk from kept tiles", 2e-5),
            check_close(tv, nv, "dv from kept tiles", 2e-5);
      }
  {  // kept tiles read with other key tiles than they were written with: refused, never misread
    Rng rng(4);
    Heads h(1, 1, 4, 8, 2, 2, rng);
    TileGuard guard(ops::TileSizes{2, 4});
    ops::sdpa_tiled(h.problem(), h.lse.data());
    std::vector<float> probs(32, 0.0f), tile_max(8, 0.0f);
    Tensor dq(h.q.shape()), dk(h.k.shape()), dv(h.v.shape());
    CHECK_THROWS_WITH(ops::sdpa_backward_tiled(h.problem(), h.lse.data(), h.dout_in(), h.grads(dq, dk, dv),
                                               {probs.data(), 8, tile_max.data(), 2}),
                      doctest::Contains("key tiles of 2, this backward's are 4"));
  }
  // a null gradient is skipped; dv alone still right
  Rng rng(9);
  Heads h(2, 3, 5, 6, 2, 4, rng);
  h.mask.causal = ops::CausalKind::UpperLeft;
  ops::sdpa_tiled(h.problem(), h.lse.data());
  Tensor dq(h.q.shape()), dk(h.k.shape()), dv(h.v.shape()), nv(h.v.shape());
  ops::SdpaGrads only_v = h.grads(dq, dk, dv);
  only_v.dq.data = nullptr, only_v.dk.data = nullptr;
  ops::sdpa_backward_tiled(h.problem(), h.lse.data(), h.dout_in(), only_v);
  ops::SdpaGrads only_nv = h.grads(dq, dk, nv);
  only_nv.dq.data = nullptr, only_nv.dk.data = nullptr;
  ops::sdpa_backward_naive(h.problem(), h.lse.data(), h.dout_in(), only_nv);
  check_close(dv, nv, "dv alone", 2e-5);
  CHECK(std::all_of(dq.values().begin(), dq.values().end(), [](float x) { return x == 0.0f; }));
}

TEST_CASE("tiled forward: K^T and V packed once per head give the bits of per-tile packing, ragged key tiles, every mask kind") {
  if (ops::gemm_panel_shape().mr == 0) return;  // Eigen's kernel: no panels to test
  for (const char* kind : kMaskKinds) {
    INFO("mask " << kind);
    TileGuard guard(ops::TileSizes{8, 32});  // key tiles 32, 32, 8
    Rng rng(303);
    Heads h(2, 2, 37, 72, 20, 24, rng);
    h.mask = make_mask(kind, h.N, h.NH, h.T, h.S, rng);
    ops::SdpaProblem p = h.problem();
    ops::TiledKvPanels keys(p);
    REQUIRE(keys.tasks() == h.N * h.NH);
    for (int64_t t = 0; t < keys.tasks(); ++t) keys.pack(t);
    ops::TiledWorker with_panels(p, &keys);
    for (int64_t t = 0; t < ops::TiledWorker::tasks(p); ++t) with_panels.run(t, h.lse.data());
    const Tensor out_panels = h.out, lse_panels = h.lse;
    ops::TiledWorker per_tile(p);
    for (int64_t t = 0; t < ops::TiledWorker::tasks(p); ++t) per_tile.run(t, h.lse.data());
    CHECK(out_panels.values() == h.out.values());
    CHECK(lse_panels.values() == h.lse.values());
    ops::sdpa_naive(p, nullptr, nullptr, nullptr);  // double-precision reference into h.out
    check_close(out_panels, h.out, "output with key panels", 2e-5);
  }
}

namespace {

// Inputs and score weights of one attention_backward case.
struct Case {
  bool batched;
  int64_t N, T, S, Dq, Dk, Dv, A;
  Tensor q, k, v, dc;
  ops::AttentionOptions o;
  Case(ops::ScoreKind kind, bool batched_, Rng& rng, int64_t N_ = 2, int64_t T_ = 3, int64_t S_ = 4)
      : batched(batched_), N(batched_ ? N_ : 1), T(T_), S(S_), Dq(3), Dk(kind == ops::ScoreKind::General ||
                                                                        kind == ops::ScoreKind::Additive ? 2 : 3),
        Dv(2), A(3) {
    auto shape = [&](int64_t rows, int64_t cols) { return batched ? Shape{N, rows, cols} : Shape{rows, cols}; };
    q = rand_normal(shape(T, Dq), rng), k = rand_normal(shape(S, Dk), rng), v = rand_normal(shape(S, Dv), rng);
    dc = rand_normal(shape(T, Dv), rng);
    o.score = kind;
    if (kind == ops::ScoreKind::General) o.weights.W = rand_normal({Dq, Dk}, rng, 0, 0.6f);
    if (kind == ops::ScoreKind::Additive) {
      o.weights.W_q = rand_normal({Dq, A}, rng, 0, 0.6f), o.weights.W_k = rand_normal({Dk, A}, rng, 0, 0.6f);
      o.weights.v = rand_normal({A}, rng), o.weights.b = rand_normal({A}, rng, 0, 0.3f);
    }
  }
  // sum(dc ⊙ context) through the double-precision reference forward
  double loss() const { return test::dot(dc, ops::attention_forward_naive(q, k, v, o).context); }
  std::vector<Tensor*> inputs() {
    std::vector<Tensor*> in{&q, &k, &v};
    if (o.score == ops::ScoreKind::General) in.push_back(&o.weights.W);
    if (o.score == ops::ScoreKind::Additive)
      for (Tensor* t : {&o.weights.W_q, &o.weights.W_k, &o.weights.v, &o.weights.b}) in.push_back(t);
    return in;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> n{"query", "keys", "values"};
    if (o.score == ops::ScoreKind::General) n.push_back("W");
    if (o.score == ops::ScoreKind::Additive)
      for (const char* s : {"W_q", "W_k", "v", "b"}) n.push_back(s);
    return n;
  }
  static std::vector<const Tensor*> grads(const ops::AttentionGrads& g, ops::ScoreKind kind) {
    std::vector<const Tensor*> out{&g.query, &g.keys, &g.values};
    if (kind == ops::ScoreKind::General) out.push_back(&g.weights.W);
    if (kind == ops::ScoreKind::Additive)
      for (const Tensor* t : {&g.weights.W_q, &g.weights.W_k, &g.weights.v, &g.weights.b}) out.push_back(t);
    return out;
  }
};

const ops::ScoreKind kScoreKinds[] = {ops::ScoreKind::Dot, ops::ScoreKind::ScaledDot, ops::ScoreKind::General,
                                      ops::ScoreKind::Additive};

}  // namespace

TEST_CASE("attention_backward: finite differences for every score kind x mask kind, batched and not, kept weights or not") {
  TileGuard guard({2, 3});  // ragged tiles on the tiled path
  for (ops::ScoreKind kind : kScoreKinds)
    for (bool batched : {true, false})
      for (const char* mask : kMaskKinds)
        for (ops::KeepWeights keep : {ops::KeepWeights::Yes, ops::KeepWeights::No}) {
          const std::string label = std::string(ops::score_kind_name(kind)) + (batched ? " batched" : " unbatched") +
                                    ", mask " + mask + (keep == ops::KeepWeights::Yes ? ", weights kept" : ", tiled");
          INFO(label);
          Rng rng(303);
          Case c(kind, batched, rng);
          c.o.mask = make_mask(mask, c.N, 1, c.T, c.S, rng);
          if (!batched && c.o.mask.mask.rank() == 3) c.o.mask.mask.reshape({c.T, c.S});
          if (!batched && c.o.mask.mask.rank() == 4) c.o.mask.mask.reshape({1, c.T, c.S});
          c.o.keep = keep;
          const ops::AttentionResult fwd = ops::attention_forward(c.q, c.k, c.v, c.o);
          const ops::AttentionGrads g = ops::attention_backward(c.q, c.k, c.v, c.o, fwd, c.dc);
          for (const Tensor* t : Case::grads(g, kind)) CHECK(all_finite(*t));
          CHECK(test::gradient_mismatch(c.inputs(), c.names(), [&] { return c.loss(); }, Case::grads(g, kind)) == "");
        }
}

TEST_CASE("additive attention: keys projected beforehand (no W_k) equal the projection inside, both ways") {
  // keys k [N, S, Dk] and Kp = k W_k [N, S, A]: attention(q, Kp, v) without W_k is attention(q, k, v) with it,
  // and its key gradient dKp gives the other's through dk = dKp W_k^T, dW_k = k^T dKp.
  for (const char* mask : kMaskKinds) {
    INFO(mask);
    Rng rng(41);
    Case c(ops::ScoreKind::Additive, true, rng);
    c.o.mask = make_mask(mask, c.N, 1, c.T, c.S, rng);
    Case p = c;
    p.o.weights.W_k = Tensor();
    p.k = Tensor({c.N, c.S, c.A});
    as_matrix(p.k.data(), c.N * c.S, c.A) = as_matrix(c.k.data(), c.N * c.S, c.Dk) * as_matrix(c.o.weights.W_k);
    const ops::AttentionResult f1 = ops::attention_forward(c.q, c.k, c.v, c.o);
    const ops::AttentionResult f2 = ops::attention_forward(p.q, p.k, p.v, p.o);
    check_close(f2.context, f1.context, "context", 1e-6);
    check_close(ops::attention_forward_naive(p.q, p.k, p.v, p.o).context, f1.context, "naive context", 1e-6);
    const ops::AttentionGrads g1 = ops::attention_backward(c.q, c.k, c.v, c.o, f1, c.dc);
    const ops::AttentionGrads g2 = ops::attention_backward(p.q, p.k, p.v, p.o, f2, p.dc);
    CHECK(g2.weights.W_k.empty());
    check_close(g2.query, g1.query, "dq", 1e-5);
    check_close(g2.values, g1.values, "dv", 1e-5);
    Tensor dk({c.N, c.S, c.Dk});
    as_matrix(dk.data(), c.N * c.S, c.Dk) = as_matrix(g2.keys.data(), c.N * c.S, c.A) * as_matrix(c.o.weights.W_k).transpose();
    check_close(dk, g1.keys, "dk through W_k", 1e-5);
    // and its own finite differences, Kp the input
    std::vector<Tensor*> in{&p.q, &p.k, &p.v, &p.o.weights.W_q, &p.o.weights.v, &p.o.weights.b};
    CHECK(test::gradient_mismatch(in, {"query", "projected keys", "values", "W_q", "v", "b"}, [&] { return p.loss(); },
                                  {&g2.query, &g2.keys, &g2.values, &g2.weights.W_q, &g2.weights.v, &g2.weights.b}) == "");
  }
  Rng rng(42);
  Case c(ops::ScoreKind::Additive, true, rng);
  c.o.weights.W_k = Tensor();  // keys of Dk = 2 features, A = 3: not projected keys
  CHECK_THROWS_WITH_AS(ops::attention_forward(c.q, c.k, c.v, c.o),
                       doctest::Contains("without W_k takes projected keys"), attnkit::Error);
}

TEST_CASE("attention forward: fully masked rows in vectorised tiles give zeros, masked weights are exactly 0") {
  // Eigen 3.4's vectorised exp(-inf) is 2.9e-39, not 0: a fully masked row of 16+ keys summed to
  // l > 0 and its context became the mean of the values (lower-right causal, T > S).
  Rng rng(8);
  const Tensor q = rand_normal({1, 40, 4}, rng), k = rand_normal({1, 20, 4}, rng), v = rand_normal({1, 20, 4}, rng);
  ops::AttentionOptions o;
  o.mask.causal = ops::CausalKind::LowerRight;
  const ops::AttentionResult ref = ops::attention_forward_naive(q, k, v, o);
  o.keep = ops::KeepWeights::No;
  check_close(ops::attention_forward(q, k, v, o).context, ref.context, "tiled context", 1e-5);
  o.keep = ops::KeepWeights::Yes;
  const ops::AttentionResult full = ops::attention_forward(q, k, v, o);
  check_close(full.context, ref.context, "full context", 1e-5);
  for (int64_t t = 0; t < 40; ++t)
    for (int64_t s = std::max<int64_t>(t - 19, 0); s < 20; ++s) REQUIRE(full.weights[t * 20 + s] == 0.0f);
}

TEST_CASE("attention_backward: PyTorch autograd golden gradients, every score kind, masks, key lengths") {
  const io::Value all = io::parse_json(io::read_text(ATTNKIT_FIXTURES "/attention_grad/attention_grad.json"),
                                       "attention_grad.json");
  const std::vector<std::string> names = all.names();
  REQUIRE(names.size() == 26);
  for (const std::string& name : names) {
    const io::Value& c = *all.find(name);
    auto get = [&](const char* member) {
      const io::Value* v = c.find(member);
      REQUIRE_MESSAGE((v && v->is_tensor()), name << ": fixture member " << member);
      return v->tensor();
    };
    auto has = [&](const char* member) { return c.find(member) != nullptr; };
    // "<score>.<mask>.<batched|unbatched>[.no-bias]"
    const std::string score = name.substr(0, name.find('.'));
    const Tensor q = get("query"), k = get("keys"), v = get("values"), dc = get("dcontext");
    const bool batched = q.rank() == 3;
    ops::AttentionOptions o;
    o.score = ops::parse_score_kind(score);
    if (name.find(".causal-lower-right.") != std::string::npos) o.mask.causal = ops::CausalKind::LowerRight;
    else if (name.find(".causal.") != std::string::npos) o.mask.causal = ops::CausalKind::UpperLeft;
    if (has("mask")) o.mask.mask = get("mask");
    if (has("key_lengths")) o.mask.key_lengths = io::lengths_from(get("key_lengths"), batched ? q.dim(0) : 1, k.dim(-2), "key lengths");
    if (has("W")) o.weights.W = get("W");
    if (has("W_q")) o.weights.W_q = get("W_q"), o.weights.W_k = get("W_k"), o.weights.v = get("v");
    if (has("b")) o.weights.b = get("b");
    for (ops::KeepWeights keep : {ops::KeepWeights::Yes, ops::KeepWeights::No}) {
      const std::string label = name + (keep == ops::KeepWeights::Yes ? ", weights kept" : ", tiled");
      INFO(label);
      o.keep = keep;
      const ops::AttentionResult fwd = ops::attention_forward(q, k, v, o);
      check_close(fwd.context, get("context"), "context", 1e-5);
      const ops::AttentionGrads g = ops::attention_backward(q, k, v, o, fwd, dc);
      check_close(g.query, get("d_query"), "d_query", 1e-5);
      check_close(g.keys, get("d_keys"), "d_keys", 1e-5);
      check_close(g.values, get("d_values"), "d_values", 1e-5);
      if (has("d_W")) check_close(g.weights.W, get("d_W"), "d_W", 1e-5);
      if (has("d_W_q")) {
        check_close(g.weights.W_q, get("d_W_q"), "d_W_q", 1e-5);
        check_close(g.weights.W_k, get("d_W_k"), "d_W_k", 1e-5);
        check_close(g.weights.v, get("d_v"), "d_v", 1e-5);
      }
      if (has("d_b")) check_close(g.weights.b, get("d_b"), "d_b", 1e-5);
      else CHECK(g.weights.b.empty());
    }
  }
}
