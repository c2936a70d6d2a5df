#include "tools/plot_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace promptcache::cli {
namespace {

constexpr double kPanelW = 440, kPanelH = 320;
constexpr double kLeft = 62, kRight = 14, kTop = 40, kBottom = 78;

std::string Escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

// A round upper bound for an axis whose quarters are round too, close above v.
double NiceMax(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (const double m : {1.0, 1.2, 1.6, 2.0, 2.4, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0}) {
    if (v <= m * p * (1 + 1e-9)) return m * p;
  }
  return 10 * p;
}

std::string Tick(double v) {
  char buf[32];
  if (v >= 10000) {
    std::snprintf(buf, sizeof(buf), "%.0fk", v / 1000);
  } else if (v == std::floor(v)) {
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  }
  return buf;
}

std::string Text(double x, double y, const std::string& s, const char* anchor = "start",
                 const char* extra = "") {
  return "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" text-anchor=\"" + anchor + "\"" + extra +
         ">" + Escape(s) + "</text>\n";
}

// The y grid and labels of a panel whose plot area starts at (x0, y0), w by h.
std::string Grid(double x0, double y0, double w, double h, double y_max) {
  std::string out;
  for (int k = 0; k <= 4; ++k) {
    const double y = y0 + h * (1 - k / 4.0);
    out += "<line class=\"grid\" x1=\"" + Num(x0) + "\" x2=\"" + Num(x0 + w) + "\" y1=\"" + Num(y) +
           "\" y2=\"" + Num(y) + "\"/>\n";
    out += Text(x0 - 6, y + 4, Tick(y_max * k / 4), "end");
  }
  return out;
}

std::string Lines(const PlotPanel& p, double x0, double y0, double w, double h) {
  double x_max = 0, y_max = 0;
  for (const PlotSeries& s : p.series) {
    for (const auto& [x, y] : s.points) {
      x_max = std::max(x_max, x);
      y_max = std::max(y_max, y);
    }
  }
  x_max = NiceMax(x_max);
  y_max = NiceMax(y_max);
  std::string out = Grid(x0, y0, w, h, y_max);
  for (int k = 0; k <= 4; ++k) {
    out += Text(x0 + w * k / 4, y0 + h + 16, Tick(x_max * k / 4), "middle");
  }
  double legend_y = y0 + h + 48;
  double legend_x = x0;
  for (const PlotSeries& s : p.series) {
    std::string pts;
    for (const auto& [x, y] : s.points) {
      pts += Num(x0 + w * x / x_max) + "," + Num(y0 + h * (1 - y / y_max)) + " ";
    }
    out += "<polyline fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"2.5\" points=\"" +
           pts + "\"/>\n";
    for (const auto& [x, y] : s.points) {
      out += "<circle r=\"3\" fill=\"" + s.color + "\" cx=\"" + Num(x0 + w * x / x_max) +
             "\" cy=\"" + Num(y0 + h * (1 - y / y_max)) + "\"/>\n";
    }
    out += "<rect x=\"" + Num(legend_x) + "\" y=\"" + Num(legend_y - 9) +
           "\" width=\"10\" height=\"10\" fill=\"" + s.color + "\"/>\n";
    out += Text(legend_x + 14, legend_y, s.name);
    legend_x += 20 + 6.5 * s.name.size();
  }
  return out;
}

std::string Bars(const PlotPanel& p, double x0, double y0, double w, double h) {
  double y_max = 0;
  for (const auto& [label, v] : p.bars) y_max = std::max(y_max, v);
  y_max = NiceMax(y_max);
  std::string out = Grid(x0, y0, w, h, y_max);
  const double bw = w / std::max<size_t>(1, p.bars.size());
  for (size_t i = 0; i < p.bars.size(); ++i) {
    const double bh = h * p.bars[i].second / y_max, x = x0 + bw * i;
    out += "<rect fill=\"#1f78c8\" x=\"" + Num(x + bw * 0.2) + "\" y=\"" + Num(y0 + h - bh) +
           "\" width=\"" + Num(bw * 0.6) + "\" height=\"" + Num(bh) + "\"/>\n";
    out += Text(x + bw / 2, y0 + h - bh - 4, Tick(p.bars[i].second), "middle");
    out += Text(x + bw / 2, y0 + h + 16, p.bars[i].first, "middle");
  }
  return out;
}

}  // namespace

std::string RenderPlot(const std::string& title, const std::vector<PlotPanel>& panels) {
  const double width = kPanelW * std::max<size_t>(1, panels.size()), height = kPanelH + 30;
  std::string out = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Num(width) +
                    "\" height=\"" + Num(height) + "\" viewBox=\"0 0 " + Num(width) + " " +
                    Num(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  out += "<title>" + Escape(title) + "</title>\n";
  out +=
      "<style>text{fill:#1d2126}.grid{stroke:#d3d8de;stroke-width:1}"
      ".title{font-size:13px;font-weight:bold}</style>\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";
  out += Text(12, 20, title, "start", " class=\"title\"");
  for (size_t i = 0; i < panels.size(); ++i) {
    const PlotPanel& p = panels[i];
    const double px = kPanelW * i, py = 30;
    const double x0 = px + kLeft, y0 = py + kTop, w = kPanelW - kLeft - kRight,
                 h = kPanelH - kTop - kBottom;
    out += "<g>\n" + Text(px + kLeft, py + 18, p.title, "start", " class=\"title\"");
    out += Text(px + 14, y0 - 10, p.y_label);
    out += p.series.empty() ? Bars(p, x0, y0, w, h) : Lines(p, x0, y0, w, h);
    out += Text(x0 + w / 2, y0 + h + 32, p.x_label, "middle");
    if (!p.note.empty()) out += Text(x0, y0 + h + 66, p.note);
    out += "</g>\n";
  }
  return out + "</svg>\n";
}

}  // namespace promptcache::cli
