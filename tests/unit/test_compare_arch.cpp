// compare-arch (lib/attnkit/arch) and its kernels: the 1-D convolution and banded local attention
// against plain-loop references and finite differences, the analytic table against values computed
// by hand, the slope property of the timing sweep, the gradient-path property, the peak-memory probe.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "attnkit/arch/analytic.hpp"
#include "attnkit/arch/gradient_path.hpp"
#include "attnkit/arch/measure.hpp"
#include "attnkit/arch/report.hpp"
#include "attnkit/autograd/conv1d.hpp"
#include "attnkit/autograd/functional.hpp"
#include "attnkit/ops/conv1d.hpp"
#include "attnkit/ops/local_attention.hpp"
#include "attnkit/tensor/random.hpp"
#include "gradcheck.hpp"
#include "test_util.hpp"

using namespace attnkit;

namespace {

void check_close(const Tensor& a, const Tensor& b, float tol = 1e-5f) {
  REQUIRE(a.shape() == b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) REQUIRE(a[i] == doctest::Approx(b[i]).epsilon(tol).scale(1.0));
}

}  // namespace

TEST_CASE("conv1d: forward against the plain loops, causal and same, dilated; backward against finite differences") {
  Rng rng(11);
  for (const ops::Conv1dOptions o : {ops::Conv1dOptions{ops::ConvPadding::Causal, 1}, ops::Conv1dOptions{ops::ConvPadding::Causal, 2},
                                     ops::Conv1dOptions{ops::ConvPadding::Same, 1}, ops::Conv1dOptions{ops::ConvPadding::Same, 3}}) {
    CAPTURE(o.dilation);
    Tensor x = rand_normal({2, 7, 3}, rng), w = rand_normal({4, 3, 3}, rng), b = rand_normal({4}, rng);
    check_close(ops::conv1d_forward(x, w, &b, o), ops::conv1d_forward_naive(x, w, &b, o));
    const Tensor dy = rand_normal({2, 7, 4}, rng);
    Tensor dx(x.shape()), dw(w.shape()), db(b.shape());
    ops::conv1d_backward(x, w, dy, o, &dx, &dw, &db);
    auto loss = [&] { return test::dot(dy, ops::conv1d_forward_naive(x, w, &b, o)); };
    CHECK(test::gradient_mismatch({&x, &w, &b}, {"x", "w", "b"}, loss, {&dx, &dw, &db}) == "");
    Tensor wrong = dx;
    wrong[5] += 0.3f;
    CHECK(test::gradient_mismatch({&x}, {"x"}, loss, {&wrong}) != "");
  }
  // causal: y_t never depends on x_{t+1..}
  Tensor x = rand_normal({1, 6, 2}, rng), w = rand_normal({2, 2, 3}, rng);
  const Tensor y = ops::conv1d_forward(x, w, nullptr, {ops::ConvPadding::Causal, 2});
  x[5 * 2] += 10.0f;  // the last position
  const Tensor y2 = ops::conv1d_forward(x, w, nullptr, {ops::ConvPadding::Causal, 2});
  for (int64_t i = 0; i < 5 * 2; ++i) CHECK(y[i] == y2[i]);
  CHECK(test::error_of([&] { ops::conv1d_forward(Tensor({1, 6, 3}), w, nullptr, {}); }) ==
        "conv1d: weight [2, 2, 3] and input [1, 6, 3] disagree on the channels C");
}

TEST_CASE("local attention: the banded kernel against the masked plain loops, and finite differences") {
  Rng rng(12);
  for (const ops::LocalWindow win : {ops::centred_window(3), ops::centred_window(4), ops::LocalWindow{2, 0}, ops::LocalWindow{0, 9}}) {
    CAPTURE(win.left);
    CAPTURE(win.right);
    Tensor q = rand_normal({2, 6, 4}, rng), k = rand_normal({2, 6, 4}, rng), v = rand_normal({2, 6, 4}, rng);
    const ops::LocalAttentionResult r = ops::local_attention_forward(q, k, v, win);
    check_close(r.out, ops::local_attention_forward_naive(q, k, v, win));
    const Tensor dout = rand_normal({2, 6, 4}, rng);
    Tensor dq(q.shape()), dk(k.shape()), dv(v.shape());
    ops::local_attention_backward(q, k, v, r.band, dout, win, 0.0f, &dq, &dk, &dv);
    auto loss = [&] { return test::dot(dout, ops::local_attention_forward_naive(q, k, v, win)); };
    CHECK(test::gradient_mismatch({&q, &k, &v}, {"q", "k", "v"}, loss, {&dq, &dk, &dv}) == "");
    Tensor wrong = dk;
    wrong[7] = -wrong[7] + 0.2f;
    CHECK(test::gradient_mismatch({&k}, {"k"}, loss, {&wrong}) != "");
  }
}

TEST_CASE("conv1d and local attention through autograd: the tape reaches the kernels' gradients") {
  Rng rng(13);
  Tensor xv = rand_normal({1, 5, 3}, rng), wv = rand_normal({3, 3, 2}, rng), bv = rand_normal({3}, rng);
  autograd::Var x(xv, true), w(wv, true), b(bv, true);
  const autograd::Var y = autograd::conv1d(x, w, b, {ops::ConvPadding::Causal, 2});  // [1, 5, 3]
  const autograd::Var z = autograd::local_attention(y, y, y, ops::centred_window(3));
  autograd::backward(autograd::sum(z));
  auto loss = [&] {
    const Tensor yy = ops::conv1d_forward_naive(xv, wv, &bv, {ops::ConvPadding::Causal, 2});
    const Tensor zz = ops::local_attention_forward_naive(yy, yy, yy, ops::centred_window(3));
    return std::accumulate(zz.values().begin(), zz.values().end(), 0.0);
  };
  CHECK(test::gradient_mismatch({&xv, &wv, &bv}, {"x", "w", "b"}, loss, {&x.grad(), &w.grad(), &b.grad()}) == "");
}

TEST_CASE("compare-arch analytic table: values computed by hand") {
  // n=8, d=4, k=2, r=4: by hand
  //   attention    8nd^2 + 4n^2 d = 8*8*16 + 4*64*4 = 2048 FLOPs; 1 step; path 1; 4(5nd + 2n^2) = 4*288 = 1152 B
  //   recurrent    4nd^2 = 512; 8 steps; path 8; 4*2nd = 256 B
  //   conv         2knd^2 = 2*2*8*16 = 512; 1 step; path log_2 8 = 3; 4(k+1)nd = 384 B
  //   restricted   window left 2, right 1: visible pairs 2+3+4+4+4+4+4+3 = 28; 1024 + 4*4*28 = 1472;
  //                path ceil(7/2) = 4; 4(5nd + nr) = 4*192 = 768 B
  const auto rows = arch::analytic_table({8, 4, 2, 4, 1});
  REQUIRE(rows.size() == 4);
  CHECK(rows[0].layer == "self-attention");
  CHECK(rows[0].complexity == "O(n^2 d)");
  CHECK(rows[2].path == "O(log_k n)");
  const double flops[] = {2048, 512, 512, 1472}, bytes[] = {1152, 256, 384, 768};
  const int64_t steps[] = {1, 8, 1, 1}, path[] = {1, 8, 3, 4};
  for (size_t i = 0; i < 4; ++i) {
    CAPTURE(rows[i].layer);
    CHECK(rows[i].flops == flops[i]);
    CHECK(rows[i].activation_bytes == bytes[i]);
    CHECK(rows[i].sequential_steps == steps[i]);
    CHECK(rows[i].path_length == path[i]);
  }
  CHECK(arch::local_pairs(8, 4) == 28);
  // the closed form against the loop over every query it replaces, windows wider than n included
  for (int64_t n = 1; n <= 40; ++n)
    for (int64_t r = 1; r <= 90; ++r) {
      const int64_t left = r / 2, right = r - 1 - left;
      int64_t loop = 0;
      for (int64_t t = 0; t < n; ++t) loop += std::min(n - 1, t + right) - std::max<int64_t>(0, t - left) + 1;
      CAPTURE(n);
      CAPTURE(r);
      REQUIRE(arch::local_pairs(n, r) == loop);
    }
  // O(1) in n: 10^12 positions with a window of 4 (2 on the left, 1 on the right)
  CHECK(arch::local_pairs(1000000000000, 4) == 4 * 1000000000000 - 3 - 1);
  CHECK_THROWS_AS(arch::local_pairs(int64_t{1} << 62, int64_t{1} << 40), Error);
  CHECK(arch::conv_stack_depth(1, 3) == 1);
  CHECK(arch::conv_stack_depth(3, 3) == 1);
  CHECK(arch::conv_stack_depth(4, 3) == 2);
  CHECK(arch::conv_stack_depth(9, 2) == 4);
  CHECK(arch::conv_stack_depth(int64_t{1} << 62, 2) == 62);
  // the stack's FLOPs are its depth times one layer's; the LSTM's four times the RNN's
  const arch::Sizes s{100, 8, 3, 4, 2};
  CHECK(arch::layer_flops(arch::Layer::ConvStack, s) == 5 * arch::layer_flops(arch::Layer::Conv, s));
  CHECK(arch::layer_flops(arch::Layer::Lstm, s) == 4 * arch::layer_flops(arch::Layer::Rnn, s));
  CHECK(test::error_of([] { arch::analytic_table({8, 4, 1, 4, 1}); }) ==
        "arch: kernel size k = 1, expected at least 2 (a kernel of 1 never connects positions)");
  CHECK(arch::parse_layer("lstm") == arch::Layer::Lstm);
  CHECK(test::error_of([] { arch::parse_layer("cnn"); }).find("known: conv, conv-stack") != std::string::npos);
}

TEST_CASE("compare-arch table: Table 1's columns named, bytes in the largest unit, GFLOP never in exponent notation") {
  CHECK(arch::human_bytes(0) == "0 B");
  CHECK(arch::human_bytes(1023) == "1023 B");
  CHECK(arch::human_bytes(1024) == "1.0 KiB");
  CHECK(arch::human_bytes(7.0 * 1024 * 1024) == "7.0 MiB");
  CHECK(arch::human_bytes(1.5 * 1024 * 1024 * 1024) == "1.50 GiB");
  CHECK(arch::human_bytes(2.0 * 1024 * 1024 * 1024 * 1024) == "2.00 TiB");
  CHECK(arch::human_bytes(3.0 * 1024 * 1024 * 1024 * 1024 * 1024) == "3.00 PiB");
  CHECK(arch::human_bytes(4.0 * 1024 * 1024 * 1024 * 1024 * 1024 * 1024) == "4.00 EiB");
  CHECK(arch::human_bytes(8192.0 * 1024 * 1024 * 1024 * 1024 * 1024 * 1024) == "8192.00 EiB");  // no larger unit
  CHECK(arch::gflop_text(1.6106) == "1.611");
  CHECK(arch::gflop_text(0.53687) == "0.5369");
  CHECK(arch::gflop_text(1.2e-8) == "0.00000001200");
  CHECK(arch::gflop_text(3.2e16) == "32000000000000000");  // 3.2e16 is exact in a double
  CHECK(arch::gflop_text(12345.6) == "12346");
  CHECK(arch::gflop_text(0) == "0");
  // n = 10^12, d = 8: self-attention's 2n^2 weights are 6.9 million EiB, its FLOPs 3.2e16 GFLOP
  arch::Report r;
  r.sizes = {1000000000000, 8, 3, 64, 1};
  r.analytic = arch::analytic_table(r.sizes);
  const std::string table = arch::report_table(r);
  CAPTURE(table);
  CHECK(table.find("complexity, sequential, path from Attention Is All You Need, Table 1") != std::string::npos);
  CHECK(table.find("evaluated for these sizes") != std::string::npos);
  CHECK(table.find("GiB") == std::string::npos);
  CHECK(table.find("EiB") != std::string::npos);
  CHECK(table.find("e+") == std::string::npos);
}

TEST_CASE("compare-arch measure: self-attention's time grows faster with n than the RNN's (a slope, not a time)") {
  // FLOP-dominated sizes (attention 4n^2 d against the RNN's 4nd^2 with d = 16), medians of 5 repeats,
  // interleaved: a load spike must hit three of five runs of one point to move its median.
  arch::MeasureOptions o;
  o.sweep = {128, 256, 512, 1024};
  o.layers = {arch::Layer::Rnn, arch::Layer::AttentionTiled};
  o.repeats = 5;
  o.memory = false;
  const arch::Measurement m = arch::measure({0, 16, 3, 8, 1}, o);
  REQUIRE(m.slopes.size() == 2);
  CHECK(m.timings.size() == 8);
  const double rnn = m.slopes[0].slope, attention = m.slopes[1].slope;
  CAPTURE(rnn);
  CAPTURE(attention);
  CHECK(attention > rnn + 0.3);
  // the fit itself, on exact data: time = 3 n^2
  const arch::SlopeFit f = arch::fit_loglog({2, 4, 8}, {12, 48, 192});
  CHECK(f.slope == doctest::Approx(2.0));
  CHECK(std::exp(f.intercept) == doctest::Approx(3.0));
  CHECK(f.r2 == doctest::Approx(1.0));
}

TEST_CASE("compare-arch gradient path: the plain RNN's gradient vanishes with distance, attention's does not") {
  const arch::Sizes s{32, 8, 3, 4, 1};
  const auto curves = arch::gradient_path(s, {arch::Layer::Rnn, arch::Layer::AttentionTiled}, 5);
  REQUIRE(curves.size() == 2);
  auto mean = [](const std::vector<double>& v, size_t a, size_t b) {
    return std::accumulate(v.begin() + long(a), v.begin() + long(b), 0.0) / double(b - a);
  };
  const auto& rnn = curves[0].norm;
  const auto& att = curves[1].norm;
  CHECK(curves[0].exact);
  CAPTURE(rnn[0]);
  CAPTURE(rnn[31]);
  CHECK(rnn[0] > 0.1);
  CHECK(rnn[31] < 1e-4 * rnn[0]);
  CHECK(mean(rnn, 16, 32) < 1e-2 * mean(rnn, 1, 16));
  const double near = mean(att, 1, 16), far = mean(att, 16, 32);
  CAPTURE(near);
  CAPTURE(far);
  CHECK(far > 0.3 * near);
  CHECK(*std::min_element(att.begin(), att.end()) > 0);
}

TEST_CASE("compare-arch peak memory: the probe sees 8 MB written, and the report draws") {
  const auto bytes = arch::peak_extra_bytes([] {
    std::vector<char> block(8 << 20);
    std::fill(block.begin(), block.end(), char(1));
    volatile char keep = block[12345];
    (void)keep;
  });
  if (bytes) {  // Linux with /proc/self/clear_refs writable
    CHECK(*bytes >= 7.9e6);
    CHECK(*bytes < 64e6);
  }
  arch::Report r;
  r.gradient = arch::gradient_path({8, 4, 2, 4, 1}, {arch::Layer::Rnn}, 1);
  r.gradient_sizes = {8, 4, 2, 4, 1};
  const std::string svg = arch::report_svg(r);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("<polyline") != std::string::npos);
  const arch::Report empty;
  CHECK(test::error_of([&] { arch::report_svg(empty); }).find("nothing to draw") != std::string::npos);
}
