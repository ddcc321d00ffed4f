// The non-recurrent, non-attention kernels and their layers: embedding, layer norm, dropout,
// relu / gelu, softmax / log-softmax backward, fused cross-entropy.
//   1. every backward kernel against central differences of its double reference (gradcheck.hpp),
//      with a wrong gradient shown to be caught;
//   2. forwards and gradients against PyTorch (tests/fixtures/gen_layers.py -> fixtures/layers/);
//   3. the autograd wrappers (autograd/layers.hpp) through autograd::backward;
//   4. the nn layers: init, state_dict names, loading, forward/backward, NoGrad inference.
// Legend: R rows, C classes, V vocabulary, E feature size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "attnkit/autograd/functional.hpp"
#include "attnkit/autograd/layers.hpp"
#include "attnkit/io/json_reader.hpp"
#include "attnkit/nn/dropout.hpp"
#include "attnkit/nn/embedding.hpp"
#include "attnkit/nn/layer_norm.hpp"
#include "attnkit/nn/linear.hpp"
#include "attnkit/ops/activation.hpp"
#include "attnkit/ops/cross_entropy.hpp"
#include "attnkit/ops/dropout.hpp"
#include "attnkit/ops/embedding.hpp"
#include "attnkit/ops/feed_forward.hpp"
#include "attnkit/ops/layer_norm.hpp"
#include "attnkit/ops/row_loop.hpp"
#include "attnkit/ops/softmax.hpp"
#include "attnkit/tensor/compare.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"
#include "gradcheck.hpp"
#include "test_util.hpp"

using namespace attnkit;
using autograd::Var;

namespace {

// ---- fixtures -------------------------------------------------------------------------------

const io::Value& fixture_file(const std::string& name) {
  static std::map<std::string, io::Value> files;
  auto it = files.find(name);
  if (it == files.end()) {
    const std::string path = std::string(ATTNKIT_FIXTURES) + "/layers/" + name + ".json";
    it = files.emplace(name, io::parse_json(io::read_text(path), path)).first;
  }
  return it->second;
}
const io::Value& fixture(const std::string& file, const std::string& name) {
  const io::Value* c = fixture_file(file).find(name);
  REQUIRE_MESSAGE(c != nullptr, "fixture case " << file << "#" << name);
  return *c;
}
bool has(const io::Value& c, const char* name) { return c.find(name) != nullptr; }
Tensor member(const io::Value& c, const char* name) {
  const io::Value* v = c.find(name);
  REQUIRE_MESSAGE((v && v->is_tensor()), "fixture member " << name);
  return v->tensor();
}
float number(const io::Value& c, const char* name) { return member(c, name)[0]; }
// A string member, e.g. "reduction": "mean".
std::string text(const io::Value& c, const char* name) {
  const io::Value* v = c.find(name);
  REQUIRE_MESSAGE((v && v->is_string()), "fixture member " << name);
  return v->str();
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what, double rtol = 1e-4,
                 double atol = 1e-5) {
  const Comparison cmp = compare(got, want, Tolerance{rtol, atol});
  CHECK_MESSAGE(cmp.close, what << ": got " << got.shape_str() << " want " << want.shape_str() << ", max abs error "
                                << cmp.max_abs_error << " at " << shape_str(cmp.max_abs_at) << ", mismatches "
                                << cmp.mismatches);
}

bool all_finite(const Tensor& t) {
  return std::all_of(t.values().begin(), t.values().end(), [](float v) { return std::isfinite(v); });
}

double dot(const Tensor& dy, const std::vector<double>& y) {
  REQUIRE(static_cast<size_t>(dy.numel()) == y.size());
  double acc = 0;
  for (int64_t i = 0; i < dy.numel(); ++i) acc += double(dy[i]) * y[static_cast<size_t>(i)];
  return acc;
}

Tensor of_doubles(const Shape& shape, const std::vector<double>& v) {
  Tensor t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = static_cast<float>(v[static_cast<size_t>(i)]);
  return t;
}

std::vector<int64_t> ids_of(const Tensor& t) { return ops::indices_from(t, "test", "ids"); }

// A copy of `g` with one element changed: the check must catch it.
Tensor broken(const Tensor& g, int64_t i = 1) {
  Tensor w = g;
  w[i] = -w[i] + 0.25f;
  return w;
}

ops::Reduction reduction_of(const std::string& s) {
  if (s == "sum") return ops::Reduction::Sum;
  if (s == "none") return ops::Reduction::None;
  REQUIRE(s == "mean");
  return ops::Reduction::Mean;
}

const char* reduction_name(ops::Reduction r) {
  return r == ops::Reduction::Mean ? "mean" : r == ops::Reduction::Sum ? "sum" : "none";
}

}  // namespace

// =============================================================================================
// 1. finite differences
// =============================================================================================

TEST_CASE("cross_entropy: backward against finite differences (reductions, label smoothing, ignore_index)") {
  Rng rng(101);
  // C = 11: one 8-wide block of the vectorised exp and a tail of 3 (C < 8: the tail alone)
  for (const Shape& shape : {Shape{5, 6}, Shape{2, 3, 4}, Shape{3, 11}})
    for (ops::Reduction red : {ops::Reduction::Mean, ops::Reduction::Sum, ops::Reduction::None})
      for (float ls : {0.0f, 0.15f})
        for (int64_t ignore : {int64_t{-100}, int64_t{1}}) {
          CAPTURE(shape_str(shape));
          CAPTURE(reduction_name(red));
          CAPTURE(ls);
          CAPTURE(ignore);
          Tensor logits = rand_normal(shape, rng, 0.0f, 2.0f);
          const int64_t C = shape.back(), R = logits.numel() / C;
          std::vector<int64_t> targets;
          for (int64_t r = 0; r < R; ++r) targets.push_back(r % 3 == 1 ? ignore : (r * 7 + 2) % C);
          // with ignore_index 1, rows whose class is 1 are ignored too
          const ops::CrossEntropyOptions o{ignore, ls, red};
          ops::CrossEntropySaved saved;
          const Tensor loss = ops::cross_entropy_forward(logits, targets, o, &saved);
          const Tensor dloss = red == ops::Reduction::None ? rand_normal(loss.shape(), rng)
                                                           : Tensor::scalar(rng.uniform(0.5f, 2.0f));
          auto reference = [&] { return dot(dloss, ops::cross_entropy_reference(logits, targets, o)); };
          CHECK(test::dot(dloss, loss) == doctest::Approx(reference()).epsilon(1e-5));
          Tensor dlogits(shape);
          ops::cross_entropy_backward(dloss, logits, targets, o, saved, dlogits);
          CHECK(test::gradient_mismatch({&logits}, {"logits"}, reference, {&dlogits}) == "");
          // ignored rows get exactly zero gradient
          for (int64_t r = 0; r < R; ++r)
            if (targets[static_cast<size_t>(r)] == ignore)
              for (int64_t j = 0; j < C; ++j) CHECK(dlogits[r * C + j] == 0.0f);
          Tensor wrong = broken(dlogits, C + 1);
          CHECK(test::gradient_mismatch({&logits}, {"logits"}, reference, {&wrong}) != "");
        }
}

TEST_CASE("cross_entropy: every row ignored gives 0 and zero gradients (PyTorch: NaN for mean); errors") {
  Rng rng(5);
  Tensor logits = rand_normal({3, 4}, rng);
  const std::vector<int64_t> targets{-100, -100, -100};
  for (ops::Reduction red : {ops::Reduction::Mean, ops::Reduction::Sum}) {
    ops::CrossEntropySaved saved;
    const ops::CrossEntropyOptions o{-100, 0.1f, red};
    Tensor loss = ops::cross_entropy_forward(logits, targets, o, &saved);
    CHECK(loss.shape() == Shape{});
    CHECK(loss[0] == 0.0f);
    Tensor dlogits({3, 4});
    ops::cross_entropy_backward(Tensor::scalar(1.0f), logits, targets, o, saved, dlogits);
    for (float g : dlogits.values()) CHECK(g == 0.0f);
  }
  CHECK(test::error_of([&] { ops::cross_entropy_forward(logits, std::vector<int64_t>{0, 4, 1}); }) ==
        "cross_entropy: targets[1] = 4 is out of range for 4 classes (logits [3, 4]; ignore_index -100)");
  CHECK(test::error_of([&] { ops::cross_entropy_forward(logits, std::vector<int64_t>{0, 1}); }) ==
        "cross_entropy: 2 targets for logits [3, 4], expected 3 (one per row of 4 classes)");
  CHECK(test::error_of([&] { ops::cross_entropy_forward(logits, Tensor({3}, {0, 1.5f, 2})); }) ==
        "cross_entropy: targets[1] = 1.5 is not a whole number");
  CHECK(test::error_of([&] { ops::cross_entropy_forward(logits, Tensor({3, 1})); }) ==
        "cross_entropy: targets have shape [3, 1], expected [3] (logits [3, 4] without the class axis)");
  CHECK(test::error_of([&] {
          ops::cross_entropy_forward(logits, std::vector<int64_t>{0, 1, 2}, {-100, 1.0f, ops::Reduction::Mean});
        }) == "cross_entropy: label_smoothing is 1, expected a number in [0, 1)");
  // masked logits (-inf, not the target) get exactly 0 gradient, as in PyTorch
  {
    const float inf = std::numeric_limits<float>::infinity();
    Tensor masked({1, 20});
    for (int j = 0; j < 20; ++j) masked[j] = j % 2 ? -inf : 0.1f * j;
    ops::CrossEntropySaved s;
    const Tensor loss = ops::cross_entropy_forward(masked, std::vector<int64_t>{4}, {}, &s);
    CHECK(std::isfinite(loss[0]));
    Tensor d({1, 20});
    ops::cross_entropy_backward(Tensor::scalar(1.0f), masked, {4}, {}, s, d);
    for (int j = 1; j < 20; j += 2) CHECK(d[j] == 0.0f);
  }
  // large logits stay finite (the row max is subtracted)
  Tensor big({2, 3}, {1e4f, -1e4f, 0.0f, 3e4f, 3e4f, 3e4f});
  Tensor l = ops::cross_entropy_forward(big, std::vector<int64_t>{1, 2}, {-100, 0.0f, ops::Reduction::None});
  CHECK(l[0] == doctest::Approx(2e4f));
  CHECK(l[1] == doctest::Approx(std::log(3.0f)).epsilon(2e-3));  // lse = 3e4 + log 3 in float32: ulp 0.002
}

TEST_CASE("cross_entropy: many rows over the thread team agree with one thread") {
  Rng rng(77);
  Tensor logits = rand_normal({300, 1000}, rng, 0.0f, 3.0f);  // 300K elements: above the team threshold
  std::vector<int64_t> targets;
  for (int64_t r = 0; r < 300; ++r) targets.push_back(r % 11 == 0 ? -100 : (r * 13) % 1000);
  const ops::CrossEntropyOptions o{-100, 0.05f, ops::Reduction::Mean};
  Tensor loss[2], grad[2];
  set_num_threads(2);
  REQUIRE(ops::detail::row_team(300, 1000) == 2);  // the test covers the team
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    ops::CrossEntropySaved saved;
    loss[threads - 1] = ops::cross_entropy_forward(logits, targets, o, &saved);
    grad[threads - 1] = Tensor(logits.shape());
    ops::cross_entropy_backward(Tensor::scalar(1.0f), logits, targets, o, saved, grad[threads - 1]);
  }
  set_num_threads(1);
  // Rows are independent, but not bit-identical across runs: where a row's Eigen packets start
  // depends on the buffer's alignment, and the scalar head/tail use std::exp (1 ulp apart).
  CHECK(loss[0][0] == doctest::Approx(loss[1][0]).epsilon(1e-6));
  check_close(grad[1], grad[0], "cross_entropy dlogits, 2 threads vs 1", 1e-5, 1e-9);
  CHECK(loss[0][0] ==
        doctest::Approx(ops::cross_entropy_reference(logits, targets, o)[0]).epsilon(1e-5));
}

TEST_CASE("layer_norm: backward against finite differences (affine or not, offset input)") {
  Rng rng(202);
  for (bool affine : {true, false})
    for (float offset : {0.0f, 30.0f}) {
      CAPTURE(affine);
      CAPTURE(offset);
      Tensor x = rand_normal({3, 2, 7}, rng, offset, 1.5f);
      Tensor w = affine ? rand_normal({7}, rng) : Tensor(), b = affine ? rand_normal({7}, rng) : Tensor();
      Tensor dy = rand_normal(x.shape(), rng);
      auto reference = [&] { return dot(dy, ops::layer_norm_reference(x, w, b)); };
      ops::LayerNormStats stats;
      Tensor y = ops::layer_norm_forward(x, w, b, ops::kLayerNormEps, &stats);
      check_close(y, of_doubles(x.shape(), ops::layer_norm_reference(x, w, b)), "layer_norm forward", 1e-4, 2e-5);
      CHECK(stats.mean.shape() == Shape{3, 2});
      Tensor dx(x.shape()), dw({7}), db({7});
      ops::layer_norm_backward(dy, x, w, stats, &dx, affine ? &dw : nullptr, affine ? &db : nullptr);
      // offset inputs: the nudge is a smaller fraction of x; float32 x limits the precision
      test::GradTolerance tol;
      if (offset != 0.0f) tol.eps = 4e-3, tol.atol = 5e-3;
      if (affine)
        CHECK(test::gradient_mismatch({&x, &w, &b}, {"x", "weight", "bias"}, reference, {&dx, &dw, &db}, tol) == "");
      else
        CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&dx}, tol) == "");
      Tensor wrong = broken(dx, 5);
      CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&wrong}, tol) != "");
      if (affine) {
        Tensor wrong_w = broken(dw, 2);
        CHECK(test::gradient_mismatch({&w}, {"weight"}, reference, {&wrong_w}, tol) != "");
      }
      // backward adds into what it is given
      Tensor dx2 = dx;
      ops::layer_norm_backward(dy, x, w, stats, &dx2, nullptr, nullptr);
      for (int64_t i = 0; i < dx.numel(); ++i) CHECK(dx2[i] == doctest::Approx(2 * dx[i]));
    }
}

TEST_CASE("layer_norm: a constant row (variance 0) stays finite; the thread team agrees; errors") {
  Tensor x({2, 4}, {0.5f, 0.5f, 0.5f, 0.5f, 1, 2, 3, 4});
  ops::LayerNormStats stats;
  Tensor y = ops::layer_norm_forward(x, Tensor(), Tensor(), 1e-5f, &stats);
  CHECK(all_finite(y));
  CHECK(y[0] == 0.0f);
  CHECK(stats.rstd[0] == doctest::Approx(1.0f / std::sqrt(1e-5f)));
  Rng rng(9);
  Tensor big = rand_normal({520, 512}, rng), w = rand_normal({512}, rng), b = rand_normal({512}, rng);  // 266K: a team
  Tensor dy = rand_normal(big.shape(), rng);
  Tensor out[2], dx[2], dw[2], db[2];
  set_num_threads(2);
  REQUIRE(ops::detail::row_team(520, 512) == 2);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    ops::LayerNormStats s;
    const int k = threads - 1;
    out[k] = ops::layer_norm_forward(big, w, b, 1e-5f, &s);
    dx[k] = Tensor(big.shape()), dw[k] = Tensor({512}), db[k] = Tensor({512});
    ops::layer_norm_backward(dy, big, w, s, &dx[k], &dw[k], &db[k]);
  }
  set_num_threads(1);
  check_close(out[1], out[0], "layer_norm y, 2 threads vs 1", 1e-6, 1e-6);
  check_close(dx[1], dx[0], "layer_norm dx, 2 threads vs 1", 1e-6, 1e-6);
  // dweight and dbias: sums over 520 rows of O(1) terms (|sum| up to ~60), added in another order
  check_close(dw[1], dw[0], "layer_norm dweight, 2 threads vs 1", 1e-5, 2e-4);
  check_close(db[1], db[0], "layer_norm dbias, 2 threads vs 1", 1e-5, 2e-4);
  CHECK(test::error_of([&] { ops::layer_norm_forward(Tensor({2, 5}), Tensor({4}), Tensor(), 1e-5f, nullptr, "norm1"); }) ==
        "norm1: weight has shape [4], expected [5] (input [2, 5])");
  CHECK(test::error_of([&] { ops::layer_norm_forward(Tensor::scalar(1.0f), Tensor(), Tensor()); }) ==
        "layer_norm: input has shape [], expected [..., E] (at least one axis)");
}

TEST_CASE("layer_norm forward: a row's bits do not depend on its place in the batch") {
  // The forward sums 4 rows in lockstep and the last M mod 4 one at a time: every row of a batch of 7 must equal
  // that row normalised alone, for sizes with and without a tail of 8.
  Rng rng(71);
  for (int64_t E : {5, 8, 37, 512}) {
    CAPTURE(E);
    const Tensor x = rand_normal({7, E}, rng, 100.0f, 0.25f), w = rand_normal({E}, rng), b = rand_normal({E}, rng);
    ops::LayerNormStats all;
    const Tensor y = ops::layer_norm_forward(x, w, b, 1e-5f, &all);
    for (int64_t r = 0; r < 7; ++r) {
      CAPTURE(r);
      const Tensor row({1, E}, std::vector<float>(x.data() + r * E, x.data() + (r + 1) * E));
      ops::LayerNormStats one;
      const Tensor yr = ops::layer_norm_forward(row, w, b, 1e-5f, &one);
      CHECK(std::equal(yr.data(), yr.data() + E, y.data() + r * E));
      CHECK(one.mean[0] == all.mean[r]);
      CHECK(one.rstd[0] == all.rstd[r]);
    }
  }
}

TEST_CASE("softmax and log_softmax: backward against finite differences; masked rows give zero gradients") {
  Rng rng(303);
  Tensor x = rand_normal({3, 2, 6}, rng, 0.0f, 2.0f), dy = rand_normal({3, 2, 6}, rng);
  {
    auto reference = [&] { return dot(dy, ops::softmax_reference(x)); };
    Tensor y = ops::softmax_forward(x), dx(x.shape());
    ops::softmax_backward(dy, y, dx);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&dx}) == "");
    Tensor wrong = broken(dx, 4);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&wrong}) != "");
  }
  {
    auto reference = [&] { return dot(dy, ops::log_softmax_reference(x)); };
    Tensor y = ops::log_softmax_forward(x), dx(x.shape());
    ops::log_softmax_backward(dy, y, dx);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&dx}) == "");
    Tensor wrong = broken(dx, 7);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&wrong}) != "");
  }
  // a fully masked row: zero gradient, no NaN; a partly masked row: finite
  const float inf = std::numeric_limits<float>::infinity();
  Tensor m({2, 3}, {-inf, -inf, -inf, 0.5f, -inf, 1.0f});
  Tensor g({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor ds({2, 3}), dl({2, 3});
  ops::softmax_backward(g, ops::softmax_forward(m), ds);
  ops::log_softmax_backward(g, ops::log_softmax_forward(m), dl);
  CHECK(all_finite(ds));
  CHECK(all_finite(dl));
  for (int j = 0; j < 3; ++j) {
    CHECK(ds[j] == 0.0f);
    CHECK(dl[j] == 0.0f);
  }
  CHECK(ds[4] == 0.0f);  // a masked entry of softmax: y = 0
  CHECK(dl[4] == 5.0f);  // of log-softmax: dy_j - 0 * sum (PyTorch gives the same)
  // masked entries are exactly 0 in softmax's forward (Eigen's packet exp(-inf) is 2.9e-39, not 0)
  Tensor wide({1, 20});
  for (int j = 0; j < 20; ++j) wide[j] = j % 2 ? -inf : 0.1f * j;
  const Tensor sw = ops::softmax_forward(wide);
  for (int j = 1; j < 20; j += 2) CHECK(sw[j] == 0.0f);
  CHECK(test::error_of([&] { ops::softmax_backward(Tensor({2, 3}), Tensor({2, 4}), ds); }) ==
        "softmax: output gradient has shape [2, 3], expected [2, 4] like the output");
}

TEST_CASE("embedding: backward against finite differences; padding_idx; out-of-range ids") {
  Rng rng(404);
  Tensor W = rand_normal({6, 3}, rng);
  const Shape ids_shape{2, 4};
  const std::vector<int64_t> ids{1, 0, 5, 1, 3, 3, 2, 1};  // repeats add up
  Tensor dy = rand_normal({2, 4, 3}, rng);
  auto reference = [&] { return dot(dy, ops::embedding_reference(ids, W)); };
  Tensor y = ops::embedding_forward(ids, ids_shape, W);
  CHECK(y.shape() == Shape{2, 4, 3});
  CHECK(test::dot(dy, y) == doctest::Approx(reference()).epsilon(1e-6));
  Tensor dW({6, 3});
  ops::embedding_backward(dy, ids, ids_shape, dW);
  CHECK(test::gradient_mismatch({&W}, {"weight"}, reference, {&dW}) == "");
  Tensor wrong = broken(dW, 4);
  CHECK(test::gradient_mismatch({&W}, {"weight"}, reference, {&wrong}) != "");
  // padding_idx 1 (and -5, the same row): that row gets no gradient, every other row the same as before
  for (int64_t p : {int64_t{1}, int64_t{-5}}) {
    Tensor dWp({6, 3});
    ops::embedding_backward(dy, ids, ids_shape, dWp, {p});
    for (int64_t i = 0; i < dW.numel(); ++i) CHECK(dWp[i] == (i / 3 == 1 ? 0.0f : dW[i]));
    CHECK(ops::embedding_forward(ids, ids_shape, W, {p}).values() == y.values());  // looked up as usual
  }
  CHECK(test::error_of([&] { ops::embedding_forward(Tensor({2, 2}, {0, 1, 6, 2}), W); }) ==
        "embedding: ids[1, 0] = 6 is out of range for weight [6, 3] (ids must be in [0, 6))");
  CHECK(test::error_of([&] { ops::embedding_forward(Tensor({3}, {0, -1, 2}), W, {}, "decoder.embed"); }) ==
        "decoder.embed: ids[1] = -1 is out of range for weight [6, 3] (ids must be in [0, 6))");
  CHECK(test::error_of([&] { ops::embedding_forward(Tensor({2}, {0, 0.5f}), W); }) ==
        "embedding: ids[1] = 0.5 is not a whole number");
  CHECK(test::error_of([&] { ops::embedding_forward(Tensor({1}, {NAN}), W); }) ==
        "embedding: ids[0] = nan is not a whole number");
  CHECK(test::error_of([&] { ops::embedding_backward(dy, ids, ids_shape, dW, {6}); }) ==
        "embedding: padding_idx 6 is out of range for weight [6, 3] (expected [-6, 6))");
  // a scalar id gives one row [E]
  CHECK(ops::embedding_forward(Tensor::scalar(2.0f), W).shape() == Shape{3});
}

TEST_CASE("relu, gelu (exact and tanh) and tanh: backward against finite differences") {
  Rng rng(505);
  Tensor x = rand_normal({4, 9}, rng, 0.0f, 2.0f);
  for (float& v : x.values())
    if (std::fabs(v) < 0.02f) v = 0.5f;  // keep relu's kink out of the nudge
  Tensor dy = rand_normal(x.shape(), rng);
  {
    auto reference = [&] { return dot(dy, ops::relu_reference(x)); };
    Tensor y = ops::relu_forward(x), dx(x.shape());
    CHECK(y.values() == of_doubles(x.shape(), ops::relu_reference(x)).values());
    ops::relu_backward(dy, y, dx);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&dx}) == "");
    Tensor wrong = broken(dx, 3);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&wrong}) != "");
  }
  for (auto a : {ops::GeluApproximate::None, ops::GeluApproximate::Tanh}) {
    CAPTURE(int(a));
    auto reference = [&] { return dot(dy, ops::gelu_reference(x, a)); };
    Tensor y = ops::gelu_forward(x, a), dx(x.shape());
    check_close(y, of_doubles(x.shape(), ops::gelu_reference(x, a)), "gelu forward", 1e-5, 1e-6);
    ops::gelu_backward(dy, x, dx, a);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&dx}) == "");
    Tensor wrong = broken(dx, 6);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&wrong}) != "");
  }
  {  // tanh (the seq2seq combine layer's activation)
    auto reference = [&] { return dot(dy, ops::tanh_reference(x)); };
    Tensor y = ops::tanh_forward(x), dx(x.shape());
    check_close(y, of_doubles(x.shape(), ops::tanh_reference(x)), "tanh forward", 1e-6, 1e-6);
    ops::tanh_backward(dy, y, dx);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&dx}) == "");
    Tensor wrong = broken(dx, 5);
    CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&wrong}) != "");
  }
  // the tanh form's block loop: more than one block, and a tail
  Tensor long_x = rand_normal({3, 300}, rng), long_dy = rand_normal({3, 300}, rng), long_dx({3, 300});
  ops::gelu_backward(long_dy, long_x, long_dx, ops::GeluApproximate::Tanh);
  for (int64_t i : {int64_t{0}, int64_t{255}, int64_t{256}, int64_t{899}}) {
    const double v = long_x[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v), th = std::tanh(u);
    const double d = 0.5 * (1 + th) + 0.5 * v * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
    CHECK(long_dx[i] == doctest::Approx(long_dy[i] * d).epsilon(1e-5));
  }
  // relu at 0: gradient 0, as PyTorch
  Tensor z({3}, {0.0f, -1.0f, 2.0f}), dz({3});
  ops::relu_backward(Tensor::filled({3}, 1.0f), ops::relu_forward(z), dz);
  CHECK(dz.values() == std::vector<float>{0, 0, 1});
}

TEST_CASE("dropout: inverted, deterministic under an explicit Rng, mask saved; p = 0 and eval are the identity") {
  Rng rng(606);
  Tensor x = rand_normal({40, 50}, rng), dy = rand_normal({40, 50}, rng);
  const ops::DropoutOptions o{0.3f, true};
  Rng r1(42), r2(42), r3(43);
  Tensor m1, m2, m3;
  Tensor y1 = ops::dropout_forward(x, o, r1, &m1), y2 = ops::dropout_forward(x, o, r2, &m2);
  ops::dropout_forward(x, o, r3, &m3);
  CHECK(y1.values() == y2.values());  // same seed, same bits
  CHECK(m1.values() == m2.values());
  CHECK(m1.values() != m3.values());
  // mask: one draw per element in row-major order, dropped when u < p
  Rng replay(42);
  int64_t dropped = 0;
  for (int64_t i = 0; i < m1.numel(); ++i) {
    const bool drop = replay.uniform() < 0.3f;
    dropped += drop;
    REQUIRE(m1[i] == (drop ? 0.0f : 1.0f / 0.7f));
    REQUIRE(y1[i] == x[i] * m1[i]);
  }
  // 2000 draws at p = 0.3: 600 expected, sd 20.5; 5 sd either side
  CHECK(dropped > 497);
  CHECK(dropped < 703);
  // backward against finite differences with the mask fixed
  auto reference = [&] { return dot(dy, ops::dropout_reference(x, m1)); };
  Tensor dx(x.shape());
  ops::dropout_backward(dy, m1, dx);
  CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&dx}) == "");
  Tensor wrong = broken(dx, [&] {
    for (int64_t i = 0; i < m1.numel(); ++i)
      if (m1[i] == 0.0f) return i;
    return int64_t{0};
  }());
  CHECK(test::gradient_mismatch({&x}, {"x"}, reference, {&wrong}) != "");
  // identity: p = 0 in training, or evaluation; nothing drawn, mask empty, backward passes dy through
  for (ops::DropoutOptions id : {ops::DropoutOptions{0.0f, true}, ops::DropoutOptions{0.5f, false}}) {
    Rng r(7), fresh(7);
    Tensor m = Tensor::filled({1}, 3.0f);
    CHECK(ops::dropout_forward(x, id, r, &m).values() == x.values());
    CHECK(m.empty());
    CHECK(r.next_u32() == fresh.next_u32());
    Tensor d(x.shape());
    ops::dropout_backward(dy, m, d);
    CHECK(d.values() == dy.values());
  }
  CHECK(test::error_of([&] { ops::dropout_forward(x, {1.0f, true}, rng); }) ==
        "dropout: p is 1, expected a probability in [0, 1)");
  CHECK(test::error_of([&] { ops::dropout_forward(x, {-0.1f, true}, rng); }) ==
        "dropout: p is -0.1, expected a probability in [0, 1)");
}

// =============================================================================================
// 2. PyTorch golden values
// =============================================================================================

TEST_CASE("golden: embedding (plain, padding_idx, negative padding_idx, 3-D ids) against PyTorch") {
  for (std::string name : {"plain", "padding", "padding_negative", "ids_3d"}) {
    CAPTURE(name);
    const io::Value& c = fixture("embedding", name);
    const Tensor W = member(c, "weight"), ids = member(c, "ids");
    ops::EmbeddingOptions o;
    if (has(c, "padding_idx")) o.padding_idx = static_cast<int64_t>(number(c, "padding_idx"));
    Tensor y = ops::embedding_forward(ids, W, o);
    CHECK(y.values() == member(c, "y").values());  // a look-up: exact
    CHECK(y.shape() == member(c, "y").shape());
    Tensor dW(W.shape());
    ops::embedding_backward(member(c, "dy"), ids_of(ids), ids.shape(), dW, o);
    check_close(dW, member(c, "grad_weight"), std::string("embedding grad_weight ") + name, 1e-6, 1e-6);
  }
}

TEST_CASE("golden: layer_norm against PyTorch") {
  for (std::string name : {"affine", "no_affine", "offset", "constant_row_eps", "wide"}) {
    CAPTURE(name);
    const io::Value& c = fixture("layer_norm", name);
    const Tensor x = member(c, "x"), dy = member(c, "dy");
    const bool affine = has(c, "weight");
    const Tensor w = affine ? member(c, "weight") : Tensor(), b = affine ? member(c, "bias") : Tensor();
    ops::LayerNormStats stats;
    Tensor y = ops::layer_norm_forward(x, w, b, number(c, "eps"), &stats);
    // offset: x = 100 + 0.01 z; float32 holds z to ~4e-4 of its spread, and PyTorch's float32 result
    // is itself off its float64 one by 1.7e-3 (y) and 0.31 (grad_x, up to 562 in size) there.
    const bool offset = name == "offset";
    check_close(y, member(c, "y"), "layer_norm y " + name, offset ? 0 : 1e-4, offset ? 2e-3 : 2e-5);
    if (offset)  // ours against the double reference: no worse than PyTorch's float32
      check_close(y, of_doubles(x.shape(), ops::layer_norm_reference(x, w, b, number(c, "eps"))),
                  "layer_norm y (offset) vs the double reference", 0, 1.7e-3);
    Tensor dx(x.shape()), dw(w.shape()), db(b.shape());
    ops::layer_norm_backward(dy, x, w, stats, &dx, affine ? &dw : nullptr, affine ? &db : nullptr);
    check_close(dx, member(c, "grad_x"), "layer_norm grad_x " + name, offset ? 0 : 1e-4, offset ? 0.5 : 5e-6);
    if (affine) {
      check_close(dw, member(c, "grad_weight"), "layer_norm grad_weight " + name, 1e-4, offset ? 2e-3 : 2e-6);
      check_close(db, member(c, "grad_bias"), "layer_norm grad_bias " + name, 1e-6, 1e-6);
    }
  }
}

TEST_CASE("golden: relu, gelu (exact erf and tanh) against PyTorch") {
  for (std::string name : {"relu", "gelu_none", "gelu_tanh"}) {
    CAPTURE(name);
    const io::Value& c = fixture("activation", name);
    const Tensor x = member(c, "x"), dy = member(c, "dy");
    Tensor y, dx(x.shape());
    if (std::string(name) == "relu") {
      y = ops::relu_forward(x);
      ops::relu_backward(dy, y, dx);
    } else {
      const auto a = std::string(name) == "gelu_tanh" ? ops::GeluApproximate::Tanh : ops::GeluApproximate::None;
      y = ops::gelu_forward(x, a);
      ops::gelu_backward(dy, x, dx, a);
    }
    check_close(y, member(c, "y"), std::string(name) + " y", 1e-5, 1e-6);
    check_close(dx, member(c, "grad_x"), std::string(name) + " grad_x", 1e-5, 3e-6);
  }
}

TEST_CASE("golden: softmax and log_softmax backward against PyTorch (masked rows by attnkit's rule)") {
  for (std::string name : {"softmax_masked", "log_softmax_masked", "softmax_3d", "log_softmax_3d"}) {
    CAPTURE(name);
    const io::Value& c = fixture("softmax", name);
    const Tensor x = member(c, "x"), dy = member(c, "dy");
    const bool log = std::string(name).rfind("log_", 0) == 0;
    Tensor y = log ? ops::log_softmax_forward(x) : ops::softmax_forward(x), dx(x.shape());
    if (log) ops::log_softmax_backward(dy, y, dx);
    else ops::softmax_backward(dy, y, dx);
    check_close(y, member(c, "y"), std::string(name) + " y", 1e-5, 1e-6);
    check_close(dx, member(c, "grad_x"), std::string(name) + " grad_x", 1e-5, 1e-6);
    CHECK(all_finite(dx));
  }
}

TEST_CASE("golden: cross_entropy against PyTorch (reductions, ignore_index, label smoothing, [N, T, C])") {
  for (std::string name : {"mean", "sum", "none", "ignore_default", "ignore_custom", "smoothing", "smoothing_ignore",
                           "smoothing_ignore_sum", "smoothing_ignore_none", "nt_mean", "all_ignored"}) {
    CAPTURE(name);
    const io::Value& c = fixture("cross_entropy", name);
    const Tensor logits = member(c, "logits"), targets = member(c, "targets");
    const ops::CrossEntropyOptions o{static_cast<int64_t>(number(c, "ignore_index")), number(c, "label_smoothing"),
                                     reduction_of(text(c, "reduction"))};
    ops::CrossEntropySaved saved;
    Tensor loss = ops::cross_entropy_forward(logits, targets, o, &saved);
    check_close(loss, member(c, "loss"), std::string("cross_entropy loss ") + name, 1e-5, 1e-6);
    Tensor dlogits(logits.shape());
    ops::cross_entropy_backward(member(c, "dloss"), logits, ids_of(targets), o, saved, dlogits);
    check_close(dlogits, member(c, "grad_logits"), std::string("cross_entropy grad ") + name, 1e-5, 1e-6);
  }
}

TEST_CASE("golden: dropout semantics against PyTorch (mask 0 or 1/(1-p), y = x * mask, dx = dy * mask, eval)") {
  for (std::string name : {"train_p03", "train_p0", "eval_p05"}) {
    CAPTURE(name);
    const io::Value& c = fixture("dropout", name);
    const Tensor x = member(c, "x"), y = member(c, "y"), dy = member(c, "dy");
    const float p = number(c, "p");
    const bool training = number(c, "training") != 0.0f;
    // torch's mask, recovered from its output (x has no zeros)
    Tensor mask(x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) mask[i] = y[i] / x[i];
    const bool identity = !training || p == 0.0f;
    for (float m : mask.values())
      REQUIRE(m == doctest::Approx(identity ? 1.0f : (m == 0.0f ? 0.0f : 1.0f / (1.0f - p))).epsilon(1e-6));
    // our backward, given torch's mask, gives torch's gradient
    Tensor dx(x.shape());
    ops::dropout_backward(dy, mask, dx);
    check_close(dx, member(c, "grad_x"), std::string("dropout grad ") + name, 1e-6, 1e-7);
    // our forward: the same kind of mask (values), our own draws
    Rng rng(1);
    Tensor ours_mask;
    Tensor ours = ops::dropout_forward(x, {p, training}, rng, &ours_mask);
    if (identity) {
      CHECK(ours.values() == x.values());
      CHECK(ours_mask.empty());
    } else {
      for (int64_t i = 0; i < x.numel(); ++i) {
        REQUIRE((ours_mask[i] == 0.0f || ours_mask[i] == 1.0f / (1.0f - p)));
        REQUIRE(ours[i] == x[i] * ours_mask[i]);
      }
    }
  }
}

// =============================================================================================
// 3. autograd wrappers
// =============================================================================================

TEST_CASE("autograd layers: each wrapper's gradient equals its backward kernel's, through autograd::backward") {
  Rng rng(707);
  autograd::clear_tape();
  // layer_norm: three inputs
  {
    Tensor x0 = rand_normal({3, 5}, rng), w0 = rand_normal({5}, rng), b0 = rand_normal({5}, rng),
           dy = rand_normal({3, 5}, rng);
    Var x(x0, true), w(w0, true), b(b0, true);
    Var y = autograd::layer_norm(x, w, b);
    CHECK(autograd::tape_size() == 1);  // one node
    autograd::backward(y, &dy);
    ops::LayerNormStats s;
    ops::layer_norm_forward(x0, w0, b0, ops::kLayerNormEps, &s);
    Tensor dx({3, 5}), dw({5}), db({5});
    ops::layer_norm_backward(dy, x0, w0, s, &dx, &dw, &db);
    CHECK(x.grad().values() == dx.values());
    CHECK(w.grad().values() == dw.values());
    CHECK(b.grad().values() == db.values());
    // undefined weight and bias
    Var x2(x0, true);
    autograd::backward(autograd::layer_norm(x2, Var(), Var()), &dy);
    Tensor dx2({3, 5});
    ops::layer_norm_backward(dy, x0, Tensor(), s, &dx2, nullptr, nullptr);
    CHECK(x2.grad().values() == dx2.values());
  }
  // softmax, log_softmax, relu: the closure reads the node's own output
  {
    Tensor x0 = rand_normal({2, 7}, rng), dy = rand_normal({2, 7}, rng);
    for (int k = 0; k < 3; ++k) {
      Var x(x0, true);
      Var y = k == 0 ? autograd::softmax(x) : k == 1 ? autograd::log_softmax(x) : autograd::relu(x);
      Tensor want(x0.shape());
      if (k == 0) ops::softmax_backward(dy, ops::softmax_forward(x0), want);
      if (k == 1) ops::log_softmax_backward(dy, ops::log_softmax_forward(x0), want);
      if (k == 2) ops::relu_backward(dy, ops::relu_forward(x0), want);
      autograd::backward(y, &dy);
      CHECK(x.grad().values() == want.values());
    }
    // the output may be dropped by the caller before backward runs: the node keeps it
    Var x(x0, true);
    Var s = autograd::sum(autograd::mul(autograd::softmax(x), Var(dy)));
    autograd::backward(s);
    Tensor want(x0.shape());
    ops::softmax_backward(dy, ops::softmax_forward(x0), want);
    check_close(x.grad(), want, "softmax through mul and sum", 1e-6, 1e-7);
  }
  // gelu, dropout, embedding, cross_entropy
  {
    Tensor x0 = rand_normal({4, 3}, rng), dy = rand_normal({4, 3}, rng);
    Var x(x0, true);
    autograd::backward(autograd::gelu(x, ops::GeluApproximate::Tanh), &dy);
    Tensor want({4, 3});
    ops::gelu_backward(dy, x0, want, ops::GeluApproximate::Tanh);
    CHECK(x.grad().values() == want.values());

    Var xd(x0, true);
    Rng r1(3), r2(3);
    Var yd = autograd::dropout(xd, {0.4f, true}, r1);
    Tensor mask;
    CHECK(yd.value().values() == ops::dropout_forward(x0, {0.4f, true}, r2, &mask).values());
    autograd::backward(yd, &dy);
    for (int64_t i = 0; i < dy.numel(); ++i) CHECK(xd.grad()[i] == dy[i] * mask[i]);

    Parameter table("weight", rand_normal({5, 3}, rng));
    Var e = autograd::embedding(Var::param(table), Tensor({4}, {4, 0, 4, 2}), {int64_t{0}});
    autograd::backward(e, &dy);
    for (int j = 0; j < 3; ++j) {
      CHECK(table.grad[0 * 3 + j] == 0.0f);  // padding row
      CHECK(table.grad[4 * 3 + j] == doctest::Approx(dy[0 * 3 + j] + dy[2 * 3 + j]));
      CHECK(table.grad[2 * 3 + j] == dy[3 * 3 + j]);
    }

    Tensor logits0 = rand_normal({4, 6}, rng);
    const ops::CrossEntropyOptions o{-100, 0.1f, ops::Reduction::Mean};
    Var logits(logits0, true);
    Var loss = autograd::cross_entropy(logits, Tensor({4}, {5, -100, 0, 3}), o);
    CHECK(loss.shape() == Shape{});
    autograd::backward(autograd::scale(loss, 3.0f));
    ops::CrossEntropySaved saved;
    ops::cross_entropy_forward(logits0, std::vector<int64_t>{5, -100, 0, 3}, o, &saved);
    Tensor dl({4, 6});
    ops::cross_entropy_backward(Tensor::scalar(3.0f), logits0, {5, -100, 0, 3}, o, saved, dl);
    CHECK(logits.grad().values() == dl.values());
    CHECK(test::error_of([&] { autograd::cross_entropy(logits, Tensor({4, 1})); }) ==
          "cross_entropy: targets have shape [4, 1], expected [4] (logits [4, 6] without the class axis)");
  }
  CHECK(autograd::tape_size() == 0);
}

TEST_CASE("autograd layers: a network of every wrapper against finite differences; NoGrad records nothing") {
  Rng rng(808);
  const int64_t V = 7, E = 5, C = 4;
  Tensor table0 = rand_normal({V, E}, rng), w0 = rand_normal({E}, rng), b0 = rand_normal({E}, rng),
         W0 = rand_normal({C, E}, rng, 0.0f, 0.5f), bias0 = rand_normal({C}, rng);
  const Tensor ids({2, 3}, {1, 6, 0, 3, 3, 5});
  const Tensor targets({2, 3}, {2, -100, 0, 3, 1, 1});
  // embed -> layer_norm -> gelu -> dropout -> relu(linear) -> log_softmax -> softmax -> cross_entropy
  auto net = [&](const Var& table, const Var& w, const Var& b, const Var& W, const Var& bias) {
    Rng r(11);  // the same mask every call
    Var h = autograd::embedding(table, ids, {int64_t{3}});                     // [2, 3, E]
    h = autograd::gelu(autograd::layer_norm(h, w, b));                         // [2, 3, E]
    h = autograd::dropout(h, {0.25f, true}, r);                                // [2, 3, E]
    Var logits = autograd::add(autograd::linear(h, W, bias), autograd::relu(autograd::slice(autograd::linear(h, W, Var()), 2, 0, C)));
    Var p = autograd::softmax(autograd::log_softmax(logits));                  // [2, 3, C]
    return autograd::cross_entropy(autograd::add(logits, p), targets, {-100, 0.1f, ops::Reduction::Sum});
  };
  auto loss = [&] {
    autograd::NoGrad off;
    return double(net(Var(table0), Var(w0), Var(b0), Var(W0), Var(bias0)).value()[0]);
  };
  Var table(table0, true), w(w0, true), b(b0, true), W(W0, true), bias(bias0, true);
  Var out = net(table, w, b, W, bias);
  autograd::backward(out);
  Tensor gt = table.grad(), gw = w.grad(), gb = b.grad(), gW = W.grad(), gbias = bias.grad();
  // row 3 is the padding row: used, but no gradient (so the finite difference skips it)
  for (int64_t e = 0; e < E; ++e) CHECK(gt[3 * E + e] == 0.0f);
  test::GradTolerance tol{1e-2, 2e-3, 2e-2};  // the loss is float32 here: a larger nudge
  CHECK(test::gradient_mismatch({&w0, &b0, &W0, &bias0}, {"norm.weight", "norm.bias", "proj.weight", "proj.bias"},
                                loss, {&gw, &gb, &gW, &gbias}, tol) == "");
  {
    // table rows other than the padding row: compare the analytic gradient with a float loss's differences
    std::vector<int64_t> rows{0, 1, 5, 6};
    for (int64_t row : rows)
      for (int64_t e = 0; e < E; ++e) {
        const int64_t i = row * E + e;
        const float keep = table0[i];
        table0[i] = keep + 1e-2f;
        const double lp = loss();
        table0[i] = keep - 1e-2f;
        const double lm = loss();
        table0[i] = keep;
        const double numeric = (lp - lm) / 2e-2;
        CHECK_MESSAGE(std::fabs(gt[i] - numeric) <= 2e-3 + 2e-2 * std::fabs(numeric),
                      "table[" << row << ", " << e << "]: analytic " << gt[i] << " numeric " << numeric);
      }
  }
  {
    autograd::NoGrad off;
    Var o2 = net(table, w, b, W, bias);
    CHECK(!o2.requires_grad());
    CHECK(autograd::tape_size() == 0);
    CHECK(o2.value()[0] == out.value()[0]);
  }
}

// =============================================================================================
// 4. nn layers
// =============================================================================================

TEST_CASE("nn::Linear: PyTorch's init bounds, state_dict names, load, forward and backward against PyTorch") {
  Rng rng(909), again(909);
  nn::Linear lin(16, 3, rng);
  const float bound = 0.25f;  // 1 / sqrt(16)
  for (float v : lin.weight.value.values()) CHECK((v >= -bound && v < bound));
  for (float v : lin.bias.value.values()) CHECK((v >= -bound && v < bound));
  CHECK(lin.weight.value.values() == rand_uniform({3, 16}, again, -bound, bound).values());  // weight first
  CHECK(lin.bias.value.values() == rand_uniform({3}, again, -bound, bound).values());
  CHECK(lin.named_parameters().size() == 2);
  CHECK(lin.named_parameters()[0]->name == "weight");
  CHECK(lin.named_parameters()[1]->name == "bias");
  nn::Linear nobias(4, 2, rng, false, "decoder.out");
  CHECK(nobias.named_parameters().size() == 1);
  CHECK(nobias.named_parameters()[0]->name == "decoder.out.weight");

  const io::Value& c = fixture("nn", "linear");
  const io::Value& sd = *c.find("state_dict");
  CHECK(sd.names() == std::vector<std::string>{"weight", "bias"});  // PyTorch's order, as named_parameters
  Rng r2(1);
  nn::Linear l(5, 3, r2);
  l.load(sd);
  CHECK(l.weight.version == 1);
  Var x(member(c, "x"), true);
  Var y = l.forward(x);
  check_close(y.value(), member(c, "y"), "nn.Linear y", 1e-5, 1e-6);
  const Tensor dy = member(c, "dy");
  autograd::backward(y, &dy);
  check_close(x.grad(), member(c, "grad_x"), "nn.Linear grad_x", 1e-5, 1e-6);
  const io::Value& g = *c.find("grads");
  check_close(l.weight.grad, member(g, "weight"), "nn.Linear grad weight", 1e-5, 1e-5);
  check_close(l.bias.grad, member(g, "bias"), "nn.Linear grad bias", 1e-5, 1e-5);
  // refusals leave the layer as it was
  const Tensor before = l.weight.value;
  io::Value bad = io::Value::bundle();
  bad.set("weight", Tensor({3, 5}));
  CHECK(test::error_of([&] { l.load(bad); }) == "linear: bias is missing from the bundle (expected shape [3])");
  bad.set("bias", Tensor({4}));
  CHECK(test::error_of([&] { l.load(bad); }) == "linear: bias has shape [4], expected [3]");
  bad.set("bias", Tensor({3}));
  bad.set("weight", Tensor({5, 3}));  // transposed ([in, out], the documents' layout): same numel, refused
  CHECK(test::error_of([&] { l.load(bad); }) == "linear: weight has shape [5, 3], expected [3, 5]");
  CHECK(l.weight.value.values() == before.values());
  nn::Linear out_proj(4, 2, rng, true, "out_proj");
  io::Value nested = io::Value::bundle();
  io::Value inner = io::Value::bundle();
  inner.set("weight", Tensor::filled({2, 4}, 0.5f));
  inner.set("bias", Tensor::filled({2}, -1.0f));
  nested.set("out_proj", inner);
  out_proj.load(nested);  // "out_proj.weight" found nested as out_proj/weight
  CHECK(out_proj.weight.value.values() == std::vector<float>(8, 0.5f));
  CHECK(test::error_of([&] { nobias.load(io::Value::bundle()); }) ==
        "decoder.out: decoder.out.weight is missing from the bundle (expected shape [2, 4])");
}

TEST_CASE("nn::Linear under NoGrad: one fused product equals the recorded linear, relu, add; a changed W is used") {
  Rng rng(31);
  nn::Linear l(40, 70, rng);
  const Var x(rand_normal({3, 9, 40}, rng));  // 27 rows: register blocks
  const Var few(rand_normal({4, 40}, rng));   // 4 rows: dot products
  const Var res(rand_normal({3, 9, 70}, rng));
  for (bool relu : {false, true})
    for (const Var* residual : {static_cast<const Var*>(nullptr), &res}) {
      Var recorded = l.forward(x, {relu, residual});  // linear, relu, add (grad mode)
      Var fused;
      {
        autograd::NoGrad no_grad;
        fused = l.forward(x, {relu, residual});
      }
      CHECK(fused.shape() == Shape{3, 9, 70});
      CHECK(fused.value().values() == recorded.value().values());
    }
  // after an in-place change, and after a new value, NoGrad sees the new W
  auto no_grad_forward = [&](const Var& in) {
    autograd::NoGrad no_grad;
    return l.forward(in).value();
  };
  const Tensor before = no_grad_forward(x);
  l.weight.value[0] += 1.0f;
  l.weight.touch();
  const Tensor after = no_grad_forward(x);
  CHECK(after.values() != before.values());
  CHECK(after.values() == l.forward(x).value().values());
  l.weight.value = rand_normal({70, 40}, rng);
  CHECK(no_grad_forward(x).values() == l.forward(x).value().values());
  CHECK(no_grad_forward(few).values() == l.forward(few).value().values());
  // a malformed input still gets the recorded path's message
  autograd::NoGrad no_grad;
  CHECK(test::error_of([&] { l.forward(Var(Tensor({6, 41}))); }).find("expected [..., 40]") != std::string::npos);
}

TEST_CASE("ops::feed_forward: rows in tasks of 48 through both products give the two whole products' bits") {
  // add + relu(x W1^T + b1) W2^T + b2: each task's hidden block straight into the second product, on one thread
  // and on two; rows of one task, several with a partial last one, and few (4: dot products, no packed weights).
  Rng rng(37);
  nn::Linear l1(40, 256, rng), l2(256, 24, rng);  // 131 rows: 8.6 MFLOP, a team of two
  const int old_threads = num_threads();
  for (int64_t rows : {4, 5, 48, 131}) {
    CAPTURE(rows);
    const Tensor x = rand_normal({rows, 40}, rng), add = rand_normal({rows, 24}, rng);
    Tensor h({rows, 256}), whole({rows, 24});
    ops::linear_fused(l1.view(), x.data(), rows, h.data(), true, nullptr);
    ops::linear_fused(l2.view(), h.data(), rows, whole.data(), false, add.data());
    for (int threads : {1, 2}) {
      CAPTURE(threads);
      set_num_threads(threads);
      Tensor y({rows, 24}), y_no_add({rows, 24}), whole_no_add({rows, 24});
      ops::feed_forward(l1.view(), l2.view(), x.data(), rows, y.data(), add.data());
      CHECK(y.values() == whole.values());
      ops::linear_fused(l2.view(), h.data(), rows, whole_no_add.data(), false, nullptr);
      ops::feed_forward(l1.view(), l2.view(), x.data(), rows, y_no_add.data(), nullptr);
      CHECK(y_no_add.values() == whole_no_add.values());
    }
  }
  set_num_threads(old_threads);
  nn::Linear wrong(257, 24, rng);
  CHECK(test::error_of([&] { ops::feed_forward(l1.view(), wrong.view(), nullptr, 0, nullptr, nullptr); })
            .find("do not chain") != std::string::npos);
}

TEST_CASE("nn::LayerNorm and nn::Embedding: init, names, load, forward and backward against PyTorch") {
  {
    nn::LayerNorm ln(6, 1e-5f, true, "norm1");
    CHECK(ln.weight.value.values() == std::vector<float>(6, 1.0f));
    CHECK(ln.bias.value.values() == std::vector<float>(6, 0.0f));
    CHECK(ln.named_parameters()[0]->name == "norm1.weight");
    CHECK(ln.named_parameters()[1]->name == "norm1.bias");
    CHECK(nn::LayerNorm(6, 1e-5f, false).named_parameters().empty());
    const io::Value& c = fixture("nn", "layer_norm");
    nn::LayerNorm l(6);
    l.load(*c.find("state_dict"));
    Var x(member(c, "x"), true);
    Var y = l.forward(x);
    check_close(y.value(), member(c, "y"), "nn.LayerNorm y", 1e-4, 2e-5);
    const Tensor dy = member(c, "dy");
    autograd::backward(y, &dy);
    check_close(x.grad(), member(c, "grad_x"), "nn.LayerNorm grad_x", 1e-4, 5e-5);
    check_close(l.weight.grad, member(*c.find("grads"), "weight"), "nn.LayerNorm grad weight", 1e-4, 5e-5);
    check_close(l.bias.grad, member(*c.find("grads"), "bias"), "nn.LayerNorm grad bias", 1e-5, 1e-5);
    CHECK(test::error_of([&] { ln.forward(Var(Tensor({2, 5}))); }) == "norm1: input has shape [2, 5], expected [..., 6]");
  }
  {
    Rng rng(10), again(10);
    nn::Embedding emb(8, 3, rng, int64_t{-7});  // = row 1
    Tensor want = rand_normal({8, 3}, again);
    for (int e = 0; e < 3; ++e) want[1 * 3 + e] = 0.0f;  // PyTorch zeroes the padding row
    CHECK(emb.weight.value.values() == want.values());
    CHECK(emb.options().padding_idx == int64_t{1});
    CHECK(emb.named_parameters()[0]->name == "weight");
    const io::Value& c = fixture("nn", "embedding");
    emb.load(*c.find("state_dict"));
    Var y = emb.forward(member(c, "ids"));
    CHECK(y.value().values() == member(c, "y").values());
    const Tensor dy = member(c, "dy");
    autograd::backward(y, &dy);
    check_close(emb.weight.grad, member(*c.find("grads"), "weight"), "nn.Embedding grad weight", 1e-6, 1e-6);
    CHECK(test::error_of([&] { nn::Embedding(4, 2, rng, int64_t{4}); }) ==
          "embedding: padding_idx 4 is out of range for 4 embeddings (expected [-4, 4))");
    CHECK(test::error_of([&] { emb.forward(Tensor({2}, {1, 8})); }) ==
          "embedding: ids[1] = 8 is out of range for weight [8, 3] (ids must be in [0, 8))");
  }
}

TEST_CASE("nn::Dropout: train and eval, own seeded Rng, no parameters") {
  Rng rng(12);
  Tensor x0 = rand_normal({10, 10}, rng);
  nn::Dropout a(0.5f, 99), b(0.5f, 99);
  CHECK(a.named_parameters().empty());
  CHECK(a.training());
  Var ya = a.forward(Var(x0)), yb = b.forward(Var(x0));
  CHECK(ya.value().values() == yb.value().values());
  CHECK(ya.value().values() != x0.values());
  {
    autograd::NoGrad off;  // NoGrad does not switch dropout off: the mode does
    CHECK(a.forward(Var(x0)).value().values() != x0.values());
  }
  a.eval();
  CHECK(a.forward(Var(x0)).value().values() == x0.values());
  a.train();
  Var x(x0, true);
  Rng mine(5), replay(5);
  Var y = a.forward(x, mine);
  Tensor mask;
  ops::dropout_forward(x0, {0.5f, true}, replay, &mask);
  autograd::backward(autograd::sum(y));
  CHECK(x.grad().values() == mask.values());
  CHECK(test::error_of([] { nn::Dropout(1.0f); }) == "dropout: p is 1, expected a probability in [0, 1)");
}

TEST_CASE("nn layers together against PyTorch: embed -> norm -> gelu(tanh) -> proj -> cross_entropy") {
  const io::Value& c = fixture("nn", "tiny");
  const io::Value& sd = *c.find("state_dict");
  Rng rng(0);
  nn::Embedding embed(10, 6, rng, int64_t{0}, "embed");
  nn::LayerNorm norm(6, 1e-5f, true, "norm");
  nn::Linear proj(6, 4, rng, true, "proj");
  std::vector<Parameter*> all;
  for (nn::Module* m : std::initializer_list<nn::Module*>{&embed, &norm, &proj})
    for (Parameter* p : m->named_parameters()) all.push_back(p);
  std::vector<std::string> names;
  for (Parameter* p : all) names.push_back(p->name);
  CHECK(names == sd.names());  // PyTorch's state_dict names, in its order
  embed.load(sd), norm.load(sd), proj.load(sd);
  const Tensor ids = member(c, "ids"), targets = member(c, "targets");
  auto run = [&] {
    Var h = autograd::gelu(norm.forward(embed.forward(ids)), ops::GeluApproximate::Tanh);
    Var logits = proj.forward(h);  // [2, 4, 4]
    return std::pair{logits, autograd::cross_entropy(logits, targets, {-100, number(c, "label_smoothing")})};
  };
  {
    autograd::NoGrad off;  // inference through the same layer code
    auto [logits, loss] = run();
    check_close(logits.value(), member(c, "logits"), "tiny logits", 1e-4, 2e-5);
    CHECK(loss.value()[0] == doctest::Approx(number(c, "loss")).epsilon(1e-5));
    CHECK(autograd::tape_size() == 0);
  }
  auto [logits, loss] = run();
  autograd::backward(loss);
  const io::Value& g = *c.find("grads");
  for (Parameter* p : all) check_close(p->grad, member(g, p->name.c_str()), "tiny grad " + p->name, 1e-4, 2e-5);
}
