#include "attnkit/arch/analytic.hpp"

#include <algorithm>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "attnkit/tensor/enum_names.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::arch {

namespace {

// Every layer, in the order of all_layers().
constexpr EnumName<Layer> kLayerNames[] = {
    {Layer::Conv, "conv"},           {Layer::ConvStack, "conv-stack"},           {Layer::Rnn, "rnn"},
    {Layer::Lstm, "lstm"},           {Layer::Attention, "attention"},            {Layer::AttentionTiled, "attention-tiled"},
    {Layer::LocalAttention, "local-attention"}};

}  // namespace

const std::vector<Layer>& all_layers() {
  static const std::vector<Layer> layers = [] {
    std::vector<Layer> v;
    for (const EnumName<Layer>& e : kLayerNames) v.push_back(e.value);
    return v;
  }();
  return layers;
}

std::string_view layer_name(Layer layer) { return name_of(kLayerNames, layer); }

Layer parse_layer(std::string_view name) {
  if (const std::optional<Layer> layer = parse_name(kLayerNames, name)) return *layer;
  fail("arch: unknown layer type \"{}\" (known: {})", name, names_of(kLayerNames));
}

void check_sizes(const Sizes& s) {
  AK_CHECK(s.n >= 1, "arch: sequence length n = {}, expected at least 1", s.n);
  AK_CHECK(s.d >= 1, "arch: model size d = {}, expected at least 1", s.d);
  AK_CHECK(s.k >= 2, "arch: kernel size k = {}, expected at least 2 (a kernel of 1 never connects positions)", s.k);
  AK_CHECK(s.r >= 2, "arch: window r = {}, expected at least 2 (a window of 1 never connects positions)", s.r);
  AK_CHECK(s.batch >= 1, "arch: batch = {}, expected at least 1", s.batch);
}

int64_t conv_stack_depth(int64_t n, int64_t k) {
  AK_CHECK(k >= 2, "conv stack: kernel size {} < 2", k);
  int64_t L = 1, field = k;
  while (field < n) {
    field = field > n / k + 1 ? n : field * k;  // saturate instead of overflowing
    ++L;
  }
  return L;
}

int64_t local_pairs(int64_t n, int64_t r) {
  // Query t sees keys t - left .. t + right within [0, n). Counted by offset delta = key - query: an offset
  // of size |delta| < n is taken by n - |delta| queries, so
  //   pairs = sum_{delta = -left}^{right} max(0, n - |delta|)
  //         = (a + 1) n - a (a + 1) / 2 + b n - b (b + 1) / 2,   a = min(right, n - 1), b = min(left, n - 1),
  // in O(1) for any n (compare-arch --n 1e12).
  AK_CHECK(n >= 1 && r >= 1, "local attention: n = {} and window r = {}, expected at least 1 each", n, r);
  const int64_t left = r / 2, right = r - 1 - left;
  const __int128 a = std::min(right, n - 1), b = std::min(left, n - 1), N = n;
  const __int128 pairs = (a + 1) * N - a * (a + 1) / 2 + b * N - b * (b + 1) / 2;
  AK_CHECK(pairs <= std::numeric_limits<int64_t>::max(),
           "local attention: n = {} with window r = {} has more than 2^63 - 1 query-key pairs", n, r);
  return static_cast<int64_t>(pairs);
}

double layer_flops(Layer layer, const Sizes& s) {
  const double n = double(s.n), d = double(s.d), k = double(s.k), B = double(s.batch);
  switch (layer) {
    case Layer::Conv: return B * 2 * k * n * d * d;
    case Layer::ConvStack: return B * 2 * k * n * d * d * double(conv_stack_depth(s.n, s.k));
    case Layer::Rnn: return B * 4 * n * d * d;
    case Layer::Lstm: return B * 16 * n * d * d;
    case Layer::Attention:
    case Layer::AttentionTiled: return B * (8 * n * d * d + 4 * n * n * d);
    case Layer::LocalAttention: return B * (8 * n * d * d + 4 * d * double(local_pairs(s.n, s.r)));
  }
  return 0;
}

double layer_activation_bytes(Layer layer, const Sizes& s) {
  const double n = double(s.n), d = double(s.d), k = double(s.k), B = double(s.batch);
  switch (layer) {
    case Layer::Conv: return 4 * B * (k + 1) * n * d;
    case Layer::ConvStack: return 4 * B * (k + 2) * n * d;  // one layer's im2col + its input and output
    case Layer::Rnn: return 4 * B * 2 * n * d;
    case Layer::Lstm: return 4 * B * 5 * n * d;  // the hoisted gate projection 4nd + the states
    case Layer::Attention: return 4 * B * (5 * n * d + 2 * n * n);
    case Layer::AttentionTiled: return 4 * B * (5 * n * d + n);
    case Layer::LocalAttention: return 4 * B * (5 * n * d + n * double(s.r));
  }
  return 0;
}

int64_t layer_sequential_steps(Layer layer, const Sizes& s) {
  switch (layer) {
    case Layer::Rnn:
    case Layer::Lstm: return s.n;
    case Layer::ConvStack: return conv_stack_depth(s.n, s.k);
    default: return 1;
  }
}

int64_t layer_path_length(Layer layer, const Sizes& s) {
  switch (layer) {
    case Layer::Rnn:
    case Layer::Lstm: return s.n;
    case Layer::Conv:
    case Layer::ConvStack: return conv_stack_depth(s.n, s.k);
    case Layer::LocalAttention: {
      const int64_t left = s.r / 2;
      return std::max<int64_t>(1, (s.n - 1 + left - 1) / left);
    }
    default: return 1;
  }
}

std::vector<AnalyticRow> analytic_table(const Sizes& s) {
  check_sizes(s);
  std::vector<AnalyticRow> rows{
      {"self-attention", "O(n^2 d)", "O(1)", "O(1)", "5nd + 2n^2", Layer::Attention},
      {"recurrent", "O(n d^2)", "O(n)", "O(n)", "2nd", Layer::Rnn},
      {"convolutional", "O(k n d^2)", "O(1)", "O(log_k n)", "(k+1)nd", Layer::Conv},
      {"restricted self-attention", "O(r n d)", "O(1)", "O(n/r)", "5nd + nr", Layer::LocalAttention},
  };
  for (AnalyticRow& row : rows) {
    row.flops = layer_flops(row.measured_as, s);
    row.sequential_steps = layer_sequential_steps(row.measured_as, s);
    row.path_length = layer_path_length(row.measured_as, s);
    row.activation_bytes = layer_activation_bytes(row.measured_as, s);
  }
  return rows;
}

}  // namespace attnkit::arch
