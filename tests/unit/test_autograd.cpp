// Autograd core (tape, backward, NoGrad, accumulation), the matmul entry against its double
// reference, and Linear / glue ops against finite differences.
// Legend: M rows, K depth, N columns, I in features, O out features.
#include <doctest/doctest.h>

#include <cmath>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/ops/linear.hpp"
#include "attnkit/ops/matmul.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "gradcheck.hpp"
#include "test_util.hpp"

using namespace attnkit;
using autograd::Var;
using ops::Trans;

TEST_CASE("gemm: every transpose form, strides, alpha and beta, one thread and the policy") {
  Rng rng(7);
  for (int threads : {1, 2})
    for (Trans ta : {Trans::No, Trans::Yes})
      for (Trans tb : {Trans::No, Trans::Yes})
        for (auto [M, N, K] : {std::array<int64_t, 3>{3, 5, 7}, {1, 1, 1}, {130, 70, 300}, {4, 0, 3}, {5, 6, 0}}) {
          set_num_threads(threads);
          const int64_t lda = (ta == Trans::No ? K : M) + 2, ldb = (tb == Trans::No ? N : K) + 1, ldc = N + 3;
          Tensor A = rand_normal({ta == Trans::No ? M : K, lda}, rng), B = rand_normal({tb == Trans::No ? K : N, ldb}, rng);
          Tensor C = rand_normal({M, ldc}, rng), R = C;
          ops::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.0f, C.data(), ldc);
          ops::gemm_naive(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 2.0f, R.data(), ldc);
          for (int64_t i = 0; i < C.numel(); ++i) REQUIRE(C[i] == doctest::Approx(R[i]).epsilon(1e-4).scale(1));
        }
  set_num_threads(1);
  // beta = 0 ignores NaN in C
  Tensor A = Tensor::filled({2, 2}, 1.0f), C = Tensor::filled({2, 2}, NAN);
  ops::gemm(Trans::No, Trans::No, 2, 2, 2, 1.0f, A.data(), 2, A.data(), 2, 0.0f, C.data(), 2);
  CHECK(C[0] == 2.0f);
}

TEST_CASE("linear: forward against a double loop, backward against finite differences") {
  Rng rng(11);
  const int64_t M = 5, I = 4, O = 3;
  Tensor x = rand_normal({M, I}, rng), W = rand_normal({O, I}, rng), b = rand_normal({O}, rng);
  Tensor dy = rand_normal({M, O}, rng);
  auto reference = [&] {  // loss = sum(dy ⊙ (x W^T + b)) in double
    double L = 0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o = 0; o < O; ++o) {
        double y = b[o];
        for (int64_t i = 0; i < I; ++i) y += double(x[m * I + i]) * W[o * I + i];
        L += dy[m * O + o] * y;
      }
    return L;
  };
  Tensor y = ops::linear_forward(x, W, b);
  CHECK(test::dot(dy, y) == doctest::Approx(reference()).epsilon(1e-5));
  Tensor dx({M, I}), dW({O, I}), db({O});
  ops::linear_backward(dy, x, W, &dx, &dW, &db);
  CHECK(test::gradient_mismatch({&x, &W, &b}, {"x", "W", "b"}, reference, {&dx, &dW, &db}) == "");
  // a broken backward is caught: the check can fail
  Tensor wrong = dW;
  wrong[2] = -wrong[2] + 0.5f;
  CHECK(test::gradient_mismatch({&W}, {"W"}, reference, {&wrong}) != "");
  // backward adds into what it is given
  Tensor dx2 = dx;
  ops::linear_backward(dy, x, W, &dx2, nullptr, nullptr);
  for (int64_t i = 0; i < dx.numel(); ++i) CHECK(dx2[i] == doctest::Approx(2 * dx[i]));
  CHECK(test::error_of([&] { ops::linear_forward(Tensor({2, 5}), W, b, "linear1"); }) ==
        "linear1: input has shape [2, 5], expected [..., 4] (weight [3, 4] is [out, in])");
}

TEST_CASE("autograd: a graph of glue ops against finite differences, through the tape") {
  Rng rng(3);
  Tensor a0 = rand_normal({2, 3, 4}, rng), w0 = rand_normal({5, 4}, rng), b0 = rand_normal({5}, rng),
         c0 = rand_normal({2, 3, 5}, rng), m0 = rand_normal({5, 2}, rng);
  // L = sum( matmul(reshape(concat([y, slice(y)]...)) ...) ): every glue op on one path
  auto forward = [&](const Var& a, const Var& w, const Var& b, const Var& c, const Var& m) {
    Var y = autograd::linear(a, w, b);                       // [2, 3, 5]
    Var z = autograd::mul(autograd::add(y, c), y);           // [2, 3, 5]
    Var s = autograd::slice(z, 1, 1, 3);                     // [2, 2, 5]
    Var cat = autograd::concat({z, s, autograd::scale(s, -2.0f)}, 1);  // [2, 7, 5]
    Var flat = autograd::reshape(cat, {14, 5});
    Var p = autograd::matmul(flat, m);                       // [14, 2]
    return autograd::add(autograd::sub(p, autograd::scale(p, 0.25f)), autograd::reshape(autograd::slice(m, 0, 0, 1), {2}));
  };
  Tensor dy = rand_normal({14, 2}, rng);
  auto loss = [&] {
    autograd::NoGrad off;
    Var out = forward(Var(a0), Var(w0), Var(b0), Var(c0), Var(m0));
    return test::dot(dy, out.value());
  };
  Var a(a0, true), w(w0, true), b(b0, true), c(c0, true), m(m0, true);
  Var out = forward(a, w, b, c, m);
  CHECK(autograd::tape_size() > 10);
  autograd::backward(out, &dy);
  CHECK(autograd::tape_size() == 0);
  Tensor ga = a.grad(), gw = w.grad(), gb = b.grad(), gc = c.grad(), gm = m.grad();
  CHECK(test::gradient_mismatch({&a0, &w0, &b0, &c0, &m0}, {"a", "w", "b", "c", "m"}, loss,
                                {&ga, &gw, &gb, &gc, &gm}) == "");
  // leaf gradients accumulate over passes until zeroed
  Var out2 = forward(a, w, b, c, m);
  autograd::backward(out2, &dy);
  CHECK(a.grad()[0] == doctest::Approx(2 * ga[0]));
  a.zero_grad();
  CHECK(a.grad()[0] == 0.0f);
}

TEST_CASE("autograd: NoGrad records nothing; parameters receive their gradient; deep chains run iteratively") {
  Parameter p("weight", Tensor({2, 2}, {1, 2, 3, 4}));
  Var x(Tensor({1, 2}, {1, 1}));
  {
    autograd::NoGrad off;
    Var y = autograd::linear(x, Var::param(p), Var());
    CHECK(!y.requires_grad());
    CHECK(autograd::tape_size() == 0);
  }
  Var y = autograd::sum(autograd::linear(x, Var::param(p), Var()));
  autograd::backward(y);
  CHECK(p.grad.values() == std::vector<float>{1, 1, 1, 1});  // d sum(x W^T) / d W = x for every row
  // 100,000 nodes deep: no recursion, and every node's saved tensors go as it runs
  Var h(Tensor::scalar(1.0f), true);
  Var acc = h;
  for (int i = 0; i < 100000; ++i) acc = autograd::scale(acc, 1.0f);
  autograd::backward(acc);
  CHECK(h.grad()[0] == 1.0f);
  CHECK(test::error_of([&] { autograd::backward(autograd::linear(x, Var::param(p), Var())); }) ==
        "backward: the root has shape [1, 2]; give its gradient, or reduce it to one element first");
  autograd::clear_tape();
}
