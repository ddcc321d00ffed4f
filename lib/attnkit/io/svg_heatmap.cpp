#include "attnkit/io/svg_heatmap.hpp"

#include <algorithm>
#include <cmath>

#include "attnkit/io/atomic_file.hpp"
#include "attnkit/tensor/error.hpp"

namespace attnkit::io {
namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// 0 -> white, 1 -> rgb(8, 48, 107) (a "Blues" ramp).
std::string colour(double x) {
  x = std::clamp(x, 0.0, 1.0);
  auto mix = [&](int a, int b) { return static_cast<int>(std::lround(a + (b - a) * x)); };
  return fmt::format("rgb({},{},{})", mix(247, 8), mix(251, 48), mix(255, 107));
}

}  // namespace

std::string heatmap_svg(const Tensor& w, const HeatmapOptions& o) {
  AK_CHECK(w.rank() >= 2 && w.rank() <= 4, "heatmap: weights have shape {}, expected [T, S], [N, T, S] or [N, NH, T, S]",
           w.shape_str());
  AK_CHECK(w.numel() <= o.max_cells, "heatmap: weights {} have {} cells, more than the {} a heatmap shows usefully",
           w.shape_str(), w.numel(), o.max_cells);
  const int64_t T = w.dim(-2), S = w.dim(-1);
  const int64_t panels = (T > 0 && S > 0) ? w.numel() / (T * S) : 0;
  const int64_t NH = w.rank() == 4 ? w.dim(1) : 1;
  AK_CHECK(o.row_labels.empty() || static_cast<int64_t>(o.row_labels.size()) == T,
           "heatmap: {} query labels for T = {} rows of weights {}", o.row_labels.size(), T, w.shape_str());
  AK_CHECK(o.col_labels.empty() || static_cast<int64_t>(o.col_labels.size()) == S,
           "heatmap: {} key labels for S = {} columns of weights {}", o.col_labels.size(), S, w.shape_str());
  auto row_label = [&](int64_t i) { return o.row_labels.empty() ? std::to_string(i) : o.row_labels[i]; };
  auto col_label = [&](int64_t j) { return o.col_labels.empty() ? std::to_string(j) : o.col_labels[j]; };
  size_t longest_row = 1, longest_col = 1;
  for (int64_t i = 0; i < T; ++i) longest_row = std::max(longest_row, row_label(i).size());
  for (int64_t j = 0; j < S; ++j) longest_col = std::max(longest_col, col_label(j).size());

  const int cell = T <= 24 && S <= 24 ? 36 : std::max<int>(4, static_cast<int>(720 / std::max(T, S)));
  const bool numbers = cell >= 30;
  const int font = std::min(12, std::max(6, cell - 2));
  const int left = 30 + static_cast<int>(longest_row) * font * 6 / 10 + 8;   // axis title + row labels
  const int top = 40 + static_cast<int>(longest_col) * font * 6 / 10 + 8;    // panel title + column labels
  const int panel_w = static_cast<int>(S) * cell, panel_h = static_cast<int>(T) * cell;
  // the canvas is at least as wide as the heading (bold 14 px: about 0.62 em a character, bytes counted, at
  // x = 10 with 10 to spare), so that a small map does not clip its title
  const std::string heading = o.title + " " + w.shape_str();
  const int heading_w = 20 + static_cast<int>(std::ceil(static_cast<double>(heading.size()) * 14 * 0.62));
  const int width = std::max(left + panel_w + 20, heading_w), panel_total = top + panel_h + 30;
  const int height = 30 + static_cast<int>(panels) * panel_total;

  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"{}\">\n"
      "<title>{}</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
      width, height, width, height, font, xml_escape(o.title), xml_escape(heading));
  for (int64_t p = 0; p < panels; ++p) {
    const float* m = w.data() + p * T * S;
    float mx = 0;
    for (int64_t i = 0; i < T * S; ++i)
      if (std::isfinite(m[i])) mx = std::max(mx, m[i]);
    const int y0 = 30 + static_cast<int>(p) * panel_total;
    std::string name = w.rank() == 2 ? "" : w.rank() == 3 ? fmt::format("n = {}", p) : fmt::format("n = {}, head {}", p / NH, p % NH);
    svg += fmt::format("<g transform=\"translate(0,{})\">\n", y0);
    if (!name.empty()) svg += fmt::format("<text x=\"10\" y=\"16\" font-weight=\"bold\">{}</text>\n", name);
    // axis titles: key across the top, query down the left
    svg += fmt::format("<text x=\"{}\" y=\"34\" text-anchor=\"middle\">{} →</text>\n", left + panel_w / 2,
                       xml_escape(o.col_axis));
    svg += fmt::format("<text x=\"14\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {})\">{} →</text>\n",
                       top + panel_h / 2, top + panel_h / 2, xml_escape(o.row_axis));
    for (int64_t j = 0; j < S; ++j) {
      const int x = left + static_cast<int>(j) * cell + cell / 2;
      svg += fmt::format("<text x=\"{}\" y=\"{}\" transform=\"rotate(-60 {} {})\">{}</text>\n", x, top - 4, x, top - 4,
                         xml_escape(col_label(j)));
    }
    for (int64_t i = 0; i < T; ++i) {
      const int y = top + static_cast<int>(i) * cell;
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>\n", left - 4,
                         y + cell / 2, xml_escape(row_label(i)));
      for (int64_t j = 0; j < S; ++j) {
        const float v = m[i * S + j];
        const double x = mx > 0 && std::isfinite(v) ? v / mx : 0.0;
        const int cx = left + static_cast<int>(j) * cell;
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} {}, {} {}: {}</title></rect>\n",
                           cx, y, cell, cell, colour(x), xml_escape(o.row_axis), xml_escape(row_label(i)),
                           xml_escape(o.col_axis), xml_escape(col_label(j)), v);
        if (numbers)
          svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" dominant-baseline=\"middle\" fill=\"{}\">{:.2f}</text>\n",
                             cx + cell / 2, y + cell / 2, x > 0.55 ? "white" : "black", v);
      }
    }
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n</g>\n", left,
                       top, panel_w, panel_h);
  }
  svg += "</svg>\n";
  return svg;
}

void write_heatmap_svg(const std::string& path, const Tensor& weights, const HeatmapOptions& options) {
  write_file_atomic(path, heatmap_svg(weights, options));
}

}  // namespace attnkit::io
