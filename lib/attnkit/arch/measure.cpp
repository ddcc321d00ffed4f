#include "attnkit/arch/measure.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "attnkit/arch/layers.hpp"
#include "attnkit/autograd/var.hpp"
#include "attnkit/tensor/error.hpp"
#include "attnkit/tensor/random.hpp"
#include "attnkit/tensor/threads.hpp"

namespace attnkit::arch {

using autograd::Var;

namespace {

// A field of /proc/self/status in bytes ("VmRSS:   1234 kB"), or -1.
double status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size(), field) == 0 && line.size() > field.size() && line[field.size()] == ':') {
      std::istringstream fields(line.substr(field.size() + 1));
      double kb = -1;
      fields >> kb;
      return kb * 1024.0;
    }
  }
  return -1;
}

bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return bool(out);
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Restores the thread policy on the way out (an exception included).
struct ThreadsGuard {
  int saved = num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

}  // namespace

std::optional<double> peak_extra_bytes(const std::function<void()>& run) {
  malloc_trim(0);
  if (!reset_peak_rss()) return std::nullopt;
  const double before = status_bytes("VmRSS");
  if (before < 0) return std::nullopt;
  run();
  const double peak = status_bytes("VmHWM");
  if (peak < 0) return std::nullopt;
  return std::max(0.0, peak - before);
}

SlopeFit fit_loglog(const std::vector<double>& x, const std::vector<double>& y) {
  AK_CHECK(x.size() == y.size() && x.size() >= 2, "slope fit: {} x and {} y values, expected the same number >= 2",
           x.size(), y.size());
  const size_t m = x.size();
  double sx = 0, sy = 0;
  for (size_t i = 0; i < m; ++i) {
    AK_CHECK(x[i] > 0 && y[i] > 0, "slope fit: point {} ({}, {}) is not positive", i, x[i], y[i]);
    sx += std::log(x[i]);
    sy += std::log(y[i]);
  }
  const double mx = sx / double(m), my = sy / double(m);
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < m; ++i) {
    const double dx = std::log(x[i]) - mx, dy = std::log(y[i]) - my;
    sxx += dx * dx;
    sxy += dx * dy;
    syy += dy * dy;
  }
  AK_CHECK(sxx > 0, "slope fit: every x is the same");
  SlopeFit f{Layer::Conv};
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  f.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 1.0;
  return f;
}

double measure_memory_bound(const Sizes& sizes, const MeasureOptions& options) {
  double worst = 0;
  for (int64_t n : options.sweep) {
    Sizes s = sizes;
    s.n = n;
    const double input = 4.0 * double(s.batch) * double(n) * double(s.d);
    for (Layer l : options.layers) {
      const double depth = l == Layer::ConvStack ? double(conv_stack_depth(n, s.k)) : 1.0;
      const double weights = 4.0 * double(s.d) * double(s.d) * (l == Layer::Lstm ? 8.0 : l == Layer::Conv || l == Layer::ConvStack ? double(s.k) * depth : 4.0);
      worst = std::max(worst, input + weights + layer_activation_bytes(l, s));
    }
  }
  return worst;
}

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

Measurement measure(const Sizes& sizes, const MeasureOptions& options) {
  Sizes checked = sizes;
  checked.n = 1;  // n comes from the sweep
  check_sizes(checked);
  AK_CHECK(!options.sweep.empty(), "measure: the sweep is empty");
  AK_CHECK(!options.layers.empty(), "measure: no layer types");
  AK_CHECK(!options.threads.empty(), "measure: no thread counts");
  AK_CHECK(options.repeats >= 1, "measure: {} repeats, expected at least 1", options.repeats);
  for (int64_t n : options.sweep) AK_CHECK(n >= 1, "measure: sweep length {} is not >= 1", n);
  ThreadsGuard guard;
  Measurement m;
  const int64_t L = int64_t(options.layers.size()), S = int64_t(options.sweep.size());
  const int64_t total = int64_t(options.threads.size()) * S * L * (options.repeats + 1) + (options.memory ? S * L : 0);
  int64_t done = 0;
  auto report = [&](const std::string& what) {
    if (options.progress) options.progress(what, done, total);
  };
  using Clock = std::chrono::steady_clock;
  for (int threads : options.threads) {
    set_num_threads(threads);
    for (int64_t n : options.sweep) {
      Sizes s = sizes;
      s.n = n;
      report(fmt::format("n={}, {} thread{}", n, threads, threads == 1 ? "" : "s"));
      Rng rng(options.seed);
      const Var x(rand_normal({s.batch, n, s.d}, rng));  // [B, n, d]
      std::vector<std::unique_ptr<SequenceLayer>> layers;
      for (Layer l : options.layers) layers.push_back(make_layer(l, s, rng));
      autograd::NoGrad no_grad;
      std::vector<Timing> group(static_cast<size_t>(L));
      for (int64_t i = 0; i < L; ++i) {
        group[size_t(i)].layer = options.layers[size_t(i)];
        group[size_t(i)].n = n;
        group[size_t(i)].threads = threads;
        group[size_t(i)].flops = layer_flops(options.layers[size_t(i)], s);
        layers[size_t(i)]->forward(x);  // warm-up: first-touch pages, packed weights, thread team
        ++done;
      }
      for (int rep = 0; rep < options.repeats; ++rep) {
        for (int64_t i = 0; i < L; ++i) {
          const auto t0 = Clock::now();
          const Var y = layers[size_t(i)]->forward(x);
          const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
          group[size_t(i)].seconds.push_back(std::max(sec, 1e-9));
          ++done;
        }
        report(fmt::format("n={}, {} thread{}", n, threads, threads == 1 ? "" : "s"));
      }
      for (Timing& t : group) {
        t.median = median_of(t.seconds);
        t.min = *std::min_element(t.seconds.begin(), t.seconds.end());
        t.max = *std::max_element(t.seconds.begin(), t.seconds.end());
        t.gflops_per_s = t.flops / t.median / 1e9;
        m.timings.push_back(std::move(t));
      }
    }
  }
  if (options.memory) {
    set_num_threads(options.threads.back());
    m.memory_method = "peak resident memory of one forward in this process: malloc_trim(0), VmHWM reset through "
                      "/proc/self/clear_refs, then VmHWM after the forward minus VmRSS before it (input and weights "
                      "excluded)";
    for (int64_t n : options.sweep) {
      Sizes s = sizes;
      s.n = n;
      Rng rng(options.seed);
      const Var x(rand_normal({s.batch, n, s.d}, rng));  // [B, n, d]
      autograd::NoGrad no_grad;
      for (Layer l : options.layers) {
        report(fmt::format("memory: {} at n={}", layer_name(l), n));
        auto layer = make_layer(l, s, rng);
        layer->forward(x);  // warm-up outside the probe (thread stacks, packed weights)
        MemoryPoint p{l, n, std::nullopt, layer_activation_bytes(l, s)};
        p.peak_bytes = peak_extra_bytes([&] { const Var y = layer->forward(x); });
        if (!p.peak_bytes) m.memory_method = "not measured: /proc/self/clear_refs or /proc/self/status unavailable";
        m.memory.push_back(p);
        ++done;
      }
    }
  }
  for (int threads : options.threads)
    for (Layer l : options.layers) {
      std::vector<double> xs, ys;
      for (const Timing& t : m.timings)
        if (t.layer == l && t.threads == threads) {
          xs.push_back(double(t.n));
          ys.push_back(t.median);
        }
      if (xs.size() < 2) continue;
      SlopeFit f = fit_loglog(xs, ys);
      f.layer = l;
      f.threads = threads;
      m.slopes.push_back(f);
    }
  report("done");
  return m;
}

}  // namespace attnkit::arch
