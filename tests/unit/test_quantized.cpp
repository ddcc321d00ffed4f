// The int8 and bfloat16 kernels of ops/quantized.hpp: every kernel this processor runs (the others are named as
// skipped) against the plain reference loop, exactly: the int8 integer sums and the bf16 float sums agree bit for
// bit; sizes that leave partial blocks (N not a multiple of 16, K not of 4, rows not of the register tile), one
// thread and two. Then the float results against the float32 product within the quantization's own bound, the
// rounding rules (bf16 ties to even, int8 symmetric in [-127, 127]), and what a stored matrix refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attnkit/ops/quantized.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

using namespace attnkit;
using ops::LowpKernel;

namespace {

const LowpKernel kAll[] = {LowpKernel::Reference, LowpKernel::Avx2, LowpKernel::Avx512};

std::vector<float> normal(int64_t n, Rng& rng, float scale = 1.0f) {
  Tensor t = rand_normal({n}, rng);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = t[i] * scale;
  return v;
}

struct Sizes {
  int64_t m, n, k;
};
const Sizes kSizes[] = {{1, 1, 1}, {1, 16, 4}, {1, 17, 5}, {2, 33, 7}, {3, 15, 64}, {4, 64, 131}, {5, 48, 16},
                        {7, 100, 33}, {9, 31, 260}, {1, 512, 512}};

}  // namespace

TEST_CASE("int8: every kernel's integer sums equal the reference loop's") {
  for (LowpKernel kernel : kAll) {
    if (!ops::q8_kernel_available(kernel)) {
      MESSAGE("int8 kernel ", ops::lowp_kernel_name(kernel), " skipped: this processor does not run it");
      continue;
    }
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (const Sizes& s : kSizes) {
        Rng rng(static_cast<uint64_t>(s.m * 1000 + s.n * 10 + s.k));
        const std::vector<float> w = normal(s.n * s.k, rng);
        const ops::Q8Matrix q = ops::quantize_q8(w.data(), s.n, s.k);
        std::vector<int8_t> a(static_cast<size_t>(s.m * q.k4), 0);
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t c = 0; c < s.k; ++c)  // every value from -127 to 127 appears, the extremes included
            a[static_cast<size_t>(i * q.k4 + c)] = static_cast<int8_t>((i * 37 + c * 101) % 255 - 127);
        const int64_t n16 = (s.n + 15) / 16 * 16;
        std::vector<int32_t> want(static_cast<size_t>(s.m * n16), 0), got(want.size(), -1);
        ops::q8_accumulate(q, a.data(), s.m, want.data(), LowpKernel::Reference);
        ops::q8_accumulate(q, a.data(), s.m, got.data(), kernel);
        CAPTURE(ops::lowp_kernel_name(kernel));
        CAPTURE(threads);
        CAPTURE(s.m);
        CAPTURE(s.n);
        CAPTURE(s.k);
        int64_t wrong = 0;
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t r = 0; r < s.n; ++r) wrong += want[static_cast<size_t>(i * n16 + r)] != got[static_cast<size_t>(i * n16 + r)];
        CHECK(wrong == 0);
      }
    }
  }
  set_num_threads(0);
}

TEST_CASE("int8: every kernel's float results equal the reference loop's, bit for bit") {
  // the sums turn into floats inside each kernel's tiles: fma(float(sum), t s, bias), or float(sum) (t s)
  for (LowpKernel kernel : kAll) {
    if (!ops::q8_kernel_available(kernel)) continue;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (const Sizes& s : kSizes)
        for (bool with_bias : {true, false}) {
          Rng rng(static_cast<uint64_t>(3 + s.m * 100 + s.n * 10 + s.k));
          const std::vector<float> w = normal(s.n * s.k, rng, 0.1f), x = normal(s.m * s.k, rng), bias = normal(s.n, rng);
          const ops::Q8Matrix q = ops::quantize_q8(w.data(), s.n, s.k);
          const int64_t ldy = s.n + 3;  // a row stride past N: the columns between are left alone
          std::vector<float> want(static_cast<size_t>(s.m * ldy), -7.0f), got(want);
          const float* b = with_bias ? bias.data() : nullptr;
          ops::q8_linear(q, x.data(), s.m, s.k, b, want.data(), ldy, LowpKernel::Reference);
          ops::q8_linear(q, x.data(), s.m, s.k, b, got.data(), ldy, kernel);
          CAPTURE(ops::lowp_kernel_name(kernel));
          CAPTURE(threads);
          CAPTURE(with_bias);
          CAPTURE(s.m);
          CAPTURE(s.n);
          CAPTURE(s.k);
          int64_t wrong = 0;
          for (size_t i = 0; i < want.size(); ++i) wrong += std::memcmp(&want[i], &got[i], sizeof(float)) != 0;
          CHECK(wrong == 0);
          CHECK(got[static_cast<size_t>(s.n)] == -7.0f);
        }
    }
  }
  set_num_threads(0);
}

TEST_CASE("int8: the reference loop's sums are the plain integer products") {
  // W = [[1, -2, 3], [127, 0, -127]] (scales 3/127 and 1): q = [[42, -85, 127], [127, 0, -127]]
  const float w[] = {1, -2, 3, 127, 0, -127};
  const ops::Q8Matrix q = ops::quantize_q8(w, 2, 3);
  CHECK(q.q == std::vector<int8_t>{42, -85, 127, 127, 0, -127});
  CHECK(q.scale[0] == doctest::Approx(3.0 / 127));
  const int8_t a[] = {1, 2, 3, 0};  // k4 = 4
  int32_t acc[16] = {};
  ops::q8_accumulate(q, a, 1, acc, LowpKernel::Reference);
  CHECK(acc[0] == 42 - 170 + 381);
  CHECK(acc[1] == 127 - 381);
}

TEST_CASE("int8: the linear layer is within the quantization's bound of float32") {
  for (LowpKernel kernel : kAll) {
    if (!ops::q8_kernel_available(kernel)) continue;
    for (const Sizes& s : kSizes) {
      Rng rng(static_cast<uint64_t>(7 + s.n));
      const std::vector<float> w = normal(s.n * s.k, rng, 0.1f), x = normal(s.m * s.k, rng), bias = normal(s.n, rng);
      const ops::Q8Matrix q = ops::quantize_q8(w.data(), s.n, s.k);
      std::vector<float> y(static_cast<size_t>(s.m * s.n));
      ops::q8_linear(q, x.data(), s.m, s.k, bias.data(), y.data(), s.n, kernel);
      for (int64_t i = 0; i < s.m; ++i) {
        float xmax = 0;
        for (int64_t c = 0; c < s.k; ++c) xmax = std::max(xmax, std::fabs(x[static_cast<size_t>(i * s.k + c)]));
        for (int64_t r = 0; r < s.n; ++r) {
          double exact = bias[static_cast<size_t>(r)], wmax = 0;
          for (int64_t c = 0; c < s.k; ++c) {
            exact += double(x[static_cast<size_t>(i * s.k + c)]) * w[static_cast<size_t>(r * s.k + c)];
            wmax = std::max(wmax, double(std::fabs(w[static_cast<size_t>(r * s.k + c)])));
          }
          // |x w - x^ w^| <= sum_k (|x| |w - w^| + |x - x^| |w^|) <= K (xmax s/2 + t/2 wmax), s = wmax/127, t = xmax/127
          const double bound = double(s.k) * (xmax * wmax / 127.0) * 1.01 + 1e-5 * (1 + std::fabs(exact));
          CAPTURE(s.k);
          CHECK(std::fabs(y[static_cast<size_t>(i * s.n + r)] - exact) <= bound);
        }
      }
    }
  }
}

TEST_CASE("int8: a row holding NaN or infinity gives NaN outputs, the other rows their values") {
  Rng rng(5);
  const int64_t n = 8, k = 16;
  const std::vector<float> w = normal(n * k, rng, 0.1f);
  const ops::Q8Matrix q = ops::quantize_q8(w.data(), n, k);
  std::vector<float> x = normal(3 * k, rng);
  x[3] = std::nanf("");                                   // row 0
  x[k + 5] = -std::numeric_limits<float>::infinity();     // row 1
  for (LowpKernel kernel : kAll) {
    if (!ops::q8_kernel_available(kernel)) continue;
    std::vector<float> y(static_cast<size_t>(3 * n));
    ops::q8_linear(q, x.data(), 3, k, nullptr, y.data(), n, kernel);
    for (int64_t r = 0; r < n; ++r) {
      CHECK(std::isnan(y[static_cast<size_t>(r)]));
      CHECK(std::isnan(y[static_cast<size_t>(n + r)]));
      CHECK(std::isfinite(y[static_cast<size_t>(2 * n + r)]));
    }
  }
}

TEST_CASE("int8: every kernel's row quantization gives the plain loop's bytes and scales") {
  // rows of k values past and short of the vector widths: random, exact ties of the rounding (amax 127, s = 1:
  // 0.5, 1.5, 2.5 ...), negative zeros, all zeros, subnormals (a scale with no finite inverse), NaN and infinity
  const float inf = std::numeric_limits<float>::infinity(), tiny = std::numeric_limits<float>::denorm_min();
  for (int64_t k : {1, 3, 7, 8, 9, 15, 16, 17, 33, 131, 512}) {
    const int64_t k4 = (k + 3) / 4 * 4, m = 8, ldx = k + 2;
    Rng rng(static_cast<uint64_t>(k));
    std::vector<float> x = normal(m * ldx, rng, 3.0f);
    for (int64_t c = 0; c < k; ++c) {
      x[static_cast<size_t>(1 * ldx + c)] = c == 0 ? 127.0f : float(c % 9) - 4.5f;       // ties
      x[static_cast<size_t>(2 * ldx + c)] = c % 2 ? -0.0f : 0.0f;                          // zeros
      x[static_cast<size_t>(3 * ldx + c)] = tiny * float(c % 5) * (c % 2 ? -1.0f : 1.0f);  // subnormals
      x[static_cast<size_t>(6 * ldx + c)] = float(c) * 1e30f;                              // large
    }
    x[static_cast<size_t>(4 * ldx + k - 1)] = std::nanf("");
    x[static_cast<size_t>(5 * ldx + k / 2)] = -inf;
    std::vector<int8_t> want(static_cast<size_t>(m * k4), 99);
    std::vector<float> want_t(static_cast<size_t>(m));
    ops::q8_quantize_rows(x.data(), m, k, ldx, k4, want.data(), want_t.data(), LowpKernel::Reference);
    CHECK(std::isnan(want_t[4]));
    CHECK(std::isnan(want_t[5]));
    if (k > 2) {  // ties to even: -3.5 to -4, -2.5 to -2
      CHECK(want[static_cast<size_t>(1 * k4 + 1)] == -4);
      CHECK(want[static_cast<size_t>(1 * k4 + 2)] == -2);
    }
    for (LowpKernel kernel : kAll) {
      if (!ops::q8_kernel_available(kernel)) continue;
      CAPTURE(ops::lowp_kernel_name(kernel));
      CAPTURE(k);
      std::vector<int8_t> got(static_cast<size_t>(m * k4), 77);
      std::vector<float> got_t(static_cast<size_t>(m));
      ops::q8_quantize_rows(x.data(), m, k, ldx, k4, got.data(), got_t.data(), kernel);
      CHECK(got == want);
      CHECK(std::memcmp(got_t.data(), want_t.data(), sizeof(float) * static_cast<size_t>(m)) == 0);
    }
  }
}

TEST_CASE("int8: stored matrices are checked; an unavailable kernel is refused") {
  CHECK_THROWS_WITH_AS(ops::q8_from_stored({1, -128}, {1.0f}, 1, 2),
                       "int8 weights: -128 is outside the symmetric range [-127, 127]", Error);
  CHECK_THROWS_WITH_AS(ops::q8_from_stored({1, 2, 3}, {1.0f}, 1, 2), "int8 weights: 3 values and 1 scales for [1, 2]", Error);
  CHECK_THROWS_WITH_AS(ops::q8_from_stored({1, 2}, {NAN}, 1, 2), "int8 weights: a scale of nan (scales are finite, >= 0)", Error);
  const float bad[] = {1, INFINITY};
  CHECK_THROWS_WITH_AS(ops::quantize_q8(bad, 1, 2), "quantize_q8: weight [0, 1] is inf", Error);
  const ops::Q8Matrix q = ops::q8_from_stored({3, -4}, {0.5f}, 1, 2);
  const float x[] = {2, 1};
  float y = 0;
  ops::q8_linear(q, x, 1, 2, nullptr, &y, 1, LowpKernel::Reference);  // x quantized: t = 2/127, a = [127, 64]
  CHECK(y == doctest::Approx((127 * 3 - 64 * 4) * (2.0 / 127) * 0.5));
  for (LowpKernel kernel : kAll)
    if (!ops::q8_kernel_available(kernel))
      CHECK_THROWS_AS(ops::q8_linear(q, x, 1, 2, nullptr, &y, 1, kernel), Error);
}

TEST_CASE("bfloat16: rounding is to nearest, ties to even") {
  CHECK(ops::from_bf16(ops::to_bf16(1.0f)) == 1.0f);
  CHECK(ops::from_bf16(ops::to_bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);                              // tie: even
  CHECK(ops::from_bf16(ops::to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));  // tie: even
  CHECK(ops::from_bf16(ops::to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))) == 1.0f + std::ldexp(1.0f, -7));
  CHECK(ops::from_bf16(ops::to_bf16(-2.5f)) == -2.5f);
  CHECK(ops::to_bf16(3.0e38f) == 0x7F62);  // the largest bfloat16s stay finite
  CHECK_THROWS_AS(ops::bf16_from_stored({0x7F80}, 1, 1), Error);  // infinity
}

TEST_CASE("bfloat16: every kernel equals the reference loop bit for bit") {
  for (LowpKernel kernel : kAll) {
    if (!ops::bf16_kernel_available(kernel)) {
      MESSAGE("bf16 kernel ", ops::lowp_kernel_name(kernel), " skipped: this processor does not run it");
      continue;
    }
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (const Sizes& s : kSizes) {
        Rng rng(static_cast<uint64_t>(s.n * 3 + s.k));
        const std::vector<float> w = normal(s.n * s.k, rng), x = normal(s.m * (s.k + 2), rng), bias = normal(s.n, rng);
        const ops::Bf16Matrix b = ops::quantize_bf16(w.data(), s.n, s.k);
        std::vector<float> want(static_cast<size_t>(s.m * (s.n + 1)), 0), got(want.size(), 0);
        ops::bf16_linear(b, x.data(), s.m, s.k + 2, bias.data(), want.data(), s.n + 1, LowpKernel::Reference);
        ops::bf16_linear(b, x.data(), s.m, s.k + 2, bias.data(), got.data(), s.n + 1, kernel);
        CAPTURE(ops::lowp_kernel_name(kernel));
        CAPTURE(threads);
        CAPTURE(s.m);
        CAPTURE(s.n);
        CAPTURE(s.k);
        CHECK(want == got);  // the padding column stays 0 in both
        // and within float rounding of the float32 product with the rounded weights
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t r = 0; r < s.n; ++r) {
            double exact = bias[static_cast<size_t>(r)], mag = std::fabs(exact);
            for (int64_t c = 0; c < s.k; ++c) {
              const double p = double(x[static_cast<size_t>(i * (s.k + 2) + c)]) * ops::from_bf16(b.w[static_cast<size_t>(r * s.k + c)]);
              exact += p, mag += std::fabs(p);
            }
            CHECK(std::fabs(got[static_cast<size_t>(i * (s.n + 1) + r)] - exact) <= 2e-6 * double(s.k + 1) * mag + 1e-30);
          }
      }
    }
  }
  set_num_threads(0);
}
