// What a training tool shows: a one-line progress display and the loss curves as an SVG.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/train/trainer.hpp"

namespace attnkit::train {

// "step 120/1000 [#####...............]  12%  loss 0.5321  1834 tok/s  ETA 0:42" (no newline): the ETA from
// this run's speed so far. Fitted to a terminal `width` columns wide (io::fit_status_line; 0: no limit).
std::string progress_line(const Progress& p, int width = 0);

// Training loss ("loss") and validation loss ("valid_loss") against "step" from metrics lines (the JSON lines
// of a trainer's --metrics), drawn as an SVG line chart in heatmap_svg's style (io/svg_heatmap.hpp): labelled
// axes with round ticks, one polyline and dots per series, a legend. Lines that are not JSON objects with a
// numeric "step" are skipped; a later line for a step already seen replaces it (a run resumed from an earlier
// checkpoint). `title` heads the chart. Non-finite values are left out.
// With a single logged step the chart is still valid SVG: one dot per series and a note that there is no curve.
std::string loss_plot_svg(const std::vector<std::string>& metrics_lines, const std::string& title);
// The distinct steps loss_plot_svg draws (with a loss or a validation loss); 1: a dot, not a curve.
int64_t loss_plot_steps(const std::vector<std::string>& metrics_lines);

}  // namespace attnkit::train
