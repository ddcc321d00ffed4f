// Attention backward: the strided core (sdpa_backward_naive / sdpa_backward_tiled) and
// attention_backward for every score kind, against central differences of the double-precision
// forwards (sdpa_naive, attention_forward_naive), the tiled kernel against the naive one, and
// PyTorch autograd golden values (tests/fixtures/gen_attention_grad.py).
// Legend: N batch, NH heads, T queries, S keys, Dk query/key head size, Dv value head size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attnkit/ops/attention.hpp"
#include "attnkit/tensor/random.hpp"
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
