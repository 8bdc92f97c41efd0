// Line charts on a Canvas: tick positions at round numbers, their labels, a
// framed plot area with grid, tick numbers and axis titles, polylines and a
// legend. Shared by the training plot (`ptdp plot`) and the planner's plot.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/core/canvas.h"

namespace ptdp {

// Ticks 1, 2 or 5 times a power of ten apart (never under min_step), about
// `target` of them, the first <= lo and the last >= hi. lo == hi gets a small
// range around it.
std::vector<double> nice_ticks(double lo, double hi, int target, double min_step = 0);
// A tick's number: enough digits to tell ticks `step` apart ("0.25", "600"),
// scientific below 0.01 and from 1e6 on ("1.5e-3", "2e6"); 0 is "0".
std::string tick_label(double v, double step);

struct Tick {
  double at;  // data coordinate
  std::string label;
};
// nice_ticks with their labels.
std::vector<Tick> labelled_ticks(double lo, double hi, int target, double min_step = 0);
// The widest label, in pixels at `scale`.
int ticks_width(const std::vector<Tick> &ticks, int scale);

// A plot area: the pixel box [left, right] x [top, bottom] shows the data
// range [x0, x1] x [y0, y1] (y up).
struct Axes {
  int left = 0, top = 0, right = 0, bottom = 0;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  int px(double x) const;
  int py(double y) const;
};

// Grid lines at the ticks, the frame, tick marks with their numbers (x
// below, y left; an x label that would overlap the previous one is left
// out), the x title under the numbers and the y title up the left, its left
// edge at y_title_x. Empty titles are not drawn.
void draw_axes(Canvas &c, const Axes &a, const std::vector<Tick> &xt, const std::vector<Tick> &yt,
               const std::string &x_title, const std::string &y_title, int y_title_x, int scale);

// Joins the points (data coordinates, in order) inside the plot area.
void draw_polyline(Canvas &c, const Axes &a, const std::vector<std::pair<double, double>> &pts,
                   Rgb colour, int thick);

struct LegendEntry {
  std::string label;
  Rgb colour;
  bool dot;  // a dot on the sample line (a series drawn with markers)
};
// A boxed legend in the plot area's top-right corner.
void draw_legend(Canvas &c, const Axes &a, const std::vector<LegendEntry> &entries, int scale);

}  // namespace ptdp
