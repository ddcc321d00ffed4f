// Attention weights as an SVG heatmap a browser shows: one panel per [T, S] matrix (query rows,
// key columns), labelled axes, a colour scale from 0 (white) to the panel's largest value (dark blue),
// and the value printed in each cell when the matrix is small.
#pragma once
#include <string>
#include <vector>

#include "attnkit/tensor/tensor.hpp"

namespace attnkit::io {

struct HeatmapOptions {
  std::vector<std::string> row_labels;  // T labels (default: 0 .. T-1)
  std::vector<std::string> col_labels;  // S labels (default: 0 .. S-1)
  std::string row_axis = "query";
  std::string col_axis = "key";
  std::string title = "attention weights";
  int64_t max_cells = 1 << 20;  // refuse bigger inputs (the file would be useless)
};

// weights [T, S], [N, T, S] or [N, NH, T, S]; the panels are titled "n = 0" / "n = 0, head 1".
std::string heatmap_svg(const Tensor& weights, const HeatmapOptions& options);
// heatmap_svg written with write_file_atomic.
void write_heatmap_svg(const std::string& path, const Tensor& weights, const HeatmapOptions& options);

}  // namespace attnkit::io
