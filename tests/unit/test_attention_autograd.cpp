// autograd::attention: one node whose closure calls ops::attention_backward, checked through
// autograd::backward against the op's own gradients and against finite differences.
// Legend: N batch, T queries, S keys, Dq / Dk / Dv feature sizes, A additive size.
#include <doctest/doctest.h>

#include <cmath>

#include "attnkit/autograd/attention.hpp"
#include "attnkit/autograd/functional.hpp"
#include "attnkit/tensor/random.hpp"
#include "gradcheck.hpp"

using namespace attnkit;
using autograd::Var;

TEST_CASE("autograd::attention: gradients reach query, keys, values and Parameters, through backward()") {
  const int64_t N = 2, T = 3, S = 4, Dq = 3, Dk = 2, Dv = 2, A = 3;
  for (ops::ScoreKind kind : {ops::ScoreKind::ScaledDot, ops::ScoreKind::General, ops::ScoreKind::Additive})
    for (ops::KeepWeights keep : {ops::KeepWeights::Yes, ops::KeepWeights::No}) {
      const std::string label = std::string(ops::score_kind_name(kind)) + (keep == ops::KeepWeights::Yes ? " kept" : " tiled");
      INFO(label);
      Rng rng(17);
      const int64_t dk = kind == ops::ScoreKind::ScaledDot ? Dq : Dk;
      Tensor q0 = rand_normal({N, T, Dq}, rng), k0 = rand_normal({N, S, dk}, rng), v0 = rand_normal({N, S, Dv}, rng);
      Parameter W("W", rand_normal({Dq, Dk}, rng, 0, 0.6f)), Wq("W_q", rand_normal({Dq, A}, rng, 0, 0.6f)),
          Wk("W_k", rand_normal({Dk, A}, rng, 0, 0.6f)), vw("v", rand_normal({A}, rng)), b("b", rand_normal({A}, rng, 0, 0.3f));
      Tensor proj0 = rand_normal({Dv, 2}, rng);  // a matmul after the attention: the node chains
      autograd::AttentionOptions o;
      o.score = kind, o.keep = keep;
      o.mask.causal = ops::CausalKind::UpperLeft, o.mask.key_lengths = {4, 2};
      if (kind == ops::ScoreKind::General) o.weights.W = Var::param(W);
      if (kind == ops::ScoreKind::Additive)
        o.weights = {Var(), Var::param(Wq), Var::param(Wk), Var::param(vw), Var::param(b)};
      Var q(q0, true), k(k0, true), v(v0, true), proj(proj0, false);
      autograd::AttentionOutput out = autograd::attention(q, k, v, o);
      CHECK(out.weights.empty() == (keep == ops::KeepWeights::No));
      // L = sum(reshape(c, [N*T, Dv]) @ proj)
      autograd::backward(autograd::sum(autograd::matmul(autograd::reshape(out.context, {N * T, Dv}), proj)));
      CHECK(autograd::tape_size() == 0);

      // the same loss in double through the naive forward, with the op's options
      ops::AttentionOptions ref;
      ref.score = kind, ref.mask = o.mask;
      ref.weights = {W.value, Wq.value, Wk.value, vw.value, b.value};
      Tensor dc({N, T, Dv});  // dL/dc = 1 proj^T
      for (int64_t i = 0; i < N * T; ++i)
        for (int64_t j = 0; j < Dv; ++j) dc[i * Dv + j] = proj0[j * 2] + proj0[j * 2 + 1];
      auto loss = [&] { return test::dot(dc, ops::attention_forward_naive(q0, k0, v0, ref).context); };
      std::vector<Tensor*> inputs{&q0, &k0, &v0};
      std::vector<std::string> names{"query", "keys", "values"};
      std::vector<const Tensor*> grads{&q.grad(), &k.grad(), &v.grad()};
      if (kind == ops::ScoreKind::General) inputs.push_back(&ref.weights.W), names.push_back("W"), grads.push_back(&W.grad);
      if (kind == ops::ScoreKind::Additive) {
        for (Tensor* t : {&ref.weights.W_q, &ref.weights.W_k, &ref.weights.v, &ref.weights.b}) inputs.push_back(t);
        for (const char* n : {"W_q", "W_k", "v", "b"}) names.push_back(n);
        for (Parameter* p : {&Wq, &Wk, &vw, &b}) grads.push_back(&p->grad);
      }
      CHECK(test::gradient_mismatch(inputs, names, loss, grads) == "");
      CHECK(proj.grad().empty());  // requires_grad false: no gradient

      // a second pass accumulates into the leaves and parameters
      const Tensor g1 = q.grad(), p1 = kind == ops::ScoreKind::Additive ? Wq.grad : Tensor();
      autograd::backward(autograd::sum(autograd::attention(q, k, v, o).context));
      autograd::AttentionOutput again = autograd::attention(q, k, v, o);
      (void)again;
      autograd::clear_tape();
      auto changed = [](const Tensor& a, const Tensor& b) {
        double d = 0;
        for (int64_t i = 0; i < a.numel(); ++i) d += std::fabs(double(a[i]) - b[i]);
        return a.numel() == b.numel() && d > 1e-3;
      };
      CHECK(changed(q.grad(), g1));
      if (kind == ops::ScoreKind::Additive) CHECK(changed(Wq.grad, p1));
    }
}

TEST_CASE("autograd::attention: nothing recorded under NoGrad or without inputs that need gradients") {
  Rng rng(2);
  Var q(rand_normal({3, 4}, rng), true), k(rand_normal({5, 4}, rng), true), v(rand_normal({5, 2}, rng), true);
  {
    autograd::NoGrad guard;
    autograd::AttentionOptions o;
    o.keep = ops::KeepWeights::Yes;
    autograd::AttentionOutput out = autograd::attention(q, k, v, o);
    CHECK(autograd::tape_size() == 0);
    CHECK(!out.context.requires_grad());
    CHECK(out.weights.shape() == Shape{3, 5});
    CHECK(out.context.shape() == Shape{3, 2});
  }
  autograd::AttentionOutput out = autograd::attention(Var(q.value()), Var(k.value()), Var(v.value()), {});
  CHECK(autograd::tape_size() == 0);
  CHECK(!out.context.requires_grad());
}
