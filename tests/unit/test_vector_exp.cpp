// The softmax's exponential (ops/vector_exp.hpp): accuracy against double exp over the range a
// shifted score takes, the edges (-inf, NaN, below the normal floats), the tail of a row, and a sum
// whose bits do not depend on where the row lies.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attnkit/ops/vector_exp.hpp"

using attnkit::ops::detail::exp_shifted_sum;

namespace {
// |y - exp(x)| in units of the float spacing at exp(x)
double ulps(float y, double x) {
  const double e = std::exp(x);
  const float f = static_cast<float>(e);
  return std::fabs(y - e) / (std::nextafter(f, std::numeric_limits<float>::infinity()) - f);
}
}  // namespace

TEST_CASE("exp_shifted_sum: within 1.1 ulp of exp over [-87.33, 0] and a little above, 0 below -87.7; the sum of what it wrote") {
  const int n = 1 << 20;
  std::vector<float> x(n), y;
  for (int i = 0; i < n; ++i) x[i] = -87.3f + 88.0f * static_cast<float>(i) / n;  // up to +0.7: lse rounding
  for (float shift : {0.0f, 3.5f, -2.0f}) {
    y = x;
    const float sum = exp_shifted_sum(y.data(), n, shift);
    double worst = 0, total = 0;
    int64_t flushed_wrong = 0;
    for (int i = 0; i < n; ++i) {
      const float t = x[i] - shift;
      if (t < -87.7f) flushed_wrong += y[i] != 0.0f;  // n <= -127: 0
      else if (t < -87.33f) flushed_wrong += y[i] != 0.0f && std::fabs(y[i] - std::exp(double(t))) > 0x1p-148;
      else worst = std::max(worst, ulps(y[i], double(t)));  // normal results
      total += y[i];
    }
    CAPTURE(shift);
    CHECK(worst <= 1.1);
    CHECK(flushed_wrong == 0);
    CHECK(std::fabs(sum - total) <= 1e-5 * total);
  }
}

TEST_CASE("exp_shifted_sum: -inf and anything below -87.7 give exactly 0, NaN stays NaN, values past n untouched") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-inf, -1000.0f, -86.8f, -86.0f, 0.0f, nan, -inf, 1.0f, -0.5f, -inf, 7.0f};
  const int64_t n = 10;  // x[10] is past the row
  const float sum = exp_shifted_sum(x.data(), n, 1.0f);
  CHECK(x[0] == 0.0f);
  CHECK(x[1] == 0.0f);
  CHECK(x[2] == 0.0f);
  CHECK(x[3] > 0.0f);
  CHECK(ulps(x[3], double(-86.0f - 1.0f)) <= 1.1);  // 1.6e-38, just above FLT_MIN
  CHECK(ulps(x[4], -1.0) <= 1.1);
  CHECK(std::isnan(x[5]));
  CHECK(x[6] == 0.0f);
  CHECK(x[7] == 1.0f);
  CHECK(ulps(x[8], -1.5) <= 1.1);
  CHECK(x[9] == 0.0f);
  CHECK(x[10] == 7.0f);
  CHECK(std::isnan(sum));
  // a fully masked row: every entry 0, sum 0
  std::vector<float> masked(13, -inf);
  CHECK(exp_shifted_sum(masked.data(), 13, 0.0f) == 0.0f);
  for (float v : masked) CHECK(v == 0.0f);
}

TEST_CASE("exp_shifted_sum: the same row at any offset gives the same bits, values and sum") {
  std::vector<float> row(37);
  for (size_t i = 0; i < row.size(); ++i) row[i] = -0.37f * static_cast<float>((i * 7) % 23);
  std::vector<float> first = row;
  const float sum0 = exp_shifted_sum(first.data(), 37, 0.25f);
  for (int offset = 1; offset < 8; ++offset) {
    std::vector<float> buf(64, 0.0f);
    std::copy(row.begin(), row.end(), buf.begin() + offset);
    const float sum = exp_shifted_sum(buf.data() + offset, 37, 0.25f);
    CAPTURE(offset);
    CHECK(std::memcmp(&sum, &sum0, sizeof sum) == 0);
    CHECK(std::memcmp(buf.data() + offset, first.data(), 37 * sizeof(float)) == 0);
  }
}

TEST_CASE("rescale_factors: exp(old - new) within 1.1 ulp, 1 for a row still masked, 0 for a row just unmasked") {
  using attnkit::ops::detail::rescale_factors;
  const float inf = std::numeric_limits<float>::infinity();
  // 37 rows: two full 16-lane blocks and a tail (or four 8-lane ones and a tail)
  std::vector<float> old_max(37), new_max(37), alpha(38, 7.0f);
  for (size_t i = 0; i < old_max.size(); ++i) {
    old_max[i] = 0.5f * static_cast<float>(i) - 3.0f;
    new_max[i] = old_max[i] + 0.731f * static_cast<float>(i % 11);  // new >= old, exp down to e^-7.3
  }
  old_max[5] = -inf, new_max[5] = -inf;  // masked so far: O and l stay as they are (zero)
  old_max[20] = -inf;                    // first unmasked key in this tile: the old (zero) state drops out
  rescale_factors(old_max.data(), new_max.data(), alpha.data(), 37);
  for (size_t i = 0; i < old_max.size(); ++i) {
    CAPTURE(i);
    if (i == 5) CHECK(alpha[i] == 1.0f);
    else if (i == 20) CHECK(alpha[i] == 0.0f);
    else CHECK(ulps(alpha[i], old_max[i] - new_max[i]) <= 1.1);  // the float difference, as std::exp(m - mt) took
  }
  CHECK(alpha[37] == 7.0f);  // past n: untouched
}

TEST_CASE("row_max: the max of every length (vector blocks, tails), -inf entries, -inf for nothing") {
  using attnkit::ops::detail::row_max;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(131);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 10.0f - (i % 5 == 0 ? inf : 0.0f);
  for (int64_t n = 1; n <= 131; ++n) {
    CAPTURE(n);
    CHECK(row_max(x.data(), n) == *std::max_element(x.begin(), x.begin() + n));
  }
  for (int64_t at : {0, 15, 16, 63, 64, 100, 130}) {  // the max in each block, lane and tail position
    std::vector<float> y(131, -3.0f);
    y[static_cast<size_t>(at)] = 2.5f;
    CHECK(row_max(y.data(), 131) == 2.5f);
  }
  const std::vector<float> masked(37, -inf);
  CHECK(row_max(masked.data(), 37) == -inf);
  CHECK(row_max(x.data(), 0) == -inf);
}
