// The planner's plot: predicted TFLOP/s per GPU against t, p, d and b, in the
// manner of the paper's figures 13-16. Four panels side by side, x = the
// degree on a log2 axis (a tick numbered at each degree that fits), y =
// TFLOP/s per GPU from 0, the same scale in every panel; each point is the
// best ranked layout with that value, joined by a grey line.
#include <algorithm>
#include <cmath>
#include <map>

#include "engine/core/canvas.h"
#include "engine/core/chart.h"
#include "engine/core/output_file.h"
#include "engine/core/status.h"
#include "engine/plan/plan.h"

namespace ptdp::plan {

void plot_plan_png(const PlanResult &res, const std::string &png_path) {
  if (res.ranked.empty()) fail(Status::invalid_config, "nothing to plot: no layout fits");
  double top = 0;
  for (auto &P : res.ranked) top = std::max(top, P.tflops_per_gpu);
  const std::vector<Tick> yt = labelled_ticks(0, top, 5);

  // Text at scale 2; panels pw x ph pixels, each with its y numbers on its left.
  const int sc = 2, th = text_height(sc), pw = 290, ph = 300, yw = ticks_width(yt, sc);
  const int y_title_x = 12, first_left = y_title_x + th + 14 + yw + 10, step = pw + yw + 34;
  Canvas c(first_left + 3 * step + pw + 24, 56 + ph + 64);

  const Layout &best = res.ranked.front().layout;
  c.text(first_left, 16,
         "predicted TFLOP/s per GPU on " + res.machine.name + ", " +
             std::to_string((int64_t)best.t * best.p * best.d) +
             " GPUs: the best layout for each value",
         kBlack, sc);

  const char *x_title[4] = {"tensor-parallel size t", "pipeline-parallel size p",
                            "data-parallel size d", "micro-batch size b"};
  const Rgb hue[4] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}};
  for (int panel = 0; panel < 4; panel++) {
    std::map<int, double> best_at;  // degree -> best TFLOP/s
    for (auto &P : res.ranked) {
      const Layout &L = P.layout;
      int x = panel == 0 ? L.t : panel == 1 ? L.p : panel == 2 ? L.d : L.b;
      best_at[x] = std::max(best_at[x], P.tflops_per_gpu);
    }
    Axes a;
    a.left = first_left + panel * step, a.right = a.left + pw;
    a.top = 56, a.bottom = a.top + ph;
    double lo = std::log2((double)best_at.begin()->first),
           hi = std::log2((double)best_at.rbegin()->first);
    double pad = hi > lo ? 0.06 * (hi - lo) : 1;  // keep the end points off the frame
    a.x0 = lo - pad, a.x1 = hi + pad;
    a.y0 = yt.front().at, a.y1 = yt.back().at;
    std::vector<Tick> xt;
    std::vector<std::pair<double, double>> pts;
    for (auto &[deg, tf] : best_at) {
      xt.push_back({std::log2((double)deg), std::to_string(deg)});
      pts.push_back({std::log2((double)deg), tf});
    }
    draw_axes(c, a, xt, yt, x_title[panel], panel == 0 ? "TFLOP/s per GPU" : "", y_title_x, sc);
    draw_polyline(c, a, pts, {120, 120, 120}, 1);
    for (auto &[x, y] : pts) c.dot(a.px(x), a.py(y), 4, hue[panel]);
  }
  write_file_atomic(png_path, encode_png(c), "--plot", OutputKind::png);
}

}  // namespace ptdp::plan
