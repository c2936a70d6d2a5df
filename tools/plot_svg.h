// Charts as SVG text, written by the project itself (no plotting library or service): what
// `promptcache bench --plot OUT.svg` draws. A figure is a row of panels; a panel is either
// line series over a numeric x axis or labelled bars.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace promptcache::cli {

struct PlotSeries {
  std::string name;
  std::string color;                              // CSS colour
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
};

struct PlotPanel {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;                    // a line chart when non-empty
  std::vector<std::pair<std::string, double>> bars;  // otherwise a bar chart
  std::string note;                                  // a line under the chart
};

// The figure: `title` above the panels, side by side.
std::string RenderPlot(const std::string& title, const std::vector<PlotPanel>& panels);

}  // namespace promptcache::cli
