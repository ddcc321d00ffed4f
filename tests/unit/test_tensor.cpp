// Tensor, creation (numpy's linspace/arange, checked against numpy's own values), transpose,
// compare, the portable Rng (fixed draws), numpy-identical printing, and diff reports.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "attnkit/io/diff.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/io/json_writer.hpp"
#include "attnkit/io/pretty_print.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/creation.hpp"
#include "attnkit/tensor/error.hpp"
#include "test_util.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/tensor.hpp"

using namespace attnkit;
using attnkit::test::error_of;
using attnkit::test::fixture_text;

namespace {

Tensor fixture_tensor(const std::string& name) {
  io::Value v = io::parse_json(fixture_text(name), name);
  REQUIRE(v.is_tensor());
  return v.tensor();
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

void check_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  REQUIRE_MESSAGE(got.shape() == want.shape(), what << ": shape " << got.shape_str() << " vs " << want.shape_str());
  for (int64_t i = 0; i < got.numel(); ++i)
    CHECK_MESSAGE(bits(got[i]) == bits(want[i]), what << " value " << i << ": " << got[i] << " vs numpy " << want[i]);
}

}  // namespace

TEST_CASE("Tensor: shape, numel, dim, reshape, unravel_index") {
  Tensor t(Shape{2, 3, 4});
  CHECK(t.numel() == 24);
  CHECK(t.rank() == 3);
  CHECK(t.dim(-1) == 4);
  CHECK(t.dim(0) == 2);
  CHECK(t.shape_str() == "[2, 3, 4]");
  CHECK(error_of([&] { t.dim(3); }) == "dimension 3 out of range for a tensor of shape [2, 3, 4]");
  CHECK(error_of([&] { t.dim(-4); }) == "dimension -4 out of range for a tensor of shape [2, 3, 4]");
  CHECK(Tensor().shape() == Shape{0});
  CHECK(Tensor::scalar(2).rank() == 0);
  CHECK(Tensor::scalar(2).shape_str() == "[]");
  CHECK(Tensor::filled({2}, 7).values() == std::vector<float>{7, 7});
  CHECK(t.reshaped({4, -1}).shape() == Shape{4, 6});
  CHECK(t.reshaped({-1}).shape() == Shape{24});
  CHECK(error_of([&] { t.reshaped({5, -1}); }) == "reshape: cannot reshape [2, 3, 4] (24 values) to [5, -1]");
  CHECK(error_of([&] { t.reshaped({5, 5}); }) == "reshape: cannot reshape [2, 3, 4] (24 values) to [5, 5] (25 values)");
  CHECK(error_of([&] { t.reshaped({-1, -1}); }) == "reshape: only one dimension may be -1, got [-1, -1]");
  CHECK(error_of([&] { t.reshaped({-2, 12}); }) == "reshape: shape [-2, 12] has a negative size");
  CHECK(error_of([] { Tensor(Shape{2, 2}, {1, 2, 3}); }) == "tensor of shape [2, 2] needs 4 values, got 3");
  CHECK(error_of([] { shape_numel({-1}); }) == "shape [-1] has a negative size");
  CHECK(error_of([] { shape_numel({int64_t{1} << 40, int64_t{1} << 40}); }) ==
        "shape [1099511627776, 1099511627776] has more elements than fit in 64 bits");
  CHECK(error_of([] { shape_numel(Shape(9, 1)); }) == "shape [1, 1, 1, 1, 1, 1, 1, 1, 1] has 9 dimensions, at most 8 are supported");
  CHECK(unravel_index(23, {2, 3, 4}) == Shape{1, 2, 3});
  CHECK(unravel_index(5, {2, 3, 4}) == Shape{0, 1, 1});
  CHECK(unravel_index(0, {}) == Shape{});
  // value semantics
  Tensor a(Shape{2}, {1, 2});
  Tensor b = a;
  b[0] = 9;
  CHECK(a[0] == 1);
}

TEST_CASE("Tensor::uninitialized: a big freed buffer of its own is reused, others are not kept, a small tensor is zero-filled") {
  CHECK(Tensor::uninitialized({3, 2}).values() == std::vector<float>(6, 0.0f));
  const int64_t n = (int64_t(1) << 18) + 12345;  // 1 MB and sizes no other test frees
  auto filled = [](int64_t size, float v) {  // an uninitialized() tensor, then written
    Tensor t = Tensor::uninitialized({size});
    std::fill(t.values().begin(), t.values().end(), v);
    return t;
  };
  const float* freed = nullptr;
  {
    const Tensor a = filled(n, 7.0f);
    freed = a.data();
  }
  const Tensor b = Tensor::uninitialized({n});
  CHECK(b.numel() == n);
  CHECK(b.data() == freed);  // the freed tensor's buffer, its values still there
  CHECK(b[n - 1] == 7.0f);
  // a buffer a move assignment replaces is kept too, and one a copy assignment replaces
  Tensor c = filled(n + 1, 3.0f);
  const float* replaced = c.data();
  c = Tensor::scalar(1.0f);
  CHECK(Tensor::uninitialized({n + 1}).data() == replaced);
  Tensor c2 = filled(n + 3, 3.0f);
  const float* copied_over = c2.data();
  c2 = Tensor::scalar(2.0f);  // (a move of a temporary)
  const Tensor scalar = Tensor::scalar(5.0f);
  Tensor c3 = filled(n + 4, 3.0f);
  const float* copy_assigned = c3.data();
  c3 = scalar;
  CHECK(c3[0] == 5.0f);
  CHECK(Tensor::uninitialized({n + 4}).data() == copy_assigned);
  CHECK(Tensor::uninitialized({n + 3}).data() == copied_over);
  // one more than twice the size is not taken
  const float* big = nullptr;
  {
    const Tensor d = filled(2 * n + 6, 1.0f);
    big = d.data();
  }
  const Tensor e = Tensor::uninitialized({n + 2});
  CHECK(e.data() != big);
  // a tensor not from uninitialized() (a reader's, a copy, a move of a copy) is freed, not kept: its values never
  // come back, while the uninitialized() one's do
  const int64_t m = (int64_t(1) << 18) + 23456;
  {
    const Tensor f = Tensor::filled({m}, 11.0f);
    const Tensor g = filled(m + 7, 12.0f);
    Tensor copy = g;
    std::fill(copy.values().begin(), copy.values().end(), 13.0f);
    Tensor moved = std::move(copy);
    std::fill(moved.values().begin(), moved.values().end(), 14.0f);
  }
  std::vector<Tensor> taken;  // held, so that each takes another kept buffer (at most 8 are kept)
  int kept_own = 0;
  for (int i = 0; i < 9; ++i) {
    taken.push_back(Tensor::uninitialized({m}));
    const float v = taken.back()[m - 1];
    CHECK(v != 11.0f);
    CHECK(v != 13.0f);
    CHECK(v != 14.0f);
    kept_own += v == 12.0f;
  }
  CHECK(kept_own == 1);
}

TEST_CASE("linspace and arange: the same float32 bits as numpy (tests/fixtures/numpy)") {
  // ranges.tsv: name, then the `tensor` command line that builds it
  std::istringstream lines(fixture_text("numpy/ranges.tsv"));
  std::string line;
  int cases = 0;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    std::string name = line.substr(0, line.find('\t'));
    std::istringstream args(line.substr(line.find('\t') + 1));
    std::string fn, word;
    args >> fn;
    std::vector<double> nums;
    Shape shape;
    bool has_shape = false;
    while (args >> word) {
      if (word == "--shape") {
        args >> word;
        has_shape = true;
        std::istringstream dims(word);
        std::string d;
        while (std::getline(dims, d, ',')) shape.push_back(std::stoll(d));
      } else {
        nums.push_back(std::stod(word));
      }
    }
    Tensor got;
    if (fn == "linspace") {
      got = linspace(nums.at(0), nums.at(1), shape_numel(shape)).reshaped(shape);
    } else {
      REQUIRE(fn == "arange");
      got = nums.size() == 1 ? arange(0, nums[0]) : nums.size() == 2 ? arange(nums[0], nums[1]) : arange(nums[0], nums[1], nums[2]);
      if (has_shape) got = got.reshaped(shape);
    }
    check_same_bits(got, fixture_tensor("numpy/" + name + ".json"), name);
    ++cases;
  }
  CHECK(cases >= 10);
}

TEST_CASE("linspace and arange: edge cases") {
  CHECK(linspace(0, 1, 0).numel() == 0);
  CHECK(linspace(2.5, 7, 1).values() == std::vector<float>{2.5f});
  CHECK(linspace(0, 1, 2).values() == std::vector<float>{0, 1});
  Tensor t = linspace(-0.4, 1.2, 12);
  CHECK(t[0] == -0.4f);
  CHECK(t[11] == 1.2f);  // the end is exact
  CHECK(error_of([] { linspace(0, 1, -1); }) == "linspace: number of values must be non-negative, got -1");
  CHECK(error_of([] { linspace(0, INFINITY, 3); }) == "linspace: ends must be finite, got 0 and inf");
  CHECK(arange(0, 0).numel() == 0);
  CHECK(arange(3, 1).numel() == 0);  // empty, not an error (numpy)
  CHECK(arange(0, 1, 0.25).values() == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  CHECK(arange(0, 0.3, 0.1).numel() == 3);  // ceil(2.9999999999999996)
  CHECK(arange(1, -1, -0.5).values() == std::vector<float>{1, 0.5f, 0, -0.5f});
  CHECK(error_of([] { arange(0, 1, 0); }) == "arange: step must be finite and non-zero, got 0");
  CHECK(error_of([] { arange(0, 1e300, 1e-300); }).find("is too many") != std::string::npos);
}

TEST_CASE("transpose: numpy.transpose, default reverses the axes") {
  Tensor m(Shape{2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor mt = transpose(m);
  CHECK(mt.shape() == Shape{3, 2});
  CHECK(mt.values() == std::vector<float>{1, 4, 2, 5, 3, 6});
  CHECK(transpose(mt).values() == m.values());
  Tensor x = arange(0, 24).reshaped({2, 3, 4});
  Tensor y = transpose(x, {1, 0, 2});  // [3, 2, 4]
  REQUIRE(y.shape() == Shape{3, 2, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) CHECK(y[(j * 2 + i) * 4 + k] == x[(i * 3 + j) * 4 + k]);
  CHECK(transpose(x, {-1, 0, 1}).shape() == Shape{4, 2, 3});
  CHECK(transpose(x).shape() == Shape{4, 3, 2});
  CHECK(transpose(x).values()[1] == 12);  // [0, 0, 1] of the reversed = x[1, 0, 0]
  CHECK(transpose(Tensor::scalar(3)).values() == std::vector<float>{3});
  CHECK(transpose(Tensor(Shape{0, 2})).shape() == Shape{2, 0});
  CHECK(error_of([&] { transpose(x, {0, 1}); }) == "transpose: 2 axes given for a tensor of shape [2, 3, 4]");
  CHECK(error_of([&] { transpose(x, {0, 1, 1}); }) == "transpose: axes [0, 1, 1] are not a permutation of 0..2");
  CHECK(error_of([&] { transpose(x, {0, 1, 3}); }) == "transpose: axes [0, 1, 3] are not a permutation of 0..2");
}

TEST_CASE("compare: |a - b| <= atol + rtol * |b|, the largest errors and where") {
  Tensor a(Shape{2, 2}, {1, 2, 3, 4});
  Tensor b(Shape{2, 2}, {1, 2.1f, 3, 3.5f});
  Comparison c = compare(a, b, {0.0, 0.2});
  CHECK_FALSE(c.close);
  CHECK(c.mismatches == 1);
  CHECK(c.max_abs_error == doctest::Approx(0.5));
  CHECK(c.max_abs_at == Shape{1, 1});
  CHECK(c.max_rel_error == doctest::Approx(0.5 / 3.5));
  CHECK(c.max_rel_at == Shape{1, 1});
  CHECK(c.first_mismatch_at == Shape{1, 1});
  CHECK(compare(a, b, {0.0, 0.5}).close);
  CHECK(compare(a, b, {0.15, 0.0}).close);  // 0.5 <= 0.15 * 3.5
  CHECK_FALSE(compare(a, b, {0.14, 0.0}).close);
  CHECK(compare(a, a, {0.0, 0.0}).close);
  // the rule is not symmetric: rtol scales |b| (numpy.allclose)
  Tensor one(Shape{1}, {1}), two(Shape{1}, {2});
  CHECK(compare(one, two, {0.5, 0}).close);
  CHECK_FALSE(compare(two, one, {0.5, 0}).close);
  // NaN equals NaN; an infinity equals the same infinity only
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(compare(Tensor(Shape{2}, {nan, inf}), Tensor(Shape{2}, {nan, inf}), {0, 0}).close);
  CHECK_FALSE(compare(Tensor(Shape{1}, {nan}), Tensor(Shape{1}, {1}), {1, 1}).close);
  CHECK_FALSE(compare(Tensor(Shape{1}, {inf}), Tensor(Shape{1}, {-inf}), {1, 1}).close);
  CHECK_FALSE(compare(Tensor(Shape{1}, {inf}), Tensor(Shape{1}, {1e30f}), {1, 1}).close);
  // shapes
  Comparison s = compare(a, a.reshaped({4}));
  CHECK_FALSE(s.same_shape);
  CHECK_FALSE(s.close);
  // the relative error skips b == 0
  Comparison z = compare(Tensor(Shape{2}, {1, 2}), Tensor(Shape{2}, {0, 1}), {0, 0});
  CHECK(z.max_abs_error == 1);
  CHECK(z.max_rel_error == 1);
  CHECK(z.max_rel_at == Shape{1});
  CHECK(z.mismatches == 2);
  CHECK(z.first_mismatch_at == Shape{0});
}

TEST_CASE("Rng: fixed draws for seeds 0 and 1 (tests/fixtures/rng.json, from an independent implementation)") {
  auto want = nlohmann::json::parse(fixture_text("rng.json"));
  for (uint64_t seed : {0, 1}) {
    const auto& w = want[std::to_string(seed)];
    Rng u32(seed), uni(seed), nor(seed);
    for (size_t i = 0; i < w["u32"].size(); ++i) {
      CHECK(u32.next_u32() == w["u32"][i].get<uint32_t>());
      CHECK(uni.uniform() == w["uniform"][i].get<float>());
      CHECK(nor.normal() == w["normal"][i].get<float>());
    }
  }
  // The same values written out here too, so a change to the fixture cannot hide a change here.
  Rng r0(0), r1(1);
  CHECK(r0.next_u32() == 1203932051u);
  CHECK(r1.next_u32() == 2607537577u);
  Rng n0(0);
  CHECK(n0.normal() == -0.809237003326416f);
  Rng n1(1);
  CHECK(n1.normal() == 0.47920456528663635f);
}

TEST_CASE("Rng: ranges and moments") {
  Rng rng(42);
  Tensor u = rand_uniform({100000}, rng, -2.0f, 3.0f);
  double sum = 0;
  for (float v : u.values()) {
    CHECK_UNARY(v >= -2.0f);
    CHECK_UNARY(v < 3.0f);
    sum += v;
  }
  CHECK(sum / 1e5 == doctest::Approx(0.5).epsilon(0.02));
  Tensor n = rand_normal({100000}, rng, 1.0f, 2.0f);
  double m = 0, m2 = 0;
  for (float v : n.values()) {
    m += v;
    m2 += static_cast<double>(v) * v;
  }
  m /= 1e5;
  double var = m2 / 1e5 - m * m;
  CHECK(m == doctest::Approx(1.0).epsilon(0.03));
  CHECK(var == doctest::Approx(4.0).epsilon(0.03));
  // same seed, same bits; different seeds differ
  Rng a(7), b(7), c(8);
  Tensor ta = rand_normal({64}, a), tb = rand_normal({64}, b), tc = rand_normal({64}, c);
  CHECK(ta.values() == tb.values());
  CHECK(ta.values() != tc.values());
  Rng d(3);
  for (int i = 0; i < 10000; ++i) {
    double x = d.uniform_double();
    CHECK_UNARY(x >= 0.0);
    CHECK_UNARY(x < 1.0);
  }
}

TEST_CASE("tensor show prints numpy's own text (tests/fixtures/numpy/show)") {
  const char* names[] = {"linspace_3x4", "negatives", "scientific", "scientific_small", "wrap", "wrap_1d", "summarised",
                         "summarised_1d", "rank3", "rank4", "integers", "non_finite", "all_nan", "inf_only", "zeros",
                         "negative_zero", "scalar", "scalar_negative", "precision_cut", "big_mixed", "ratio_1000",
                         "one_column", "summarised_wide"};
  for (const char* name : names) {
    std::string base = std::string("numpy/show/") + name;
    io::Value v = io::parse_json(fixture_text(base + ".json"), base);
    CHECK_MESSAGE(io::pretty_print(v) == fixture_text(base + ".txt"), name);
  }
  CHECK(io::pretty_print(Tensor(Shape{2, 0})) == "tensor([], shape=[2, 0])\n");
  // bundles: one line per member, nested names joined by '/', rows aligned under the prefix
  io::Value b = io::parse_json(R"({"x": [[1, 2], [3, 4]], "enc": {"W": [0.5], "name": "lstm"}})", "b.json");
  CHECK(io::pretty_print(b) ==
        "x: tensor([[1., 2.],\n"
        "           [3., 4.]], shape=[2, 2])\n"
        "enc/W: tensor([0.5], shape=[1])\n"
        "enc/name: (not a tensor: a string (line 1, column 53))\n");
}

TEST_CASE("diff: report per member, largest errors and where") {
  io::Value a = io::parse_json(R"({"out": [[1, 2], [3, 4]], "h": [1], "only_a": [0], "s": [1, 2]})", "a.json");
  io::Value b = io::parse_json(R"({"out": [[1, 2], [3, 4.5]], "h": [1], "only_b": [0], "s": [[1, 2]]})", "b.json");
  io::DiffReport r = io::diff(a, b, {1e-5, 1e-8}, false);
  CHECK_FALSE(r.equal);
  CHECK(r.summary() ==
        "out: 1 of 4 values differ; largest absolute error 0.5 at [1, 1], largest relative error 0.1111111111111111 at [1, 1]; "
        "\"only_a\" is only in A; \"s\" has shape [2] in A and [1, 2] in B; \"only_b\" is only in B");
  CHECK(io::to_json(r.to_value()) ==
        R"({"equal":false,"members":{"out":{"equal":false,"shape":[2,2],"mismatches":1,"max_abs_error":0.5,)"
        R"("max_abs_error_at":[1,1],"max_rel_error":0.11111111,"max_rel_error_at":[1,1],"first_mismatch_at":[1,1]},)"
        R"("h":{"equal":true,"shape":[1],"mismatches":0,"max_abs_error":0,"max_abs_error_at":[0],"max_rel_error":0,)"
        R"("max_rel_error_at":[0]},"only_a":{"equal":false,"problem":"\"only_a\" is only in A"},)"
        R"("s":{"equal":false,"problem":"\"s\" has shape [2] in A and [1, 2] in B"},)"
        R"("only_b":{"equal":false,"problem":"\"only_b\" is only in B"}}})");
  io::DiffReport same = io::diff(a, a, {0, 0}, false);
  CHECK(same.equal);
  CHECK(same.summary() == "equal");
  // bare tensors: the fields themselves
  io::DiffReport bare = io::diff(Tensor(Shape{2}, {1, 2}), Tensor(Shape{2}, {1, 2}), {}, false);
  CHECK(io::to_json(bare.to_value()) ==
        R"({"equal":true,"shape":[2],"mismatches":0,"max_abs_error":0,"max_abs_error_at":[0],"max_rel_error":0,"max_rel_error_at":[0]})");
  // NaN is refused unless allowed; then NaN equals NaN
  io::Value n = io::parse_json(R"([1, "NaN"])", "n.json");
  CHECK(error_of([&] { io::diff(n, n, {}, false); }) == "tensor in A has NaN at [1] (pass --allow-nan to compare NaNs as equal)");
  CHECK(io::diff(n, n, {}, true).equal);
}

TEST_CASE("test_util error_of: the message, or \"\" when nothing is thrown, for every test file") {
  CHECK(error_of([] { fail("bad {}", 1); }) == "bad 1");
  CHECK(error_of([] {}).empty());
  CHECK(error_of([] {}) == "");
}
