#include "attnkit/arch/report.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "attnkit/tensor/error.hpp"

namespace attnkit::arch {

using nlohmann::json;

double load_average() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  if (!(in >> one)) return -1;
  return one;
}

MachineInfo machine_info() {
  MachineInfo m;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) m.cpu = line.substr(line.find_first_not_of(' ', colon + 1));
      break;
    }
  m.cores = int(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN)));
  m.load_before = load_average();
  return m;
}

// ---------------------------------------------------------------- JSON

namespace {

json sizes_json(const Sizes& s) { return {{"n", s.n}, {"d", s.d}, {"k", s.k}, {"r", s.r}, {"batch", s.batch}}; }

}  // namespace

std::string report_json(const Report& r, bool pretty) {
  json j;
  j["sizes"] = sizes_json(r.sizes);
  j["seed"] = r.seed;
  j["machine"] = {{"cpu", r.machine.cpu},
                  {"cores", r.machine.cores},
                  {"load_average_before", r.machine.load_before},
                  {"load_average_after", r.machine.load_after}};
  json rows = json::array();
  for (const AnalyticRow& a : r.analytic)
    rows.push_back({{"layer", a.layer},
                    {"complexity", a.complexity},
                    {"sequential", a.sequential},
                    {"path", a.path},
                    {"memory", a.memory},
                    {"measured_as", layer_name(a.measured_as)},
                    {"flops", a.flops},
                    {"sequential_steps", a.sequential_steps},
                    {"path_length", a.path_length},
                    {"activation_bytes", a.activation_bytes}});
  j["analytic"] = rows;
  if (r.measured) {
    const Measurement& m = *r.measured;
    json t = json::array(), s = json::array(), mem = json::array();
    for (const Timing& x : m.timings)
      t.push_back({{"layer", layer_name(x.layer)},
                   {"n", x.n},
                   {"threads", x.threads},
                   {"flops", x.flops},
                   {"median_s", x.median},
                   {"min_s", x.min},
                   {"max_s", x.max},
                   {"gflops_per_s", x.gflops_per_s},
                   {"seconds", x.seconds}});
    for (const SlopeFit& f : m.slopes)
      s.push_back({{"layer", layer_name(f.layer)}, {"threads", f.threads}, {"slope", f.slope}, {"r2", f.r2}});
    for (const MemoryPoint& p : m.memory)
      mem.push_back({{"layer", layer_name(p.layer)},
                     {"n", p.n},
                     {"peak_bytes", p.peak_bytes ? json(*p.peak_bytes) : json(nullptr)},
                     {"analytic_bytes", p.analytic_bytes}});
    j["measured"] = {{"repeats", r.measure_options.repeats},
                     {"threads", r.measure_options.threads},
                     {"sweep", r.measure_options.sweep},
                     {"timings", t},
                     {"slopes", s},
                     {"memory_method", m.memory_method},
                     {"memory", mem}};
  }
  if (!r.gradient.empty()) {
    json curves = json::array();
    for (const GradientCurve& c : r.gradient) curves.push_back({{"layer", layer_name(c.layer)}, {"norm", c.norm}});
    j["gradient_path"] = {{"n", r.gradient_sizes.n},
                          {"d", r.gradient_sizes.d},
                          {"exact", r.gradient.front().exact},
                          {"what", "||d y[n-1] / d x[n-1-distance]||_F at initialisation; norm[distance]"},
                          {"curves", curves}};
  }
  if (!r.learned.empty()) {
    const LearnOptions& o = r.learn_options;
    json runs = json::array();
    for (const LearnResult& x : r.learned)
      runs.push_back({{"layer", layer_name(x.layer)},
                      {"n", x.n},
                      {"accuracy", x.accuracy},
                      {"final_loss", x.final_loss},
                      {"steps", x.steps},
                      {"seconds", x.seconds}});
    j["learned"] = {{"task", "recall the first token at the last position"},
                    {"d", o.d},
                    {"keys", o.keys},
                    {"distractors", o.distractors},
                    {"steps", o.steps},
                    {"batch", o.batch},
                    {"lr", o.lr},
                    {"eval", o.eval},
                    {"chance", 1.0 / double(o.keys)},
                    {"runs", runs}};
  }
  return pretty ? j.dump(2) : j.dump();
}

// ---------------------------------------------------------------- text table

namespace {

// Columns padded to their widest cell; the first column left-aligned, the others right-aligned.
std::string aligned(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  // a column is numeric (right-aligned) when every cell below the header starts with a digit
  std::vector<bool> numeric(width.size(), true);
  for (size_t r = 1; r < rows.size(); ++r)
    for (size_t c = 0; c < rows[r].size(); ++c)
      if (rows[r][c].empty() || !(std::isdigit(static_cast<unsigned char>(rows[r][c][0])) || rows[r][c][0] == '-')) numeric[c] = false;
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      line += c == 0 ? row[c] + pad : numeric[c] ? "  " + pad + row[c] : "  " + row[c] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string human_bytes(double b) {
  if (b < 1024) return fmt::format("{:.0f} B", b);
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  size_t u = 0;
  b /= 1024;
  while (b >= 1024 && u + 1 < std::size(units)) b /= 1024, ++u;
  return u < 2 ? fmt::format("{:.1f} {}", b, units[u]) : fmt::format("{:.2f} {}", b, units[u]);
}

std::string gflop_text(double gflop) {
  // four significant digits (every integer digit from 1e4 on), never an exponent: {:.4g} is positional
  // from 1e-4 to below 1e4
  if (!(gflop > 0) || !std::isfinite(gflop)) return fmt::format("{}", gflop);
  if (gflop >= 1e4) return fmt::format("{:.0f}", gflop);
  if (gflop >= 1e-4) return fmt::format("{:.4g}", gflop);
  const int decimals = 3 - static_cast<int>(std::floor(std::log10(gflop)));
  return fmt::format("{:.{}f}", gflop, decimals);
}

namespace {

std::string human_time(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.3f} s", s);
}

}  // namespace

std::string report_table(const Report& r) {
  const Sizes& s = r.sizes;
  std::string out = fmt::format("compare-arch: n={} d={} k={} r={} batch={}  ({} cores, load {:.1f} -> {:.1f}{})\n\n", s.n,
                                s.d, s.k, s.r, s.batch, r.machine.cores, r.machine.load_before, r.machine.load_after,
                                r.machine.cpu.empty() ? "" : ", " + r.machine.cpu);
  out += "Analytic: complexity, sequential, path from Attention Is All You Need, Table 1; memory ours; "
         "GFLOP (the layer as built), steps, path length, activations evaluated for these sizes\n";
  std::vector<std::vector<std::string>> rows{
      {"layer", "complexity", "sequential", "path", "memory", "GFLOP", "steps", "path length", "activations"}};
  for (const AnalyticRow& a : r.analytic)
    rows.push_back({a.layer, a.complexity, a.sequential, a.path, a.memory, gflop_text(a.flops / 1e9),
                    std::to_string(a.sequential_steps), std::to_string(a.path_length), human_bytes(a.activation_bytes)});
  out += aligned(rows);
  if (r.measured) {
    const Measurement& m = *r.measured;
    out += fmt::format("\nMeasured forward time at n = {} (median of {}, [min .. max]), GFLOP/s\n",
                       fmt::join(r.measure_options.sweep, ", "), r.measure_options.repeats);
    rows = {{"layer", "n", "threads", "median", "min", "max", "GFLOP/s"}};
    for (const Timing& t : m.timings)
      rows.push_back({std::string(layer_name(t.layer)), std::to_string(t.n), std::to_string(t.threads), human_time(t.median),
                      human_time(t.min), human_time(t.max), fmt::format("{:.2f}", t.gflops_per_s)});
    out += aligned(rows);
    out += "\nSlope of log(time) against log(n)\n";
    rows = {{"layer", "threads", "slope", "r^2"}};
    for (const SlopeFit& f : m.slopes)
      rows.push_back({std::string(layer_name(f.layer)), std::to_string(f.threads), fmt::format("{:.2f}", f.slope),
                      fmt::format("{:.3f}", f.r2)});
    out += aligned(rows);
    if (!m.memory.empty()) {
      out += "\nPeak memory of one forward (" + m.memory_method + ")\n";
      rows = {{"layer", "n", "measured", "analytic"}};
      for (const MemoryPoint& p : m.memory)
        rows.push_back({std::string(layer_name(p.layer)), std::to_string(p.n),
                        p.peak_bytes ? human_bytes(*p.peak_bytes) : "-", human_bytes(p.analytic_bytes)});
      out += aligned(rows);
    }
  }
  if (!r.gradient.empty()) {
    const int64_t n = r.gradient_sizes.n;
    out += fmt::format("\nGradient path at initialisation: ||d y[n-1] / d x[n-1-distance]|| (n={}, d={}{})\n", n,
                       r.gradient_sizes.d, r.gradient.front().exact ? "" : ", estimated from 16 directions");
    std::vector<int64_t> at{0};
    for (int64_t dist = 1; dist < n; dist *= 4) at.push_back(dist);
    if (at.back() != n - 1) at.push_back(n - 1);
    at.erase(std::unique(at.begin(), at.end()), at.end());
    std::vector<std::string> head{"layer"};
    for (int64_t a : at) head.push_back(fmt::format("dist {}", a));
    rows = {head};
    for (const GradientCurve& c : r.gradient) {
      std::vector<std::string> row{std::string(layer_name(c.layer))};
      for (int64_t a : at) row.push_back(fmt::format("{:.3g}", c.norm[size_t(a)]));
      rows.push_back(row);
    }
    out += aligned(rows);
  }
  if (!r.learned.empty()) {
    const LearnOptions& o = r.learn_options;
    out += fmt::format("\nLearned: recall the first token at the last position ({} steps, batch {}, d={}, chance {:.3f})\n",
                       o.steps, o.batch, o.d, 1.0 / double(o.keys));
    rows = {{"layer", "n", "accuracy", "final loss", "seconds"}};
    for (const LearnResult& x : r.learned)
      rows.push_back({std::string(layer_name(x.layer)), std::to_string(x.n), fmt::format("{:.3f}", x.accuracy),
                      fmt::format("{:.3f}", x.final_loss), fmt::format("{:.2f}", x.seconds)});
    out += aligned(rows);
  }
  return out;
}

// ---------------------------------------------------------------- SVG

namespace {

const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};

const char* colour_of(Layer l) {
  const auto& all = all_layers();
  const size_t i = size_t(std::find(all.begin(), all.end(), l) - all.begin());
  return kColours[i % 8];
}

struct Series {
  explicit Series(Layer l) : layer(l) {}
  Layer layer;
  std::vector<double> x, y, lo, hi;  // lo/hi: whiskers (may be empty)
  bool dashed = false;
};

struct Axis {
  bool log = true;
  double lo = 0, hi = 1;
  std::string label;
};

double map_to(const Axis& a, double v, double p0, double p1) {
  const double f = a.log ? (std::log10(v) - std::log10(a.lo)) / (std::log10(a.hi) - std::log10(a.lo)) : (v - a.lo) / (a.hi - a.lo);
  return p0 + f * (p1 - p0);
}

// Extends [lo, hi] over the positive values (log) or all values (linear) of `v`.
void cover(Axis& a, const std::vector<double>& v, bool& first) {
  for (double x : v) {
    if (!std::isfinite(x) || (a.log && x <= 0)) continue;
    if (first) a.lo = a.hi = x, first = false;
    a.lo = std::min(a.lo, x);
    a.hi = std::max(a.hi, x);
  }
}

void round_axis(Axis& a) {
  if (a.log) {
    a.lo = std::pow(10.0, std::floor(std::log10(a.lo)));
    a.hi = std::pow(10.0, std::ceil(std::log10(a.hi)));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
  } else if (a.hi <= a.lo) {
    a.hi = a.lo + 1;
  }
}

std::string tick_label(double v) {
  if (v != 0 && (std::fabs(v) >= 1e4 || std::fabs(v) < 1e-2)) return fmt::format("1e{:.0f}", std::log10(std::fabs(v)));
  return fmt::format("{:g}", v);
}

// One panel at (x0, y0) of size w x h.
std::string panel(const std::string& title, Axis ax, Axis ay, const std::vector<Series>& series, double x0, double y0,
                  double w, double h, const std::vector<std::pair<std::string, std::string>>& legend_extra,
                  char legend_at = 't') {  // 't' top left, 'b' bottom left, 'm' middle right
  std::string s;
  const double L = x0 + 60, R = x0 + w - 10, T = y0 + 30, B = y0 + h - 45;
  s += fmt::format("<text x='{:.1f}' y='{:.1f}' font-size='14' text-anchor='middle'>{}</text>\n", (L + R) / 2, y0 + 18, title);
  s += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='none' stroke='#444'/>\n", L, T, R - L, B - T);
  auto ticks = [](const Axis& a) {
    std::vector<double> t;
    if (a.log) {
      const int step = std::max(1, int(std::ceil((std::log10(a.hi) - std::log10(a.lo)) / 8)));
      for (double e = std::log10(a.lo); e <= std::log10(a.hi) + 1e-9; e += step) t.push_back(std::pow(10.0, e));
    } else {  // a round step (1, 2 or 5 times a power of ten) giving at most 6 intervals
      const double raw = (a.hi - a.lo) / 6, mag = std::pow(10.0, std::floor(std::log10(raw)));
      const double step = raw <= mag ? mag : raw <= 2 * mag ? 2 * mag : raw <= 5 * mag ? 5 * mag : 10 * mag;
      for (double v = std::ceil(a.lo / step) * step; v <= a.hi + 1e-9 * step; v += step) t.push_back(v);
    }
    return t;
  };
  for (double v : ticks(ax)) {
    const double px = map_to(ax, v, L, R);
    s += fmt::format("<line x1='{0:.1f}' x2='{0:.1f}' y1='{1:.1f}' y2='{2:.1f}' stroke='#ddd'/>\n", px, T, B);
    s += fmt::format("<text x='{:.1f}' y='{:.1f}' font-size='11' text-anchor='middle'>{}</text>\n", px, B + 15, tick_label(v));
  }
  for (double v : ticks(ay)) {
    const double py = map_to(ay, v, B, T);
    s += fmt::format("<line x1='{0:.1f}' x2='{1:.1f}' y1='{2:.1f}' y2='{2:.1f}' stroke='#ddd'/>\n", L, R, py);
    s += fmt::format("<text x='{:.1f}' y='{:.1f}' font-size='11' text-anchor='end'>{}</text>\n", L - 4, py + 4, tick_label(v));
  }
  s += fmt::format("<text x='{:.1f}' y='{:.1f}' font-size='12' text-anchor='middle'>{}</text>\n", (L + R) / 2, B + 32, ax.label);
  s += fmt::format("<text x='{0:.1f}' y='{1:.1f}' font-size='12' text-anchor='middle' transform='rotate(-90 {0:.1f} {1:.1f})'>{2}</text>\n",
                   x0 + 14, (T + B) / 2, ay.label);
  auto inside = [&](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!ax.log || x > 0) && (!ay.log || y >= ay.lo) && y <= ay.hi * 1.0001;
  };
  for (const Series& se : series) {
    std::string pts;
    for (size_t i = 0; i < se.x.size(); ++i) {
      if (!inside(se.x[i], se.y[i])) continue;
      const double px = map_to(ax, se.x[i], L, R), py = map_to(ay, se.y[i], B, T);
      pts += fmt::format("{:.1f},{:.1f} ", px, py);
      if (se.x.size() <= 64)
        s += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='2.5' fill='{}'/>\n", px, py, colour_of(se.layer));
      if (!se.lo.empty() && inside(se.x[i], se.lo[i]) && inside(se.x[i], se.hi[i]))
        s += fmt::format("<line x1='{0:.1f}' x2='{0:.1f}' y1='{1:.1f}' y2='{2:.1f}' stroke='{3}'/>\n", px,
                         map_to(ay, se.lo[i], B, T), map_to(ay, se.hi[i], B, T), colour_of(se.layer));
    }
    s += fmt::format("<polyline fill='none' stroke='{}' stroke-width='1.5'{} points='{}'/>\n", colour_of(se.layer),
                     se.dashed ? " stroke-dasharray='5,3'" : "", pts);
  }
  // legend: one entry per layer (first series of each), then the extra lines, on a white box
  std::vector<Layer> seen;
  size_t entries = legend_extra.size();
  for (const Series& se : series)
    if (std::find(seen.begin(), seen.end(), se.layer) == seen.end()) seen.push_back(se.layer), ++entries;
  seen.clear();
  const double box = 14.0 * double(entries) + 4;
  const double top = legend_at == 'b' ? B - 3 - box : legend_at == 'm' ? (T + B) / 2 - box / 2 : T + 3;
  const double lx = legend_at == 'm' ? R - 138 : L + 4;
  s += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='130' height='{:.1f}' fill='white' fill-opacity='0.85' stroke='#ccc'/>\n",
                   lx, top, box);
  double ly = top + 9;
  for (const Series& se : series) {
    if (std::find(seen.begin(), seen.end(), se.layer) != seen.end()) continue;
    seen.push_back(se.layer);
    s += fmt::format("<line x1='{0:.1f}' x2='{1:.1f}' y1='{2:.1f}' y2='{2:.1f}' stroke='{3}' stroke-width='2'/>", lx + 4, lx + 22, ly,
                     colour_of(se.layer));
    s += fmt::format("<text x='{:.1f}' y='{:.1f}' font-size='11'>{}</text>\n", lx + 26, ly + 4, layer_name(se.layer));
    ly += 14;
  }
  for (const auto& [dash, text] : legend_extra) {
    s += fmt::format("<line x1='{0:.1f}' x2='{1:.1f}' y1='{2:.1f}' y2='{2:.1f}' stroke='#444' stroke-width='1.5'{3}/>", lx + 4,
                     lx + 22, ly, dash.empty() ? "" : " stroke-dasharray='" + dash + "'");
    s += fmt::format("<text x='{:.1f}' y='{:.1f}' font-size='11'>{}</text>\n", lx + 26, ly + 4, text);
    ly += 14;
  }
  return s;
}

}  // namespace

std::string report_svg(const Report& r) {
  const bool timing = r.measured && !r.measured->timings.empty();
  AK_CHECK(timing || !r.gradient.empty() || !r.learned.empty(),
           "arch plot: nothing to draw (the report has no measurement, gradient path or learning run)");
  const double W = 460, H = 380;
  const int panels = int(timing) + int(!r.gradient.empty()) + int(!r.learned.empty());
  std::string body;
  double x0 = 0;
  if (timing) {
    const Measurement& m = *r.measured;
    std::vector<int> threads = r.measure_options.threads;
    std::vector<Series> series;
    Axis ax{true, 1, 1, "sequence length n"}, ay{true, 1, 1, "forward time (s)"};
    bool fx = true, fy = true;
    for (Layer l : r.measure_options.layers)
      for (size_t ti = 0; ti < threads.size(); ++ti) {
        if (ti != 0 && ti + 1 != threads.size()) continue;  // the first and the last thread count
        Series se{l};
        se.dashed = ti != 0;
        for (const Timing& t : m.timings)
          if (t.layer == l && t.threads == threads[ti]) {
            se.x.push_back(double(t.n));
            se.y.push_back(t.median);
            se.lo.push_back(t.min);
            se.hi.push_back(t.max);
          }
        cover(ax, se.x, fx);
        cover(ay, se.lo, fy);
        cover(ay, se.hi, fy);
        series.push_back(se);
      }
    round_axis(ax);
    round_axis(ay);
    std::vector<std::pair<std::string, std::string>> extra{{"", fmt::format("{} thread{}", threads.front(), threads.front() == 1 ? "" : "s")}};
    if (threads.size() > 1) extra.push_back({"5,3", fmt::format("{} threads", threads.back())});
    body += panel(fmt::format("forward time, d={} (median, min..max of {})", r.sizes.d, r.measure_options.repeats), ax, ay,
                  series, x0, 0, W, H, extra);
    x0 += W;
  }
  if (!r.gradient.empty()) {
    std::vector<Series> series;
    Axis ax{false, 0, double(std::max<int64_t>(1, r.gradient_sizes.n - 1)), "distance n-1-s"};
    Axis ay{true, 1, 1, "||d y_(n-1) / d x_s||"};
    bool fy = true;
    for (const GradientCurve& c : r.gradient) {
      Series se{c.layer};
      for (size_t i = 0; i < c.norm.size(); ++i) {
        se.x.push_back(double(i));
        se.y.push_back(c.norm[i]);
      }
      cover(ay, se.y, fy);
      series.push_back(se);
    }
    ay.lo = std::max(ay.lo, ay.hi * 1e-12);  // a vanished gradient (1e-40) would flatten the others
    round_axis(ay);
    body += panel(fmt::format("gradient at initialisation, n={}, d={}", r.gradient_sizes.n, r.gradient_sizes.d), ax, ay,
                  series, x0, 0, W, H, {}, 'b');
    x0 += W;
  }
  if (!r.learned.empty()) {
    std::vector<Series> series;
    Axis ax{true, 1, 1, "sequence length n (recall distance n-1)"}, ay{false, 0, 1, "accuracy"};
    bool fx = true;
    for (Layer l : r.learn_options.layers) {
      Series se{l};
      for (const LearnResult& x : r.learned)
        if (x.layer == l) {
          se.x.push_back(double(x.n));
          se.y.push_back(x.accuracy);
        }
      cover(ax, se.x, fx);
      series.push_back(se);
    }
    round_axis(ax);
    body += panel(fmt::format("learned recall, {} steps each (chance {:.2f})", r.learn_options.steps,
                              1.0 / double(r.learn_options.keys)),
                  ax, ay, series, x0, 0, W, H, {}, 'm');
  }
  return fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{:.0f}' height='{:.0f}' font-family='sans-serif'>\n"
                     "<rect width='100%' height='100%' fill='white'/>\n{}</svg>\n",
                     W * panels, H, body);
}

}  // namespace attnkit::arch
