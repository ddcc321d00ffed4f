// Multi-head and split-heads attention backward: finite differences of a double-precision
// reference (a plain loop forward written here), PyTorch autograd golden gradients
// (tests/fixtures/gen_mha_grad.py), and the autograd wrapper (one node).
// Legend: N batch, T queries, S keys, E model size, Ev value size, NH heads, HS head size.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/multihead.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/nn/attention.hpp"
#include "attnkit/nn/attention_scores.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "gradcheck.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

// Whether key s is visible to query t (batch n, head h) under `m` (ops/attention.hpp's MaskSpec).
bool visible(const ops::MaskSpec& m, int64_t N, int64_t NH, int64_t T, int64_t S, int64_t n, int64_t h, int64_t t,
             int64_t s) {
  if (m.causal == ops::CausalKind::UpperLeft && s > t) return false;
  if (m.causal == ops::CausalKind::LowerRight && s > t + (S - T)) return false;
  if (!m.key_lengths.empty() && s >= m.key_lengths[static_cast<size_t>(n)]) return false;
  if (!m.mask.empty()) {
    const int64_t i = m.mask.rank() == 2 ? t * S + s : m.mask.rank() == 3 ? (n * T + t) * S + s : ((n * NH + h) * T + t) * S + s;
    (void)N;
    if (m.mask[i] == 0.0f) return false;
  }
  return true;
}

// y [rows, out] = x [rows, in] W^T + b (or x W) in double; an empty projection copies x.
std::vector<double> project_ref(const ops::Projection& p, const std::vector<double>& x, int64_t rows) {
  if (p.empty()) return x;
  std::vector<double> y(static_cast<size_t>(rows * p.out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < p.out; ++o) {
      double acc = p.b ? p.b[o] : 0.0;
      for (int64_t i = 0; i < p.in; ++i)
        acc += x[static_cast<size_t>(r * p.in + i)] * (p.in_out ? p.W[i * p.out + o] : p.W[o * p.in + i]);
      y[static_cast<size_t>(r * p.out + o)] = acc;
    }
  return y;
}

std::vector<double> to_double(const Tensor& t) { return std::vector<double>(t.values().begin(), t.values().end()); }

// Heads attention in double on Q [N*T, E], K [N*S, E], V [N*S, Ev]: context [N*T, Ev].
std::vector<double> heads_ref(const std::vector<double>& Q, const std::vector<double>& K, const std::vector<double>& V,
                              int64_t N, int64_t T, int64_t S, int64_t E, int64_t Ev, int64_t NH,
                              const ops::MaskSpec& mask) {
  const int64_t HS = E / NH, HSv = Ev / NH;
  std::vector<double> ctx(static_cast<size_t>(N * T * Ev)), e(static_cast<size_t>(S));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t s = 0; s < S; ++s) {
          if (!visible(mask, N, NH, T, S, n, h, t, s)) {
            e[s] = -std::numeric_limits<double>::infinity();
            continue;
          }
          double acc = 0;
          for (int64_t j = 0; j < HS; ++j) acc += Q[(n * T + t) * E + h * HS + j] * K[(n * S + s) * E + h * HS + j];
          e[s] = acc / std::sqrt(double(HS));
          mx = std::max(mx, e[s]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;  // every key masked: zero context
        double sum = 0;
        for (int64_t s = 0; s < S; ++s) sum += (e[s] = std::exp(e[s] - mx));
        for (int64_t s = 0; s < S; ++s)
          for (int64_t j = 0; j < HSv; ++j)
            ctx[(n * T + t) * Ev + h * HSv + j] += e[s] / sum * V[(n * S + s) * Ev + h * HSv + j];
      }
  return ctx;
}

// The multi-head forward in double (the module's parameters read in place, so nudges show).
std::vector<double> mha_ref(const nn::MultiheadAttention& m, const Tensor& q, const Tensor& k, const Tensor& v,
                            const ops::MaskSpec& mask) {
  const int64_t N = q.rank() == 3 ? q.dim(0) : 1, T = q.dim(-2), S = k.dim(-2);
  const std::vector<double> Q = project_ref(m.q_projection(), to_double(q), N * T);
  const std::vector<double> K = project_ref(m.k_projection(), to_double(k), N * S);
  const std::vector<double> V = project_ref(m.v_projection(), to_double(v), N * S);
  const std::vector<double> ctx = heads_ref(Q, K, V, N, T, S, m.embed_dim(), m.value_dim(), m.num_heads, mask);
  return project_ref(m.out_projection(), ctx, N * T);
}

double dot(const Tensor& dy, const std::vector<double>& y) {
  REQUIRE(static_cast<size_t>(dy.numel()) == y.size());
  double acc = 0;
  for (size_t i = 0; i < y.size(); ++i) acc += dy[static_cast<int64_t>(i)] * y[i];
  return acc;
}

io::Value bundle_of(std::initializer_list<std::pair<const char*, Tensor>> members) {
  io::Value b = io::Value::bundle();
  for (const auto& [name, t] : members) b.set(name, t);
  return b;
}

struct MaskCase {
  const char* name;
  ops::MaskSpec mask;
};

std::vector<MaskCase> mask_cases(int64_t T, int64_t S, Rng& rng) {
  std::vector<MaskCase> out;
  out.push_back({"none", {}});
  ops::MaskSpec causal;
  causal.causal = T == S ? ops::CausalKind::UpperLeft : ops::CausalKind::LowerRight;
  out.push_back({"causal", causal});
  ops::MaskSpec padding;
  padding.key_lengths = {S, 0};  // batch element 1 sees no key at all: zero context, zero gradients
  out.push_back({"key padding", padding});
  ops::MaskSpec explicit_mask;
  explicit_mask.mask = Tensor({T, S});
  for (int64_t i = 0; i < T * S; ++i) explicit_mask.mask[i] = rng.uniform() < 0.7f ? 1.0f : 0.0f;
  explicit_mask.key_lengths = {S - 1, S};
  out.push_back({"explicit + padding", explicit_mask});
  return out;
}

}  // namespace

TEST_CASE("multi-head attention backward: finite differences of a double reference, every weight form and mask") {
  Rng rng(31);
  const int64_t N = 2, T = 4, S = 5, E = 8, NH = 2;
  struct Form {
    const char* name;
    io::Value weights;
    int64_t kdim, vdim;
    bool self;
  };
  std::vector<Form> forms;
  forms.push_back({"in_proj, self-attention",
                   bundle_of({{"in_proj_weight", rand_normal({3 * E, E}, rng, 0, 0.4f)},
                              {"in_proj_bias", rand_normal({3 * E}, rng, 0, 0.2f)},
                              {"out_proj.weight", rand_normal({E, E}, rng, 0, 0.4f)},
                              {"out_proj.bias", rand_normal({E}, rng, 0, 0.2f)}}),
                   E, E, true});
  forms.push_back({"in_proj, cross-attention",
                   bundle_of({{"in_proj_weight", rand_normal({3 * E, E}, rng, 0, 0.4f)},
                              {"out_proj.weight", rand_normal({E, E}, rng, 0, 0.4f)}}),
                   E, E, false});
  forms.push_back({"kdim/vdim",
                   bundle_of({{"q_proj_weight", rand_normal({E, E}, rng, 0, 0.4f)},
                              {"k_proj_weight", rand_normal({E, 3}, rng, 0, 0.4f)},
                              {"v_proj_weight", rand_normal({E, 6}, rng, 0, 0.4f)},
                              {"in_proj_bias", rand_normal({3 * E}, rng, 0, 0.2f)},
                              {"out_proj.weight", rand_normal({E, E}, rng, 0, 0.4f)},
                              {"out_proj.bias", rand_normal({E}, rng, 0, 0.2f)}}),
                   3, 6, false});
  forms.push_back({"documents W_Q, W_K, W_V, W_O",
                   bundle_of({{"W_Q", rand_normal({E, 6}, rng, 0, 0.4f)},
                              {"W_K", rand_normal({E, 6}, rng, 0, 0.4f)},
                              {"W_V", rand_normal({E, 4}, rng, 0, 0.4f)},
                              {"W_O", rand_normal({4, 5}, rng, 0, 0.4f)}}),
                   E, E, true});
  struct TileGuard {
    ops::TileSizes saved = ops::tile_sizes();
    explicit TileGuard(ops::TileSizes s) { ops::set_tile_sizes(s); }
    ~TileGuard() { ops::set_tile_sizes(saved); }
  };
  for (ops::TileSizes tiles : {ops::tile_sizes(), ops::TileSizes{3, 2}})  // one tile, and ragged tiles
  for (Form& f : forms) {
    TileGuard guard(tiles);
    const int64_t Sf = f.self ? T : S;  // self-attention: keys = queries
    for (const MaskCase& mc : mask_cases(T, Sf, rng)) {
      // no weights asked: the probabilities kept for the backward (within the budget) or recomputed
      // from row_lse (budget 0); weights asked: recomputed
      for (int mode = 0; mode < 3; ++mode) {
        const auto hw = mode < 2 ? ops::HeadWeights::None : ops::HeadWeights::Averaged;
        const bool keep = mode == 0;
        const std::string form = f.name, mask = mc.name;
        CAPTURE(form);
        CAPTURE(mask);
        CAPTURE(mode);
        nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(f.weights, NH);
        Tensor q = rand_normal({N, T, E}, rng), k = rand_normal({N, S, f.kdim}, rng), v = rand_normal({N, S, f.vdim}, rng);
        ops::MhaOptions o;
        o.mask = mc.mask;
        o.weights = hw;
        if (mode == 1) o.saved_probs_budget = 0;
        Tensor& kk = f.self ? q : k;
        Tensor& vv = f.self ? q : v;
        ops::MhaCache cache;
        const Tensor y = nn::multihead_attention_forward(m, q, kk, vv, o, &cache).output;
        REQUIRE((cache.probs != nullptr) == keep);
        const Tensor dy = rand_normal(y.shape(), rng);
        CHECK(test::dot(dy, y) == doctest::Approx(dot(dy, mha_ref(m, q, kk, vv, o.mask))).epsilon(1e-4));
        Tensor dq(q.shape()), dk(kk.shape()), dv(vv.shape());
        m.zero_grad();
        nn::multihead_attention_backward(m, q, kk, vv, o, cache, dy, &dq, f.self ? &dq : &dk, f.self ? &dq : &dv);
        std::vector<Tensor*> inputs{&q};
        std::vector<std::string> names{f.self ? "x" : "query"};
        std::vector<const Tensor*> grads{&dq};
        if (!f.self) {
          inputs.push_back(&k), inputs.push_back(&v);
          names.push_back("key"), names.push_back("value");
          grads.push_back(&dk), grads.push_back(&dv);
        }
        for (Parameter* p : m.named_parameters()) {
          inputs.push_back(&p->value);
          names.push_back(p->name);
          grads.push_back(&p->grad);
        }
        auto loss = [&] { return dot(dy, mha_ref(m, q, kk, vv, o.mask)); };
        CHECK(test::gradient_mismatch(inputs, names, loss, grads) == "");
        if (std::string(mc.name) == "key padding") {  // batch element 1 sees no key: its rows get no gradient
          for (int64_t i = N * T * E / 2; i < N * T * E && !f.self; ++i) REQUIRE(dq[i] == 0.0f);
        }
        // the check can fail: a wrong gradient in the last parameter is caught
        Tensor wrong = m.named_parameters().back()->grad;
        wrong[0] += 0.1f + 0.1f * std::fabs(wrong[0]);  // beyond atol + rtol |g|
        std::vector<const Tensor*> wrong_grads = grads;
        wrong_grads.back() = &wrong;
        CHECK(test::gradient_mismatch(inputs, names, loss, wrong_grads) != "");
      }
    }
  }
}

TEST_CASE("split-heads attention backward: finite differences, self and cross, every mask") {
  Rng rng(37);
  const int64_t N = 2, T = 4, S = 5, D = 6, Dv = 4, NH = 2;
  for (const MaskCase& mc : mask_cases(T, S, rng)) {
    const std::string mask = mc.name;
    CAPTURE(mask);
    ops::MhaOptions o;
    o.mask = mc.mask;
    Tensor q = rand_normal({N, T, D}, rng), k = rand_normal({N, S, D}, rng), v = rand_normal({N, S, Dv}, rng);
    auto ref = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      const int64_t Sa = b.dim(1);
      return heads_ref(to_double(a), to_double(b), to_double(c), N, T, Sa, D, c.dim(2), NH, o.mask);
    };
    ops::MhaCache cache;
    const Tensor y = ops::split_heads_attention_forward(q, k, v, NH, o, &cache).output;
    const Tensor dy = rand_normal(y.shape(), rng);
    Tensor dq(q.shape()), dk(k.shape()), dv(v.shape());
    ops::split_heads_attention_backward(q, k, v, NH, o, cache, dy, &dq, &dk, &dv);
    auto loss = [&] { return dot(dy, ref(q, k, v)); };
    CHECK(test::gradient_mismatch({&q, &k, &v}, {"query", "key", "value"}, loss, {&dq, &dk, &dv}) == "");
    Tensor wrong = dv;
    wrong[1] -= 0.1f + 0.1f * std::fabs(wrong[1]);
    CHECK(test::gradient_mismatch({&q, &k, &v}, {"query", "key", "value"}, loss, {&dq, &dk, &wrong}) != "");
    if (mc.mask.causal != ops::CausalKind::None || !mc.mask.mask.empty()) continue;
    // self-attention: one tensor in the three roles (D == Dv), gradients added into one buffer
    Tensor x = rand_normal({N, T, D}, rng);
    ops::MhaOptions os = o;
    if (!os.mask.key_lengths.empty()) os.mask.key_lengths = {T, 0};
    ops::MhaCache cs;
    const Tensor ys = ops::split_heads_attention_forward(x, x, x, NH, os, &cs).output;
    const Tensor dys = rand_normal(ys.shape(), rng);
    Tensor dx(x.shape());
    ops::split_heads_attention_backward(x, x, x, NH, os, cs, dys, &dx, &dx, &dx);
    auto self_loss = [&] { return dot(dys, heads_ref(to_double(x), to_double(x), to_double(x), N, T, T, D, D, NH, os.mask)); };
    CHECK(test::gradient_mismatch({&x}, {"x"}, self_loss, {&dx}) == "");
  }
}

TEST_CASE("autograd::multihead_attention records one node; gradients equal the kernel's, parameters' grads filled") {
  Rng rng(41);
  const int64_t N = 2, T = 6, E = 8, NH = 4;
  io::Value w = bundle_of({{"in_proj_weight", rand_normal({3 * E, E}, rng, 0, 0.4f)},
                           {"in_proj_bias", rand_normal({3 * E}, rng, 0, 0.2f)},
                           {"out_proj.weight", rand_normal({E, E}, rng, 0, 0.4f)}});
  nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(w, NH);
  const Tensor x0 = rand_normal({N, T, E}, rng);
  ops::MhaOptions o;
  o.mask.causal = ops::CausalKind::UpperLeft;
  autograd::Var x(x0, true);
  autograd::Var y = m.forward(x, x, x, o);
  CHECK(autograd::tape_size() == 1);
  const Tensor dy = rand_normal(y.shape(), rng);
  autograd::backward(y, &dy);
  CHECK(autograd::tape_size() == 0);
  // the same through the kernels
  nn::MultiheadAttention m2 = nn::MultiheadAttention::from_bundle(w, NH);
  ops::MhaCache cache;
  nn::multihead_attention_forward(m2, x0, x0, x0, o, &cache);
  Tensor dx(x0.shape());
  nn::multihead_attention_backward(m2, x0, x0, x0, o, cache, dy, &dx, &dx, &dx);
  CHECK(compare(x.grad(), dx, Tolerance{1e-6, 1e-7}).close);
  for (size_t i = 0; i < m.named_parameters().size(); ++i)
    CHECK(compare(m.named_parameters()[i]->grad, m2.named_parameters()[i]->grad, Tolerance{1e-6, 1e-7}).close);
  CHECK(m.in_proj_bias.grad.shape() == Shape{3 * E});
  // no recording under NoGrad
  {
    autograd::NoGrad ng;
    m.forward(x, x, x, o);
    CHECK(autograd::tape_size() == 0);
  }
  // split heads, a cross-attention graph: loss = sum(split(q, k, v))
  autograd::Var q(rand_normal({N, T, E}, rng), true), k(rand_normal({N, 3, E}, rng), true), v(rand_normal({N, 3, E}, rng), true);
  autograd::backward(autograd::sum(autograd::split_heads_attention(q, k, v, NH)));
  CHECK(q.grad().shape() == q.shape());
  CHECK(v.grad().shape() == v.shape());
  double vsum = 0;
  for (float g : v.grad().values()) vsum += g;
  CHECK(vsum == doctest::Approx(double(N * T * E)).epsilon(1e-4));  // each softmax row sums to 1
}

TEST_CASE("multi-head backward: bad input names the tensor, its shape and the expected one") {
  Rng rng(43);
  const int64_t E = 8;
  nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(
      bundle_of({{"in_proj_weight", rand_normal({3 * E, E}, rng)}, {"out_proj.weight", rand_normal({E, E}, rng)}}), 2);
  const Tensor x = rand_normal({2, 5, E}, rng);
  ops::MhaCache cache;
  nn::multihead_attention_forward(m, x, x, x, {}, &cache);
  Tensor dx(x.shape());
  CHECK_THROWS_WITH_AS(nn::multihead_attention_backward(m, x, x, x, {}, cache, Tensor({2, 5, 7}), &dx, &dx, &dx),
                       "multi-head attention backward: the output gradient has shape [2, 5, 7], expected the output's "
                       "shape [2, 5, 8]", Error);
  ops::MhaCache empty;
  CHECK_THROWS_WITH_AS(nn::multihead_attention_backward(m, x, x, x, {}, empty, Tensor({2, 5, 8}), &dx, &dx, &dx),
                       doctest::Contains("is not from a forward with these inputs"), Error);
  m.num_heads = 3;
  CHECK_THROWS_WITH_AS(nn::multihead_attention_backward(m, x, x, x, {}, cache, Tensor({2, 5, 8}), &dx, &dx, &dx),
                       doctest::Contains("NH = 3 heads do not divide the embedding size E = 8"), Error);
}

TEST_CASE("multi-head and split-heads backward: PyTorch autograd golden gradients (nn.MultiheadAttention)") {
  const std::string text = test::fixture_text("mha_grad/mha_grad.json");
  const io::Value all = io::parse_json(text, "mha_grad.json");
  auto get = [](const io::Value& c, const std::string& name) {
    const io::Value* v = c.find(name);
    REQUIRE_MESSAGE((v && v->is_tensor()), "fixture member " << name);
    return v->tensor();
  };
  auto close = [](const Tensor& got, const Tensor& want, const std::string& what) {
    const Comparison cmp = compare(got, want, Tolerance{1e-4, 2e-5});
    CHECK_MESSAGE(cmp.close, what << ": max abs error " << cmp.max_abs_error << " at " << shape_str(cmp.max_abs_at));
  };
  int cases = 0;
  for (const std::string& name : all.names()) {
    CAPTURE(name);
    const io::Value& c = *all.find(name);
    ++cases;
    const int64_t NH = static_cast<int64_t>(get(c, "heads")[0]);
    ops::MhaOptions o;
    if (name.find("causal") != std::string::npos) o.mask.causal = ops::CausalKind::UpperLeft;
    if (name.find("weights") != std::string::npos) o.weights = ops::HeadWeights::Averaged;
    const io::Value& grad = *c.find("grad");
    const Tensor dy = get(c, "dy");
    if (name.rfind("split", 0) == 0) {
      const Tensor q = get(c, "query"), k = get(c, "key"), v = get(c, "value");
      ops::MhaCache cache;
      close(ops::split_heads_attention_forward(q, k, v, NH, o, &cache).output, get(c, "output"), "output");
      Tensor dq(q.shape()), dk(k.shape()), dv(v.shape());
      ops::split_heads_attention_backward(q, k, v, NH, o, cache, dy, &dq, &dk, &dv);
      close(dq, get(grad, "query"), "d query"), close(dk, get(grad, "key"), "d key"), close(dv, get(grad, "value"), "d value");
      continue;
    }
    nn::MultiheadAttention m = nn::MultiheadAttention::from_bundle(*c.find("state"), NH);
    const bool self = c.find("x") != nullptr;
    const Tensor q = get(c, self ? "x" : "query");
    const Tensor k = self ? Tensor() : get(c, "key"), v = self ? Tensor() : get(c, "value");
    const Tensor& kk = self ? q : k;
    const Tensor& vv = self ? q : v;
    if (c.find("key_lengths")) o.mask.key_lengths = nn::key_lengths_from(get(c, "key_lengths"), q.dim(0), "test");
    // probabilities kept by the forward (the default budget) and recomputed by the backward (budget 0)
    for (const bool keep : {true, false}) {
      CAPTURE(keep);
      ops::MhaOptions ok = o;
      if (!keep) ok.saved_probs_budget = 0;
      ops::MhaCache cache;
      close(nn::multihead_attention_forward(m, q, kk, vv, ok, &cache).output, get(c, "output"), "output");
      CHECK((cache.probs != nullptr) == (keep && o.weights == ops::HeadWeights::None));
      Tensor dq(q.shape()), dk(kk.shape()), dv(vv.shape());
      m.zero_grad();
      nn::multihead_attention_backward(m, q, kk, vv, ok, cache, dy, &dq, self ? &dq : &dk, self ? &dq : &dv);
      close(dq, get(grad, self ? "x" : "query"), "d query");
      if (!self) close(dk, get(grad, "key"), "d key"), close(dv, get(grad, "value"), "d value");
      for (Parameter* p : m.named_parameters()) close(p->grad, get(grad, p->name), "d " + p->name);
    }
    CHECK(m.named_parameters().size() >= 3);
    // through the autograd wrapper: the same
    nn::MultiheadAttention m2 = nn::MultiheadAttention::from_bundle(*c.find("state"), NH);
    autograd::Var xq(q, true);
    autograd::Var xk = self ? xq : autograd::Var(k, true), xv = self ? xq : autograd::Var(v, true);
    autograd::backward(m2.forward(xq, xk, xv, o), &dy);
    close(xq.grad(), get(grad, self ? "x" : "query"), "autograd d query");
    for (Parameter* p : m2.named_parameters()) close(p->grad, get(grad, p->name), "autograd d " + p->name);
  }
  CHECK(cases == 8);
}

TEST_CASE("multi-head attention backward: two threads give one thread's gradients (partial dQ, stages), kept and recomputed probabilities") {
  // Big enough that the backward forks (team_for): the tiny sizes above run on one thread.
  Rng rng(47);
  const int64_t N = 2, T = 40, E = 64, NH = 4;
  nn::MultiheadAttention m0 = nn::MultiheadAttention::from_bundle(
      bundle_of({{"in_proj_weight", rand_normal({3 * E, E}, rng, 0, 0.15f)}, {"in_proj_bias", rand_normal({3 * E}, rng, 0, 0.1f)},
                 {"out_proj.weight", rand_normal({E, E}, rng, 0, 0.15f)}, {"out_proj.bias", rand_normal({E}, rng, 0, 0.1f)}}),
      NH);
  const Tensor x = rand_normal({N, T, E}, rng), dy = rand_normal({N, T, E}, rng);
  const int saved = num_threads();
  for (const bool keep : {true, false}) {
    CAPTURE(keep);
    ops::MhaOptions o;
    o.mask.causal = ops::CausalKind::UpperLeft;
    if (!keep) o.saved_probs_budget = 0;
    std::vector<Tensor> dx(2), dW(2);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      nn::MultiheadAttention m = m0;
      ops::MhaCache cache;
      nn::multihead_attention_forward(m, x, x, x, o, &cache);
      CHECK((cache.probs != nullptr) == keep);
      Tensor g(x.shape());
      m.zero_grad();
      nn::multihead_attention_backward(m, x, x, x, o, cache, dy, &g, &g, &g);
      dx[static_cast<size_t>(threads - 1)] = g, dW[static_cast<size_t>(threads - 1)] = m.in_proj_weight.grad;
    }
    set_num_threads(saved);
    for (size_t i = 0; i < 2; ++i) {
      const Tensor& a = i == 0 ? dx[0] : dW[0];
      const Tensor& b = i == 0 ? dx[1] : dW[1];
      const Comparison cmp = compare(b, a, Tolerance{1e-5, 1e-5});
      const std::string what = i == 0 ? "d x" : "d in_proj_weight";
      CHECK_MESSAGE(cmp.close, what << ": max abs error " << cmp.max_abs_error << " at " << shape_str(cmp.max_abs_at));
    }
  }
}
