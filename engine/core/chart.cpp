#include "engine/core/chart.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

namespace ptdp {

namespace {

const Rgb kGrid = {228, 228, 228};
const Rgb kInk = {40, 40, 40};

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target, double min_step) {
  if (!(hi > lo)) {  // one value: a range around it
    double pad = std::max(std::fabs(lo) * 0.05, 1e-3);
    lo -= pad, hi += pad;
  }
  target = std::max(target, 2);
  double raw = (hi - lo) / target, p10 = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * p10;
  for (double m : {1.0, 2.0, 5.0})  // the smallest round step giving at most `target` gaps
    if (m * p10 >= raw) {
      step = m * p10;
      break;
    }
  step = std::max(step, min_step);
  std::vector<double> ticks;
  long first = (long)std::floor(lo / step + 1e-9), last = (long)std::ceil(hi / step - 1e-9);
  for (long i = first; i <= last; i++) ticks.push_back(i * step);
  if (ticks.size() < 2) ticks.push_back((last + 1) * step);
  return ticks;
}

std::string tick_label(double v, double step) {
  char buf[64];
  if (std::fabs(v) < step * 1e-6) return "0";
  step = std::fabs(step);
  if (step >= 0.01 && std::fabs(v) < 1e6) {
    int decimals = std::max(0, (int)std::ceil(-std::log10(step) - 1e-9));
    // A step of 2.5 or 0.25 needs one more digit than its power of ten.
    double scaled = step * std::pow(10.0, decimals);
    if (std::fabs(scaled - std::round(scaled)) > 1e-6) decimals++;
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
  }
  // Scientific: mantissa digits down to the step's power of ten, then tidied
  // ("1.50e-03" -> "1.5e-3").
  int digits = std::max(0, (int)std::floor(std::log10(std::fabs(v)) + 1e-9) -
                               (int)std::floor(std::log10(step) + 1e-9));
  std::snprintf(buf, sizeof buf, "%.*e", std::min(digits, 6), v);
  std::string s = buf;
  size_t e = s.find('e');
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  if (mant.find('.') != std::string::npos) {
    while (mant.back() == '0') mant.pop_back();
    if (mant.back() == '.') mant.pop_back();
  }
  bool neg = exp[0] == '-';
  size_t nz = exp.find_first_not_of("+-0");
  exp = nz == std::string::npos ? "0" : exp.substr(nz);
  return mant + "e" + (neg ? "-" : "") + exp;
}

std::vector<Tick> labelled_ticks(double lo, double hi, int target, double min_step) {
  std::vector<double> at = nice_ticks(lo, hi, target, min_step);
  double step = at.size() > 1 ? at[1] - at[0] : 1;
  std::vector<Tick> out;
  for (double v : at) out.push_back({v, tick_label(v, step)});
  return out;
}

int ticks_width(const std::vector<Tick> &ticks, int scale) {
  int w = 0;
  for (const Tick &t : ticks) w = std::max(w, text_width(t.label, scale));
  return w;
}

int Axes::px(double x) const {
  double f = x1 > x0 ? (x - x0) / (x1 - x0) : 0.5;
  return left + (int)std::lround(f * (right - left));
}

int Axes::py(double y) const {
  double f = y1 > y0 ? (y - y0) / (y1 - y0) : 0.5;
  return bottom - (int)std::lround(f * (bottom - top));
}

void draw_axes(Canvas &c, const Axes &a, const std::vector<Tick> &xt, const std::vector<Tick> &yt,
               const std::string &x_title, const std::string &y_title, int y_title_x, int scale) {
  const int mark = 3 * scale, gap = 2 * scale, th = text_height(scale);
  for (const Tick &t : xt) c.fill(a.px(t.at), a.px(t.at) + 1, a.top, a.bottom, kGrid);
  for (const Tick &t : yt) c.fill(a.left, a.right, a.py(t.at), a.py(t.at) + 1, kGrid);
  c.fill(a.left, a.right + 1, a.top, a.top + 1, kInk);  // the frame
  c.fill(a.left, a.right + 1, a.bottom, a.bottom + 1, kInk);
  c.fill(a.left, a.left + 1, a.top, a.bottom + 1, kInk);
  c.fill(a.right, a.right + 1, a.top, a.bottom + 1, kInk);
  int drawn_to = INT_MIN / 2;  // right edge of the last x label drawn
  for (const Tick &t : xt) {
    int x = a.px(t.at), w = text_width(t.label, scale);
    c.fill(x, x + 1, a.bottom, a.bottom + mark, kInk);
    int lx = std::max(0, std::min(x - w / 2, c.width() - 2 - w));  // inside the picture
    if (lx < drawn_to + 3 * scale) continue;  // would run into the previous one
    c.text(lx, a.bottom + mark + gap, t.label, kInk, scale);
    drawn_to = lx + w;
  }
  for (const Tick &t : yt) {
    int y = a.py(t.at), w = text_width(t.label, scale);
    c.fill(a.left - mark, a.left, y, y + 1, kInk);
    c.text(a.left - mark - gap - w, y - th / 2, t.label, kInk, scale);
  }
  if (!x_title.empty()) {
    int w = text_width(x_title, scale);
    c.text((a.left + a.right - w) / 2, a.bottom + mark + 2 * gap + th + 2 * scale, x_title, kInk,
           scale);
  }
  if (!y_title.empty()) {
    int w = text_width(y_title, scale);
    c.text_up(y_title_x, (a.top + a.bottom + w) / 2, y_title, kInk, scale);
  }
}

void draw_polyline(Canvas &c, const Axes &a, const std::vector<std::pair<double, double>> &pts,
                   Rgb colour, int thick) {
  for (size_t i = 0; i < pts.size(); i++) {
    int x = a.px(pts[i].first), y = a.py(pts[i].second);
    if (i == 0)
      c.line(x, y, x, y, colour, thick);
    else
      c.line(a.px(pts[i - 1].first), a.py(pts[i - 1].second), x, y, colour, thick);
  }
}

void draw_legend(Canvas &c, const Axes &a, const std::vector<LegendEntry> &entries, int scale) {
  if (entries.empty()) return;
  const int pad = 4 * scale, sample = 12 * scale, row = text_height(scale) + 4 * scale;
  int w = 0;
  for (const LegendEntry &e : entries) w = std::max(w, text_width(e.label, scale));
  w += sample + 3 * pad;
  int h = (int)entries.size() * row + 2 * pad - 4 * scale;
  int x0 = a.right - 6 * scale - w, y0 = a.top + 6 * scale;
  c.fill(x0, x0 + w, y0, y0 + h, kWhite);
  c.fill(x0, x0 + w, y0, y0 + 1, kGrid);
  c.fill(x0, x0 + w, y0 + h - 1, y0 + h, kGrid);
  c.fill(x0, x0 + 1, y0, y0 + h, kGrid);
  c.fill(x0 + w - 1, x0 + w, y0, y0 + h, kGrid);
  for (size_t i = 0; i < entries.size(); i++) {
    const LegendEntry &e = entries[i];
    int y = y0 + pad + (int)i * row, mid = y + text_height(scale) / 2;
    c.line(x0 + pad, mid, x0 + pad + sample, mid, e.colour, scale);
    if (e.dot) c.dot(x0 + pad + sample / 2, mid, 2 * scale, e.colour);
    c.text(x0 + 2 * pad + sample, y, e.label, kInk, scale);
  }
}

}  // namespace ptdp
