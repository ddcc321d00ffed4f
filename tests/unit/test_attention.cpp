// Attention family: golden values from PyTorch (tests/fixtures/gen_attention.py), fast kernels
// against the naive reference, and properties (permutation equivariance, causality, masked rows).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/svg_heatmap.hpp"
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/attention_scores.hpp"
#include "attnkit/ops/attention_scores.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

const io::Value& fixtures() {
  static const io::Value v = io::parse_json(io::read_text(ATTNKIT_FIXTURES "/attention.json"), "attention.json");
  return v;
}
const io::Value& fixture(const char* name) {
  const io::Value* c = fixtures().find(name);
  REQUIRE_MESSAGE(c != nullptr, "fixture case " << name);
  return *c;
}
Tensor member(const io::Value& c, const char* name) {
  const io::Value* v = c.find(name);
  REQUIRE_MESSAGE((v && v->is_tensor()), "fixture member " << name);
  return v->tensor();
}
bool has(const io::Value& c, const char* name) { return c.find(name) != nullptr; }

void check_close(const Tensor& got, const Tensor& want, const char* what, double rtol = 1e-4, double atol = 2e-5) {
  Comparison cmp = compare(got, want, Tolerance{rtol, atol});
  CHECK_MESSAGE(cmp.close, std::string(what) << ": got " << got.shape_str() << " want " << want.shape_str() << ", max abs error "
                                << cmp.max_abs_error << " at " << shape_str(cmp.max_abs_at) << ", mismatches "
                                << cmp.mismatches);
}

bool all_finite(const Tensor& t) {
  return std::all_of(t.values().begin(), t.values().end(), [](float x) { return std::isfinite(x); });
}

// The case name says the causal kind (the reader keeps no strings): *causal_lower_right*, *causal*.
ops::MaskSpec mask_of(const std::string& name, const io::Value& c, int64_t N) {
  ops::MaskSpec m;
  if (name.find("causal_lower_right") != std::string::npos) m.causal = ops::CausalKind::LowerRight;
  else if (name.find("causal") != std::string::npos) m.causal = ops::CausalKind::UpperLeft;
  if (has(c, "key_lengths")) m.key_lengths = nn::key_lengths_from(member(c, "key_lengths"), N, "test");
  if (has(c, "mask")) m.mask = member(c, "mask");
  return m;
}

// nn.MultiheadAttention-style weights (no biases) drawn from N(0, 0.4^2).
nn::MultiheadAttention random_mha(Rng& rng, int64_t E, int64_t NH) {
  io::Value w = io::Value::bundle();
  w.set("in_proj_weight", rand_normal({3 * E, E}, rng, 0, 0.4f));
  w.set("out_proj.weight", rand_normal({E, E}, rng, 0, 0.4f));
  return nn::MultiheadAttention::from_bundle(w, NH);
}

// The three mask kinds the tiled kernel's tests go through: none (kind 0), causal (1), and key lengths {T, short_len}
// for a batch of two (2).
ops::MhaOptions mask_kind(int kind, int64_t T, int64_t short_len) {
  ops::MhaOptions o;
  if (kind == 1) o.mask.causal = ops::CausalKind::UpperLeft;
  if (kind == 2) o.mask.key_lengths = {T, short_len};
  return o;
}

struct TileGuard {
  ops::TileSizes saved = ops::tile_sizes();
  explicit TileGuard(ops::TileSizes s) { ops::set_tile_sizes(s); }
  ~TileGuard() { ops::set_tile_sizes(saved); }
};

}  // namespace

TEST_CASE("softmax and log-softmax: golden values at +-1e4, finite, fully masked rows give zeros") {
  const io::Value& c = fixture("softmax");
  const Tensor x = member(c, "x");
  check_close(ops::softmax_forward(x), member(c, "softmax"), "softmax", 1e-5, 1e-7);
  check_close(ops::softmax_naive(x), member(c, "softmax"), "softmax_naive", 1e-5, 1e-7);
  check_close(ops::log_softmax_forward(x), member(c, "log_softmax"), "log_softmax", 1e-5, 1e-3);
  check_close(ops::log_softmax_naive(x), member(c, "log_softmax"), "log_softmax_naive", 1e-5, 1e-3);
  CHECK(all_finite(ops::softmax_forward(x)));
  CHECK(all_finite(ops::log_softmax_forward(x)));
  const float inf = std::numeric_limits<float>::infinity();
  Tensor masked({2, 3}, {-inf, -inf, -inf, 1.0f, -inf, 1.0f});
  ops::SoftmaxStats st;
  Tensor y = ops::softmax_forward(masked, &st);
  CHECK(y.values() == std::vector<float>{0, 0, 0, 0.5f, 0, 0.5f});
  CHECK(st.row_sum[0] == 0.0f);
  CHECK(st.row_max[1] == 1.0f);
  CHECK(ops::softmax_naive(masked).values() == y.values());
}

TEST_CASE("attention_forward: PyTorch golden scores, weights and context for every score and mask kind") {
  for (const char* name : {"sdpa_plain", "dot_plain", "sdpa_causal_square", "sdpa_causal_wide", "sdpa_causal_lower_right",
                           "sdpa_causal_lower_right_tall", "sdpa_key_lengths", "sdpa_explicit", "general", "additive",
                           "additive_key_lengths"}) {
    const std::string case_name = name;
    CAPTURE(case_name);
    const io::Value& c = fixture(name);
    const Tensor q = member(c, "q"), k = member(c, "k"), v = member(c, "v");
    ops::AttentionOptions o;
    o.score = case_name.rfind("dot", 0) == 0        ? ops::ScoreKind::Dot
              : case_name.rfind("general", 0) == 0  ? ops::ScoreKind::General
              : case_name.rfind("additive", 0) == 0 ? ops::ScoreKind::Additive
                                                    : ops::ScoreKind::ScaledDot;
    if (has(c, "W")) o.weights.W = member(c, "W");
    if (has(c, "W_q")) o.weights.W_q = member(c, "W_q"), o.weights.W_k = member(c, "W_k"),
                       o.weights.v = member(c, "v_att"), o.weights.b = member(c, "b");
    o.mask = mask_of(case_name, c, q.dim(0));
    for (int impl = 0; impl < 3; ++impl) {
      CAPTURE(impl);
      o.keep = impl == 1 ? ops::KeepWeights::No : ops::KeepWeights::Yes;
      ops::AttentionResult r = impl == 2 ? ops::attention_forward_naive(q, k, v, o) : ops::attention_forward(q, k, v, o);
      check_close(r.context, member(c, "context"), "context");
      CHECK(all_finite(r.context));
      if (impl != 1) {
        check_close(r.scores, member(c, "scores"), "scores");
        check_close(r.weights, member(c, "weights"), "weights");
      }
    }
    // unbatched [T, D] gives the first batch element's results
    ops::AttentionOptions o1 = o;
    if (!o1.mask.key_lengths.empty()) o1.mask.key_lengths.resize(1);
    if (!o1.mask.mask.empty() && o1.mask.mask.rank() == 3) {
      Tensor m0({o1.mask.mask.dim(1), o1.mask.mask.dim(2)});
      std::copy(o1.mask.mask.data(), o1.mask.mask.data() + m0.numel(), m0.data());
      o1.mask.mask = m0;
    }
    auto first = [](const Tensor& t) {
      Tensor r(Shape(t.shape().begin() + 1, t.shape().end()));
      std::copy(t.data(), t.data() + r.numel(), r.data());
      return r;
    };
    ops::AttentionResult r1 = ops::attention_forward(first(q), first(k), first(v), o1);
    check_close(r1.context, first(member(c, "context")), "unbatched context");
  }
}

TEST_CASE("multi-head attention: PyTorch nn.MultiheadAttention golden outputs and weights") {
  for (const char* name : {"mha_self", "mha_self_causal", "mha_self_padding", "mha_cross", "mha_cross_padding",
                           "mha_cross_kvdim", "mha_per_head_mask", "mha_unbatched"}) {
    const std::string case_name = name;
    CAPTURE(case_name);
    const io::Value& c = fixture(name);
    const Tensor q = member(c, "query"), k = member(c, "key"), v = member(c, "value");
    const int64_t NH = static_cast<int64_t>(member(c, "heads")[0]);
    nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(*c.find("state"), NH);
    ops::MhaOptions o;
    o.mask = mask_of(case_name, c, q.rank() == 3 ? q.dim(0) : 1);
    for (auto hw : {ops::HeadWeights::None, ops::HeadWeights::Averaged, ops::HeadWeights::PerHead}) {
      o.weights = hw;
      ops::MhaResult r = nn::multihead_attention_forward(m, q, k, v, o);
      check_close(r.output, member(c, "output"), "output");
      if (hw == ops::HeadWeights::None) CHECK(r.weights.empty());
      if (hw == ops::HeadWeights::Averaged) check_close(r.weights, member(c, "weights_avg"), "averaged weights");
      if (hw == ops::HeadWeights::PerHead) check_close(r.weights, member(c, "weights_per_head"), "per-head weights");
      if (case_name.find("self") != std::string::npos || case_name == "mha_unbatched") {
        // one tensor for all three: the fused QKV projection path
        ops::MhaResult rs = nn::multihead_attention_forward(m, q, q, q, o);
        check_close(rs.output, member(c, "output"), "fused self-attention output");
        if (hw == ops::HeadWeights::PerHead) check_close(rs.weights, member(c, "weights_per_head"), "fused per-head weights");
      }
      ops::MhaResult rn = nn::multihead_attention_forward_naive(m, q, k, v, o);
      check_close(rn.output, member(c, "output"), "naive output");
    }
  }
}

TEST_CASE("tiled and full kernels match the naive reference on random sizes, ragged tiles and every mask") {
  Rng rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    CAPTURE(trial);
    const int64_t N = 1 + rng.next_u32() % 2, T = 1 + rng.next_u32() % 19, S = 1 + rng.next_u32() % 23;
    const int64_t D = 1 + rng.next_u32() % 9, Dv = 1 + rng.next_u32() % 7;
    const Tensor q = rand_normal({N, T, D}, rng, 0, 2), k = rand_normal({N, S, D}, rng, 0, 2), v = rand_normal({N, S, Dv}, rng);
    ops::AttentionOptions o;
    o.score = trial % 2 ? ops::ScoreKind::ScaledDot : ops::ScoreKind::Dot;
    const int kind = trial % 5;
    if (kind == 1) o.mask.causal = ops::CausalKind::UpperLeft;
    if (kind == 2) o.mask.causal = ops::CausalKind::LowerRight;
    if (kind == 3)
      for (int64_t n = 0; n < N; ++n) o.mask.key_lengths.push_back(rng.next_u32() % (S + 1));
    if (kind == 4) {
      o.mask.mask = Tensor({N, T, S});
      for (auto& x : o.mask.mask.values()) x = rng.uniform() < 0.6f ? 1.0f : 0.0f;
      o.mask.causal = ops::CausalKind::UpperLeft;
    }
    CAPTURE(N);
    CAPTURE(T);
    CAPTURE(S);
    CAPTURE(D);
    CAPTURE(kind);
    const ops::AttentionResult ref = ops::attention_forward_naive(q, k, v, o);
    TileGuard tiles({1 + rng.next_u32() % 6, 1 + rng.next_u32() % 7});
    o.keep = ops::KeepWeights::No;
    const ops::AttentionResult tiled = ops::attention_forward(q, k, v, o);
    check_close(tiled.context, ref.context, "tiled context");
    check_close(tiled.row_logsumexp, ref.row_logsumexp, "tiled row log-sum-exp");
    o.keep = ops::KeepWeights::Yes;
    const ops::AttentionResult full = ops::attention_forward(q, k, v, o);
    check_close(full.context, ref.context, "full context");
    check_close(full.weights, ref.weights, "full weights");
    check_close(full.scores, ref.scores, "full scores");
    check_close(full.row_logsumexp, ref.row_logsumexp, "full row log-sum-exp");
    CHECK(all_finite(tiled.context));
  }
}

TEST_CASE("tiled kernel: scores far above a row's first tiles' max, and rows masked in their first tiles") {
  // The tiles shift exp by a row's max so far and take a new max only when a tile's sum passes 2^100 (or a
  // row had none yet): here the scores climb by 32-40 a key tile (row 0 keeps e^32 and e^64 above its
  // shift; later tiles would overflow and are done again with their max), and rows 0-2 see keys only from
  // the third tile on. Key tiles of 8 (no panels: each tile at once), and of 32 with query tiles of 20 (on
  // the panels, 12 rows at a time through Q K^T, softmax and P V: the redo takes those rows alone).
  struct Case {
    int64_t T, S, key_tile, query_tile;
    float key_step;  // k[j, 0] = key_step j: scores climb by 0.5 (2 + 0.1 t) key_step a key
  };
  for (const Case cs : {Case{6, 40, 8, 4, 4.0f}, Case{30, 160, 32, 20, 1.0f}}) {
    const int64_t T = cs.T, S = cs.S, D = 4, Dv = 3;
    CAPTURE(T);
    Tensor q({1, T, D}), k({1, S, D}), v({1, S, Dv});
    for (int64_t t = 0; t < T; ++t) q[t * D] = 2.0f + 0.1f * t, q[t * D + 1] = 0.5f;
    for (int64_t j = 0; j < S; ++j) {
      k[j * D] = cs.key_step * j, k[j * D + 1] = std::sin(0.7f * j);
      for (int64_t c = 0; c < Dv; ++c) v[j * Dv + c] = std::cos(0.3f * j + c);
    }
    for (int masked = 0; masked < 2; ++masked) {
      CAPTURE(masked);
      ops::AttentionOptions o;
      if (masked) {
        o.mask.mask = Tensor::filled({T, S}, 1.0f);
        for (int64_t t = 0; t < 3; ++t)
          for (int64_t j = 0; j < 2 * cs.key_tile; ++j) o.mask.mask[t * S + j] = 0.0f;
      }
      const ops::AttentionResult ref = ops::attention_forward_naive(q, k, v, o);
      TileGuard tiles({cs.query_tile, cs.key_tile});
      o.keep = ops::KeepWeights::No;
      const ops::AttentionResult tiled = ops::attention_forward(q, k, v, o);
      REQUIRE(all_finite(tiled.context));
      check_close(tiled.context, ref.context, "tiled context");
      check_close(tiled.row_logsumexp, ref.row_logsumexp, "tiled row log-sum-exp");
    }
  }
}

TEST_CASE("tiled multi-head kernel matches the naive reference with large ragged tiles") {
  Rng rng(11);
  const int64_t N = 2, T = 300, S = 277, E = 16, NH = 4;
  io::Value w = io::Value::bundle();
  w.set("in_proj_weight", rand_normal({3 * E, E}, rng, 0, 0.3f));
  w.set("in_proj_bias", rand_normal({3 * E}, rng, 0, 0.1f));
  w.set("out_proj.weight", rand_normal({E, E}, rng, 0, 0.3f));
  w.set("out_proj.bias", rand_normal({E}, rng, 0, 0.1f));
  nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(w, NH);
  const Tensor q = rand_normal({N, T, E}, rng), k = rand_normal({N, S, E}, rng), v = rand_normal({N, S, E}, rng);
  ops::MhaOptions o;
  o.mask.causal = ops::CausalKind::LowerRight;
  o.mask.key_lengths = {277, 150};
  const ops::MhaResult ref = nn::multihead_attention_forward_naive(m, q, k, v, o);
  // query tiles of 150: each head's last tile cut in 4 pieces that run last (ops/attention_tiled.cpp)
  for (ops::TileSizes ts : {ops::TileSizes{128, 256}, ops::TileSizes{33, 61}, ops::TileSizes{300, 1000}, ops::TileSizes{150, 128}}) {
    TileGuard g(ts);
    check_close(nn::multihead_attention_forward(m, q, k, v, o).output, ref.output, "tiled MHA output");
  }
}

TEST_CASE("self-attention without positional encoding is permutation equivariant") {
  Rng rng(3);
  const int64_t T = 7, E = 8;
  const nn::MultiheadAttention m = random_mha(rng, E, 2);
  const Tensor x = rand_normal({T, E}, rng);
  std::vector<int64_t> perm(T);
  std::iota(perm.begin(), perm.end(), 0);
  std::reverse(perm.begin(), perm.end());
  std::swap(perm[1], perm[4]);
  Tensor xp({T, E});
  for (int64_t i = 0; i < T; ++i) std::copy(x.data() + perm[i] * E, x.data() + (perm[i] + 1) * E, xp.data() + i * E);
  const Tensor y = nn::multihead_attention_forward(m, x, x, x, {}).output;
  const Tensor yp = nn::multihead_attention_forward(m, xp, xp, xp, {}).output;
  Tensor y_permuted({T, E});
  for (int64_t i = 0; i < T; ++i) std::copy(y.data() + perm[i] * E, y.data() + (perm[i] + 1) * E, y_permuted.data() + i * E);
  check_close(yp, y_permuted, "f(P X) = P f(X)", 1e-5, 1e-6);
}

TEST_CASE("a causal mask makes output row t independent of the inputs after t") {
  Rng rng(5);
  const int64_t T = 9, E = 8;
  const nn::MultiheadAttention m = random_mha(rng, E, 4);
  ops::MhaOptions o;
  o.mask.causal = ops::CausalKind::UpperLeft;
  const Tensor x = rand_normal({1, T, E}, rng);
  const Tensor y = nn::multihead_attention_forward(m, x, x, x, o).output;
  for (int64_t t = 0; t + 1 < T; ++t) {
    Tensor x2 = x;
    for (int64_t i = (t + 1) * E; i < T * E; ++i) x2[i] += 10.0f * rng.normal();
    const Tensor y2 = nn::multihead_attention_forward(m, x2, x2, x2, o).output;
    for (int64_t i = 0; i < (t + 1) * E; ++i) REQUIRE_MESSAGE(y2[i] == y[i], "row " << i / E << " changed, t = " << t);
    bool later_changed = false;
    for (int64_t i = (t + 1) * E; i < T * E; ++i) later_changed |= y2[i] != y[i];
    CHECK(later_changed);
  }
}

TEST_CASE("a query whose keys are all masked gets zero weights and a zero context, never NaN") {
  Rng rng(9);
  const Tensor q = rand_normal({2, 3, 4}, rng), k = rand_normal({2, 5, 4}, rng), v = rand_normal({2, 5, 3}, rng);
  for (auto keep : {ops::KeepWeights::Yes, ops::KeepWeights::No}) {
    ops::AttentionOptions o;
    o.keep = keep;
    o.mask.key_lengths = {0, 5};
    o.mask.mask = Tensor::filled({3, 5}, 1.0f);
    for (int64_t s = 0; s < 5; ++s) o.mask.mask[2 * 5 + s] = 0.0f;  // query 2 masked everywhere
    for (int naive = 0; naive < 2; ++naive) {
      ops::AttentionResult r = naive ? ops::attention_forward_naive(q, k, v, o) : ops::attention_forward(q, k, v, o);
      CHECK(all_finite(r.context));
      for (int64_t j = 0; j < 3 * 3; ++j) CHECK(r.context[j] == 0.0f);  // batch 0: no keys at all
      for (int64_t j = 0; j < 3; ++j) CHECK(r.context[(3 + 2) * 3 + j] == 0.0f);  // batch 1, query 2
      CHECK(r.context[3 * 3] != 0.0f);
      if (!r.weights.empty()) {
        for (int64_t s = 0; s < 5; ++s) CHECK(r.weights[(3 + 2) * 5 + s] == 0.0f);
        CHECK(std::isinf(r.scores[0]));
      }
    }
  }
  // the additive score too
  ops::AttentionOptions o;
  o.score = ops::ScoreKind::Additive;
  o.weights.W_q = rand_normal({4, 6}, rng), o.weights.W_k = rand_normal({4, 6}, rng), o.weights.v = rand_normal({6}, rng);
  o.mask.key_lengths = {0, 2};
  for (auto keep : {ops::KeepWeights::Yes, ops::KeepWeights::No}) {
    o.keep = keep;
    ops::AttentionResult r = ops::attention_forward(q, k, v, o);
    check_close(r.context, ops::attention_forward_naive(q, k, v, o).context, "additive context");
    for (int64_t j = 0; j < 9; ++j) CHECK(r.context[j] == 0.0f);
  }
}

TEST_CASE("split-heads attention = scaled-dot attention on each column block, concatenated") {
  Rng rng(13);
  const int64_t N = 2, T = 4, S = 6, D = 6, Dv = 9, NH = 3;
  const Tensor q = rand_normal({N, T, D}, rng), k = rand_normal({N, S, D}, rng), v = rand_normal({N, S, Dv}, rng);
  ops::MhaOptions o;
  o.weights = ops::HeadWeights::PerHead;
  o.mask.causal = ops::CausalKind::LowerRight;
  const ops::MhaResult r = ops::split_heads_attention_forward(q, k, v, NH, o);
  REQUIRE(r.output.shape() == Shape{N, T, Dv});
  REQUIRE(r.weights.shape() == Shape{N, NH, T, S});
  auto block = [](const Tensor& x, int64_t h, int64_t w) {
    Tensor b({x.dim(0), x.dim(1), w});
    for (int64_t r = 0; r < x.dim(0) * x.dim(1); ++r)
      std::copy(x.data() + r * x.dim(2) + h * w, x.data() + r * x.dim(2) + (h + 1) * w, b.data() + r * w);
    return b;
  };
  for (int64_t h = 0; h < NH; ++h) {
    ops::AttentionOptions ao;
    ao.mask.causal = ops::CausalKind::LowerRight;
    ops::AttentionResult a = ops::attention_forward_naive(block(q, h, D / NH), block(k, h, D / NH), block(v, h, Dv / NH), ao);
    check_close(block(r.output, h, Dv / NH), a.context, "head context");
  }
  o.weights = ops::HeadWeights::None;
  check_close(ops::split_heads_attention_forward(q, k, v, NH, o).output, r.output, "tiled split heads");
}

TEST_CASE("documents' weight form W_Q, W_K, W_V: single-head self-attention Q = X W_Q") {
  Rng rng(17);
  const int64_t T = 5, D = 4, Dk = 3, Dv = 2;
  io::Value w = io::Value::bundle();
  const Tensor WQ = rand_normal({D, Dk}, rng), WK = rand_normal({D, Dk}, rng), WV = rand_normal({D, Dv}, rng);
  w.set("W_Q", WQ).set("W_K", WK).set("W_V", WV);
  const Tensor x = rand_normal({T, D}, rng);
  nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(w, 1);
  const Tensor y = nn::multihead_attention_forward(m, x, x, x, {}).output;
  auto mm = [](const Tensor& a, const Tensor& b) {
    Tensor c({a.dim(0), b.dim(1)});
    for (int64_t i = 0; i < a.dim(0); ++i)
      for (int64_t j = 0; j < b.dim(1); ++j)
        for (int64_t l = 0; l < a.dim(1); ++l) c[i * b.dim(1) + j] += a[i * a.dim(1) + l] * b[l * b.dim(1) + j];
    return c;
  };
  ops::AttentionResult ref = ops::attention_forward_naive(mm(x, WQ), mm(x, WK), mm(x, WV), {});
  check_close(y, ref.context, "X W_Q attention");
}

TEST_CASE("bad input: messages name the tensors, their shapes and what was expected") {
  Rng rng(1);
  const Tensor q = rand_normal({3, 8}, rng), k = rand_normal({4, 16}, rng), v = rand_normal({4, 2}, rng);
  CHECK_THROWS_WITH_AS(ops::attention_forward(q, k, v, {}),
                       doctest::Contains("keys [4, 16] and query [3, 8] disagree on the feature size"), Error);
  ops::AttentionOptions o;
  o.mask.mask = Tensor::filled({3, 5}, 1.0f);
  CHECK_THROWS_WITH_AS(ops::attention_forward(q, rand_normal({4, 8}, rng), v, o),
                       doctest::Contains("mask has shape [3, 5], expected [T, S] = [3, 4]"), Error);
  o.mask.mask = Tensor::filled({3, 4}, 2.0f);
  CHECK_THROWS_WITH_AS(ops::attention_forward(q, rand_normal({4, 8}, rng), v, o),
                       doctest::Contains("expected 0 (masked) or 1 (attend)"), Error);
  io::Value w = io::Value::bundle();
  w.set("in_proj_weight", Tensor({24, 8})).set("out_proj.weight", Tensor({8, 8}));
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention::from_bundle(w, 3), doctest::Contains("NH = 3 heads do not divide the embedding size E = 8"), Error);
  w.set("out_proj.weight", Tensor({8, 7}));
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention::from_bundle(w, 2),
                       doctest::Contains("out_proj.weight has shape [8, 7], expected [E, E] = [8, 8]"), Error);
  w.set("in_proj_weight", Tensor({24, 7}));
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention::from_bundle(w, 2), doctest::Contains("in_proj_weight has shape [24, 7], expected [3E, E]"), Error);
  o = {};
  o.score = ops::ScoreKind::General;
  o.weights.W = Tensor({8, 7});
  CHECK_THROWS_WITH_AS(ops::attention_forward(q, rand_normal({4, 8}, rng), v, o),
                       doctest::Contains("W has shape [8, 7], expected [Dq, Dk] = [8, 8]"), Error);
  CHECK_THROWS_WITH_AS(ops::split_heads_attention_forward(q, rand_normal({4, 8}, rng), v, 3, {}),
                       doctest::Contains("NH = 3 heads do not divide"), Error);
}

TEST_CASE("SVG heatmap: labelled, escaped, one panel per matrix") {
  Tensor w({2, 2, 3}, {0.1f, 0.2f, 0.7f, 1, 0, 0, 0.3f, 0.3f, 0.4f, 0, 0.5f, 0.5f});
  io::HeatmapOptions o;
  o.row_labels = {"s0", "s<1>"};
  o.col_labels = {"h1", "h2", "h3"};
  const std::string svg = io::heatmap_svg(w, o);
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.find("</svg>") != std::string::npos);
  CHECK(svg.find(">h3</text>") != std::string::npos);
  CHECK(svg.find("s&lt;1&gt;") != std::string::npos);
  CHECK(svg.find("n = 1") != std::string::npos);
  o.col_labels = {"h1"};
  CHECK_THROWS_AS(io::heatmap_svg(w, o), Error);
}

TEST_CASE("SVG heatmap: the canvas is as wide as the title") {
  // width="W" of the <svg> element
  auto width_of = [](const std::string& svg) {
    const size_t at = svg.find("width=\"") + 7;
    return std::stoi(svg.substr(at, svg.find('"', at) - at));
  };
  // the title's estimated width: bold 14 px sans-serif at about 0.6 em a character, from x = 10
  auto title_width = [](const std::string& text) { return 10 + static_cast<int>(text.size() * 14 * 0.6); };
  io::HeatmapOptions o;
  const std::string small = io::heatmap_svg(Tensor({2, 2}, {0.5f, 0.5f, 1, 0}), o);
  CHECK(small.find(">attention weights [2, 2]</text>") != std::string::npos);
  CHECK(width_of(small) >= title_width("attention weights [2, 2]"));
  o.title = "cross-attention of the last decoder layer, mean over the heads";
  const std::string one = io::heatmap_svg(Tensor({1, 1}, {1}), o);
  CHECK(width_of(one) >= title_width(o.title + " [1, 1]"));
  // a wide map keeps its own width
  o.title = "w";
  const std::string wide = io::heatmap_svg(Tensor::zeros({2, 40}), o);
  CHECK(width_of(wide) > title_width("w [2, 40]") + 100);
}

TEST_CASE("multi-head attention checks NH | E at its entry, for a module filled by hand too") {
  Rng rng(21);
  nn::MultiheadAttention m = random_mha(rng, 8, 2);
  m.num_heads = 3;  // E = 8: used to write garbage
  const Tensor x = rand_normal({2, 5, 8}, rng);
  for (int path = 0; path < 3; ++path) {
    CAPTURE(path);
    auto run = [&] {
      if (path == 0) nn::multihead_attention_forward(m, x, x, x, {});
      else if (path == 1) nn::multihead_attention_forward_ops(m, x, x, x, {});
      else nn::multihead_attention_forward_naive(m, x, x, x, {});
    };
    CHECK_THROWS_WITH_AS(run(), "multi-head attention: NH = 3 heads do not divide the embedding size E = 8", Error);
  }
  m.num_heads = 0;
  CHECK_THROWS_WITH_AS(nn::multihead_attention_forward(m, x, x, x, {}),
                       "multi-head attention: the number of heads must be at least 1, not 0", Error);
  m.num_heads = 2;
  m.out_proj_weight.value = Tensor({8, 4});
  CHECK_THROWS_WITH_AS(nn::multihead_attention_forward(m, x, x, x, {}),
                       doctest::Contains("out_proj.weight has shape [8, 4], expected [E, E] = [8, 8]"), Error);
}

TEST_CASE("MultiheadAttention is a Module: parameters named and ordered like PyTorch's state_dict") {
  Rng rng(22);
  const int64_t E = 8;
  io::Value w = io::Value::bundle();
  w.set("in_proj_weight", rand_normal({3 * E, E}, rng)).set("in_proj_bias", rand_normal({3 * E}, rng));
  io::Value out = io::Value::bundle();
  out.set("weight", rand_normal({E, E}, rng)).set("bias", rand_normal({E}, rng));
  w.set("out_proj", std::move(out));  // nested form
  auto names = [](nn::Module& mod) {
    std::vector<std::string> n;
    for (Parameter* p : mod.named_parameters()) n.push_back(p->name);
    return n;
  };
  nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(w, 2);
  CHECK(names(m) == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"});
  CHECK(m.named_parameters()[2]->value.values() == w.find("out_proj")->find("weight")->tensor().values());
  io::Value kv = io::Value::bundle();
  kv.set("q_proj_weight", rand_normal({E, E}, rng)).set("k_proj_weight", rand_normal({E, 3}, rng));
  kv.set("v_proj_weight", rand_normal({E, 5}, rng)).set("out_proj.weight", rand_normal({E, E}, rng));
  nn::MultiheadAttention mkv = nn::MultiheadAttention::from_bundle(kv, 4);
  CHECK(names(mkv) == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"});
  io::Value doc = io::Value::bundle();
  doc.set("W_Q", rand_normal({4, 6}, rng)).set("W_K", rand_normal({4, 6}, rng)).set("W_V", rand_normal({4, 2}, rng));
  doc.set("W_O", rand_normal({2, 3}, rng));
  nn::MultiheadAttention md = nn::MultiheadAttention::from_bundle(doc, 2);
  CHECK(names(md) == std::vector<std::string>{"W_Q", "W_K", "W_V", "W_O"});
  CHECK(md.output_dim() == 3);
  // every tensor's presence and shape
  kv.set("v_proj_weight", rand_normal({7, 5}, rng));
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention::from_bundle(kv, 4),
                       doctest::Contains("v_proj_weight has shape [7, 5], expected [E, vdim] with E = 8"), Error);
  io::Value missing = io::Value::bundle();
  missing.set("q_proj_weight", rand_normal({E, E}, rng)).set("k_proj_weight", rand_normal({E, 3}, rng));
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention::from_bundle(missing, 4),
                       doctest::Contains("q_proj_weight needs k_proj_weight and v_proj_weight too (v_proj_weight is missing)"),
                       Error);
  w.set("in_proj_bias", rand_normal({3 * E + 1}, rng));
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention::from_bundle(w, 2),
                       doctest::Contains("in_proj_bias has shape [25], expected [3E] = [24]"), Error);
  doc.set("W_O", rand_normal({3, 3}, rng));
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention::from_bundle(doc, 2),
                       doctest::Contains("W_O has shape [3, 3], expected [Ev, Eo] with Ev = 2"), Error);
  io::Value notensor = io::Value::bundle();
  notensor.set("in_proj_weight", io::Value::bundle());
  CHECK_THROWS_WITH_AS(nn::MultiheadAttention::from_bundle(notensor, 2),
                       doctest::Contains("in_proj_weight is a bundle, not a tensor"), Error);
}

TEST_CASE("fused multi-head forward = op by op (project, heads attention, project) for every weight form and mask") {
  Rng rng(23);
  const int64_t N = 2, T = 37, S = 29, E = 16, NH = 4;
  io::Value in = io::Value::bundle();
  in.set("in_proj_weight", rand_normal({3 * E, E}, rng, 0, 0.3f)).set("in_proj_bias", rand_normal({3 * E}, rng, 0, 0.1f));
  in.set("out_proj.weight", rand_normal({E, E}, rng, 0, 0.3f)).set("out_proj.bias", rand_normal({E}, rng, 0, 0.1f));
  io::Value kv = io::Value::bundle();
  kv.set("q_proj_weight", rand_normal({E, E}, rng, 0, 0.3f)).set("k_proj_weight", rand_normal({E, 6}, rng, 0, 0.3f));
  kv.set("v_proj_weight", rand_normal({E, 10}, rng, 0, 0.3f)).set("out_proj.weight", rand_normal({E, E}, rng, 0, 0.3f));
  io::Value doc = io::Value::bundle();
  doc.set("W_Q", rand_normal({E, 12}, rng, 0, 0.3f)).set("W_K", rand_normal({E, 12}, rng, 0, 0.3f));
  doc.set("W_V", rand_normal({E, 8}, rng, 0, 0.3f)).set("W_O", rand_normal({8, 5}, rng, 0, 0.3f));
  // default tiles (one query tile), and query tiles of 8: K and V packed into panels by the projection's
  // tasks (row blocks of 12, so panels of 32 keys shared by two tasks and by both batch elements)
  for (const ops::TileSizes ts : {ops::tile_sizes(), ops::TileSizes{8, 32}})
  for (const io::Value* w : {&in, &kv, &doc}) {
    TileGuard guard(ts);
    CAPTURE(ts.query);
    const nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(*w, NH);
    const bool kvdim = w == &kv;
    const Tensor q = rand_normal({N, T, E}, rng), k = rand_normal({N, S, kvdim ? 6 : E}, rng),
                 v = rand_normal({N, S, kvdim ? 10 : E}, rng);
    for (int mask = 0; mask < 3; ++mask) {
      ops::MhaOptions o;
      if (mask == 1) o.mask.causal = ops::CausalKind::LowerRight;
      if (mask == 2) o.mask.key_lengths = {S, 11};
      for (auto hw : {ops::HeadWeights::None, ops::HeadWeights::PerHead}) {
        o.weights = hw;
        const ops::MhaResult fused = nn::multihead_attention_forward(m, q, k, v, o);
        const ops::MhaResult by_ops = nn::multihead_attention_forward_ops(m, q, k, v, o);
        check_close(fused.output, by_ops.output, "fused vs op by op", 1e-5, 1e-6);
        if (hw == ops::HeadWeights::PerHead) check_close(fused.weights, by_ops.weights, "weights", 1e-5, 1e-7);
        if (!kvdim) {  // self-attention: the fused Q | K | V projection
          check_close(nn::multihead_attention_forward(m, q, q, q, o).output,
                      nn::multihead_attention_forward_ops(m, q, q, q, o).output, "fused self vs op by op", 1e-5, 1e-6);
        }
        // cross-attention over keys and values projected once (a decoder's cache)
        const Tensor K = ops::project(m.k_projection(), k, "key projection");
        const Tensor V = ops::project(m.v_projection(), v, "value projection");
        check_close(nn::multihead_attention_forward_projected(m, q, K, V, o).output, fused.output, "pre-projected K, V",
                    1e-5, 1e-6);
      }
    }
  }
  // a broken piece is seen: the fused path against a module whose output projection differs
  nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(in, NH);
  const Tensor x = rand_normal({N, T, E}, rng);
  const Tensor y = nn::multihead_attention_forward_ops(m, x, x, x, {}).output;
  m.out_proj_weight.value[3] += 0.01f;
  CHECK_FALSE(compare(nn::multihead_attention_forward(m, x, x, x, {}).output, y, Tolerance{1e-5, 1e-6}).close);
}

TEST_CASE("fused multi-head forward after an in-place weight change (touched) runs on the new weights, in a copy too") {
  Rng rng(29);
  const int64_t N = 2, T = 37, E = 16, NH = 4;
  io::Value in = io::Value::bundle();
  in.set("in_proj_weight", rand_normal({3 * E, E}, rng, 0, 0.3f)).set("in_proj_bias", rand_normal({3 * E}, rng, 0, 0.1f));
  in.set("out_proj.weight", rand_normal({E, E}, rng, 0, 0.3f)).set("out_proj.bias", rand_normal({E}, rng, 0, 0.1f));
  io::Value doc = io::Value::bundle();
  doc.set("W_Q", rand_normal({E, 12}, rng, 0, 0.3f)).set("W_K", rand_normal({E, 12}, rng, 0, 0.3f));
  doc.set("W_V", rand_normal({E, 8}, rng, 0, 0.3f)).set("W_O", rand_normal({8, 5}, rng, 0, 0.3f));
  const Tensor x = rand_normal({N, T, E}, rng), m_in = rand_normal({N, 23, E}, rng);
  for (const io::Value* w : {&in, &doc}) {
    nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(*w, NH);
    for (const Tensor* kv : {&x, &m_in}) {  // self-attention (Q | K | V joined) and cross-attention
      auto fused_matches_ops = [&](const nn::MultiheadAttention& a, const char* what) {
        const Tensor y = nn::multihead_attention_forward(a, x, *kv, *kv, {}).output;  // packed weights
        check_close(y, nn::multihead_attention_forward_ops(a, x, *kv, *kv, {}).output, what, 1e-5, 1e-6);
        ops::MhaCache cache;  // training's forward packs per task: the same products, the same bits
        CHECK(nn::multihead_attention_forward(a, x, *kv, *kv, {}, &cache).output.values() == y.values());
      };
      fused_matches_ops(m, "before");  // packs the weights
      for (Parameter* p : m.named_parameters()) {  // as an optimizer step does
        for (float& v : p->value.values()) v = 0.5f * v + 0.01f;
        p->touch();
      }
      fused_matches_ops(m, "after the change");
      nn::MultiheadAttention copy = m;
      for (Parameter* p : copy.named_parameters()) {
        for (float& v : p->value.values()) v *= -1.5f;
        p->touch();
      }
      fused_matches_ops(copy, "the changed copy");
      fused_matches_ops(m, "the original after its copy changed");
    }
  }
}

TEST_CASE("multi-head attention writes its output whole: recycled buffers full of NaN change no bit of it") {
  // The output is Tensor::uninitialized (a big one takes a freed tensor's buffer, old values and all): the
  // output projection, the heads' contexts (no projection) and a batch element whose keys are all masked (zero
  // contexts) must write every row, with and without the heads' weights.
  Rng rng(47);
  const int64_t N = 2, T = 512, E = 256, NH = 4, floats = N * T * E;  // 2^18 floats: big enough to be recycled
  const nn::MultiheadAttention m = random_mha(rng, E, NH);
  const Tensor x = rand_normal({N, T, E}, rng);
  for (int mask = 0; mask < 3; ++mask)
    for (auto hw : {ops::HeadWeights::None, ops::HeadWeights::PerHead}) {
      CAPTURE(mask);
      ops::MhaOptions o = mask_kind(mask, T, 0);  // kind 2: the second element's queries see no key
      o.weights = hw;
      test::fill_recycled_buffers(floats, 0.0f);
      const Tensor zeros = nn::multihead_attention_forward(m, x, x, x, o).output;
      const Tensor heads_zeros = ops::heads_attention_forward(x, x, x, NH, o).output;
      test::fill_recycled_buffers(floats, std::nanf(""));
      const Tensor nans = nn::multihead_attention_forward(m, x, x, x, o).output;
      CHECK(all_finite(nans));
      CHECK(nans.values() == zeros.values());
      test::fill_recycled_buffers(floats, std::nanf(""));
      const Tensor heads_nans = ops::heads_attention_forward(x, x, x, NH, o).output;
      CHECK(all_finite(heads_nans));
      CHECK(heads_nans.values() == heads_zeros.values());
    }
}

TEST_CASE("attention contexts of 1 MB and more (written with streaming stores) = the weights kernel's") {
  // From 1 MB of contexts the tiled kernel writes them with streaming stores: with the output projection and without
  // (the contexts are the output), every mask kind, against the kernel that materialises the heads' weights
  // (sdpa_full: no tiles, plain stores).
  Rng rng(67);
  const int64_t N = 2, T = 512, E = 256, NH = 4;  // contexts [N, T, E]: 1 MB
  const nn::MultiheadAttention m = random_mha(rng, E, NH);
  const Tensor x = rand_normal({N, T, E}, rng);
  for (int mask = 0; mask < 3; ++mask) {
    CAPTURE(mask);
    const ops::MhaOptions o = mask_kind(mask, T, 100);
    ops::MhaOptions with_weights = o;
    with_weights.weights = ops::HeadWeights::PerHead;
    check_close(nn::multihead_attention_forward(m, x, x, x, o).output,
                nn::multihead_attention_forward(m, x, x, x, with_weights).output, "projected: tiled vs weights kernel",
                1e-4, 1e-4);
    check_close(ops::heads_attention_forward(x, x, x, NH, o).output,
                ops::heads_attention_forward(x, x, x, NH, with_weights).output, "heads: tiled vs weights kernel", 1e-5,
                1e-5);
  }
}

TEST_CASE("fused self-attention reading V as it lies (rows an odd number of cache lines apart) = op by op") {
  // Without a cache the fused forward pads its Q | K | V rows (3E = 192 floats, 12 lines) to 13 lines, and P V
  // reads V there instead of packing its panels, where the heads' Dv (32) is whole panels. Query tiles of 8 rows
  // (several per head, so the panels path is what it replaces), key tiles of 32, ragged ends, every mask kind.
  Rng rng(61);
  const int64_t N = 2, T = 45, E = 64, NH = 2;
  TileGuard guard(ops::TileSizes{8, 32});
  const nn::MultiheadAttention m = random_mha(rng, E, NH);
  const Tensor x = rand_normal({N, T, E}, rng);
  for (int mask = 0; mask < 3; ++mask) {
    CAPTURE(mask);
    const ops::MhaOptions o = mask_kind(mask, T, 17);
    const Tensor fused = nn::multihead_attention_forward(m, x, x, x, o).output;
    check_close(fused, nn::multihead_attention_forward_ops(m, x, x, x, o).output, "fused vs op by op", 1e-5, 1e-6);
    check_close(fused, nn::multihead_attention_forward_naive(m, x, x, x, o).output, "fused vs naive", 1e-4, 1e-4);
  }
}
