#include "attnkit/train/report.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attnkit/io/status_line.hpp"

namespace attnkit::train {

namespace {

std::string clock(double seconds) {
  const auto s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// About 5 round ticks (1, 2 or 5 times a power of ten) covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double span = hi - lo > 0 ? hi - lo : 1.0;
  const double raw = span / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9 && t.size() < 20; v += step) t.push_back(v);
  return t;
}

}  // namespace

std::string progress_line(const Progress& p, int width) {
  const int64_t done = p.step - p.start_step, todo = std::max<int64_t>(p.steps - p.start_step, 1);
  const double frac = std::clamp(double(done) / double(todo), 0.0, 1.0);
  const double speed = p.seconds > 0 ? double(p.tokens) / p.seconds : 0.0;
  const double eta = done > 0 ? p.seconds * double(p.steps - p.step) / double(done) : 0.0;
  return io::fit_status_line(fmt::format("step {}/{}", p.step, p.steps), frac,
                             {fmt::format("loss {:.4f}", p.loss), fmt::format("{:.0f} tok/s", speed), "ETA " + clock(eta)}, width);
}

namespace {

struct Series {
  const char* key;
  const char* label;
  const char* colour;
  std::map<double, double> points;  // step -> value (a later line replaces an earlier one)
};

// The two curves of the metrics lines: training loss, then validation loss.
std::array<Series, 2> loss_series(const std::vector<std::string>& lines) {
  std::array<Series, 2> series{{{"loss", "training loss", "#1f4e9c", {}}, {"valid_loss", "validation loss", "#d2691e", {}}}};
  for (const std::string& line : lines) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number()) continue;
    const double step = j["step"].get<double>();
    for (Series& s : series) {
      auto it = j.find(s.key);
      if (it != j.end() && it->is_number() && std::isfinite(it->get<double>())) s.points[step] = it->get<double>();
    }
  }
  return series;
}

}  // namespace

int64_t loss_plot_steps(const std::vector<std::string>& metrics_lines) {
  std::set<double> steps;
  for (const Series& s : loss_series(metrics_lines))
    for (const auto& point : s.points) steps.insert(point.first);
  return static_cast<int64_t>(steps.size());
}

std::string loss_plot_svg(const std::vector<std::string>& lines, const std::string& title) {
  const std::array<Series, 2> series = loss_series(lines);
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  bool any = false;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      if (!any) x0 = x1 = x, y0 = y1 = y, any = true;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  y0 = std::min(y0, 0.0);  // losses from 0 up
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + 1;
  const std::vector<double> xt = ticks(x0, x1), yt = ticks(y0, y1);
  x0 = std::min(x0, xt.front()), y1 = std::max(y1, yt.back());
  constexpr int W = 640, H = 400, left = 64, right = 20, top = 48, bottom = 48;
  const double pw = W - left - right, ph = H - top - bottom;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * pw; };
  auto py = [&](double y) { return top + ph - (y - y0) / (y1 - y0) * ph; };
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n<title>{}</title>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
      W, H, W, H, xml_escape(title), xml_escape(title));
  for (double t : xt)
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#eee\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
                       px(t), top, top + ph, top + ph + 14, t);
  for (double t : yt)
    svg += fmt::format("<line x1=\"{1}\" y1=\"{0:.1f}\" x2=\"{2}\" y2=\"{0:.1f}\" stroke=\"#eee\"/>"
                       "<text x=\"{3}\" y=\"{0:.1f}\" text-anchor=\"end\" dominant-baseline=\"middle\">{4:g}</text>\n",
                       py(t), left, left + pw, left - 4, t);
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", left, top, pw, ph);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">step →</text>\n", left + pw / 2, H - 10);
  svg += fmt::format("<text x=\"14\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {0})\">loss →</text>\n",
                     top + ph / 2);
  int legend = 0;
  for (const Series& s : series) {
    if (s.points.empty()) continue;
    std::string pts;
    for (const auto& [x, y] : s.points) pts += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>\n", s.colour, pts);
    for (const auto& [x, y] : s.points)
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2\" fill=\"{}\"><title>step {:g}: {} {:g}</title></circle>\n",
                         px(x), py(y), s.colour, x, s.label, y);
    const int ly = top + 12 + 16 * legend++;
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"/>"
                       "<text x=\"{4}\" y=\"{1}\" dominant-baseline=\"middle\">{5}</text>\n",
                       left + pw - 130, ly, left + pw - 110, s.colour, left + pw - 104, s.label);
  }
  if (legend == 0)
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">no metrics lines yet</text>\n", left + pw / 2,
                       top + ph / 2);
  else if (loss_plot_steps(lines) == 1)
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">one logged step: no curve (log more often "
                       "with --log-every)</text>\n",
                       left + pw / 2, top + ph / 2 - 12);
  svg += "</svg>\n";
  return svg;
}

}  // namespace attnkit::train
