// The planner's plot: predicted TFLOP/s per GPU against t, p, d and b, in the
// manner of the paper's figures 13-16. Four panels side by side, x = log2 of
// the degree, y = TFLOP/s from 0 to the best; each point is the best ranked
// layout with that value (dark) joined by a line. No text, like timeline PNGs.
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/core/output_file.h"
#include "engine/core/status.h"
#include "engine/plan/plan.h"

namespace ptdp::plan {

namespace {

struct Canvas {
  int w, h;
  std::vector<unsigned char> rgb;
  Canvas(int w_, int h_) : w(w_), h(h_), rgb((size_t)w_ * h_ * 3, 255) {}
  void put(int x, int y, unsigned char r, unsigned char g, unsigned char b) {
    if (x < 0 || y < 0 || x >= w || y >= h) return;
    unsigned char *p = &rgb[((size_t)y * w + x) * 3];
    p[0] = r, p[1] = g, p[2] = b;
  }
  void line(int x0, int y0, int x1, int y1, unsigned char c) {
    int steps = std::max(std::abs(x1 - x0), std::abs(y1 - y0)) + 1;
    for (int i = 0; i <= steps; i++) {
      int x = x0 + (x1 - x0) * i / steps, y = y0 + (y1 - y0) * i / steps;
      put(x, y, c, c, c);
    }
  }
  void dot(int x, int y, unsigned char r, unsigned char g, unsigned char b) {
    for (int dy = -3; dy <= 3; dy++)
      for (int dx = -3; dx <= 3; dx++)
        if (dx * dx + dy * dy <= 9) put(x + dx, y + dy, r, g, b);
  }
};

void be32(std::string &s, uint32_t v) {
  for (int i = 3; i >= 0; i--) s += (char)((v >> (8 * i)) & 255);
}

void chunk(std::string &png, const char *type, const std::string &data) {
  be32(png, (uint32_t)data.size());
  std::string td = std::string(type, 4) + data;
  png += td;
  be32(png, (uint32_t)crc32(0, (const Bytef *)td.data(), (uInt)td.size()));
}

std::string encode_png(const Canvas &c) {
  std::string raw;
  for (int y = 0; y < c.h; y++) {
    raw += '\0';  // filter: none
    raw.append((const char *)&c.rgb[(size_t)y * c.w * 3], (size_t)c.w * 3);
  }
  uLongf len = compressBound((uLong)raw.size());
  std::string z(len, '\0');
  if (compress((Bytef *)z.data(), &len, (const Bytef *)raw.data(), (uLong)raw.size()) != Z_OK)
    fail(Status::internal, "zlib could not compress the plot");
  z.resize(len);
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  be32(ihdr, (uint32_t)c.w);
  be32(ihdr, (uint32_t)c.h);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", "");
  return png;
}

}  // namespace

void plot_plan_png(const PlanResult &res, const std::string &png_path) {
  if (res.ranked.empty()) fail(Status::invalid_config, "nothing to plot: no layout fits");
  const int pw = 300, ph = 240, margin = 30;
  Canvas c(4 * pw + margin, ph + 2 * margin);
  double top = 0;
  for (auto &P : res.ranked) top = std::max(top, P.tflops_per_gpu);
  const unsigned char hue[4][3] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44}, {214, 39, 40}};
  for (int panel = 0; panel < 4; panel++) {
    std::map<int, double> best;  // degree -> best TFLOP/s
    for (auto &P : res.ranked) {
      int x = panel == 0 ? P.layout.t : panel == 1 ? P.layout.p : panel == 2 ? P.layout.d : P.layout.b;
      best[x] = std::max(best[x], P.tflops_per_gpu);
    }
    int x0 = margin + panel * pw, y0 = margin, x1 = x0 + pw - margin, y1 = margin + ph;
    c.line(x0, y1, x1, y1, 0);
    c.line(x0, y0, x0, y1, 0);
    double lo = std::log2((double)best.begin()->first), hi = std::log2((double)best.rbegin()->first);
    int px = -1, py = -1;
    for (auto &[deg, tf] : best) {
      double f = hi > lo ? (std::log2((double)deg) - lo) / (hi - lo) : 0.5;
      int x = x0 + 10 + (int)(f * (pw - margin - 20)), y = y1 - (int)(tf / top * (ph - 10));
      if (px >= 0) c.line(px, py, x, y, 120);
      px = x, py = y;
    }
    for (auto &[deg, tf] : best) {
      double f = hi > lo ? (std::log2((double)deg) - lo) / (hi - lo) : 0.5;
      int x = x0 + 10 + (int)(f * (pw - margin - 20)), y = y1 - (int)(tf / top * (ph - 10));
      c.dot(x, y, hue[panel][0], hue[panel][1], hue[panel][2]);
    }
  }
  write_file_atomic(png_path, encode_png(c), "--plot");
}

}  // namespace ptdp::plan
