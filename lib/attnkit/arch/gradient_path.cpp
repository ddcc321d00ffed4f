#include "attnkit/arch/gradient_path.hpp"

#include <cmath>

#include "attnkit/arch/layers.hpp"
#include "attnkit/autograd/var.hpp"
#include "attnkit/tensor/random.hpp"

namespace attnkit::arch {

std::vector<GradientCurve> gradient_path(const Sizes& sizes, const std::vector<Layer>& layers, uint64_t seed) {
  check_sizes(sizes);
  const int64_t n = sizes.n, d = sizes.d;
  const bool exact = d <= 64;
  const int64_t P = exact ? d : 16;
  Rng rng(seed);
  const Tensor one = rand_normal({1, n, d}, rng);  // [1, n, d] the sequence
  Tensor xs({P, n, d});                            // [P, n, d] P copies of it
  for (int64_t p = 0; p < P; ++p) std::copy(one.data(), one.data() + n * d, xs.data() + p * n * d);
  Tensor seedgrad({P, n, d});  // [P, n, d] u_p at position n-1, zero elsewhere
  for (int64_t p = 0; p < P; ++p)
    for (int64_t c = 0; c < d; ++c)
      seedgrad[(p * n + n - 1) * d + c] = exact ? (c == p ? 1.0f : 0.0f) : rng.normal();
  std::vector<GradientCurve> curves;
  for (Layer l : layers) {
    Rng init(seed + 1);  // every layer type from the same stream
    auto layer = make_layer(l, sizes, init);
    autograd::Var x(xs, /*requires_grad=*/true);
    const autograd::Var y = layer->forward(x);  // [P, n, d]
    autograd::backward(y, &seedgrad);
    const Tensor& g = x.grad();  // [P, n, d]: row p is u_p^T J(s)
    GradientCurve c{l, std::vector<double>(size_t(n), 0.0), exact};
    for (int64_t s = 0; s < n; ++s) {
      double sq = 0;
      for (int64_t p = 0; p < P; ++p)
        for (int64_t e = 0; e < d; ++e) sq += double(g[(p * n + s) * d + e]) * g[(p * n + s) * d + e];
      c.norm[size_t(n - 1 - s)] = std::sqrt(sq / (exact ? 1.0 : double(P)));
    }
    curves.push_back(std::move(c));
  }
  return curves;
}

}  // namespace attnkit::arch
