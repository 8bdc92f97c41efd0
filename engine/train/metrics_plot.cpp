#include "engine/train/metrics_plot.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "engine/core/canvas.h"
#include "engine/core/chart.h"
#include "engine/core/json_text.h"
#include "engine/core/mapped_file.h"
#include "engine/core/output_file.h"
#include "engine/core/status.h"

namespace ptdp {

namespace {

using nlohmann::json;

const Rgb kTrainColour = {31, 119, 180};
const Rgb kValidColour = {230, 110, 0};
const Rgb kLrColour = {44, 160, 44};

// A record's number, or NaN for null, a missing key or another type.
double number_or_nan(const json &rec, const char *key) {
  auto it = rec.find(key);
  return it != rec.end() && it->is_number() ? it->get<double>() : NAN;
}

std::string base_name(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "25.3K", "1.3B": a parameter count short enough for a title.
std::string short_count(double n) {
  const char *unit[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (n >= 1000 && u < 4) n /= 1000, u++;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f%s" : "%.0f%s", n, unit[u]);
  return buf;
}

std::vector<std::pair<double, double>> points(const std::map<int64_t, double> &m) {
  std::vector<std::pair<double, double>> out;
  for (const auto &kv : m) out.push_back({(double)kv.first, kv.second});
  return out;
}

}  // namespace

MetricsSeries read_metrics_log(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    fail(Status::io_error, "cannot read '", path, "': ", std::strerror(errno));
  if (S_ISDIR(st.st_mode))
    fail(Status::io_error, "cannot read '", path, "': it is a directory, not a --log-json file");
  // A regular file only: a FIFO named as the log would block the reader.
  const std::string all = read_small_file(path, "the metrics log '" + path + "'");

  MetricsSeries s;
  size_t at = 0;
  for (int64_t line_no = 1; at < all.size(); line_no++) {
    size_t nl = all.find('\n', at);
    bool last_unterminated = nl == std::string::npos;
    std::string line = all.substr(at, last_unterminated ? std::string::npos : nl - at);
    at = last_unterminated ? all.size() : nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json rec;
    try {
      if (line.find('\0') != std::string::npos)  // nlohmann would stop there, accepting a part
        throw json::parse_error::create(101, line.find('\0'), "a NUL byte in the line", nullptr);
      if (const long long deep = json_too_deep_at(line.data(), line.size()); deep >= 0)
        throw json::parse_error::create(101, (size_t)deep,
                                        "nested more than " + std::to_string(kMaxJsonDepth) + " levels deep",
                                        nullptr);
      rec = json::parse(line);
    } catch (const json::exception &e) {
      if (last_unterminated) break;  // a record still being written
      fail(Status::corrupt_data, "'", path, "' line ", line_no,
           " is not JSON (expected the JSON lines that --log-json writes): ", e.what());
    }
    if (!rec.is_object())
      fail(Status::corrupt_data, "'", path, "' line ", line_no,
           " is not a JSON object (expected the JSON lines that --log-json writes)");
    const json kind = rec.value("kind", json());
    if (kind == "run" && s.num_parameters < 0) {
      double n = number_or_nan(rec, "num_parameters");
      if (std::isfinite(n)) s.num_parameters = n;
    }
    if (kind != "train" && kind != "valid") continue;
    const json it = rec.value("iteration", json());
    // (An unsigned past int64's range wrapped to a negative iteration.)
    if (!it.is_number_integer() || (it.is_number_unsigned() && it.get<uint64_t>() > (uint64_t)INT64_MAX))
      fail(Status::corrupt_data, "'", path, "' line ", line_no, ": a ", kind.get<std::string>(),
           " record without an integer \"iteration\" (a whole number up to 2^63 - 1)");
    int64_t i = it.get<int64_t>();
    double loss = number_or_nan(rec, "lm_loss");
    if (kind == "train") {
      s.train_records++;
      double lr = number_or_nan(rec, "lr");
      // erase first: a repeated iteration whose new value is null drops the old one.
      s.train_loss.erase(i), s.lr.erase(i);
      if (std::isfinite(loss)) s.train_loss[i] = loss;
      if (std::isfinite(lr)) s.lr[i] = lr;
    } else {
      s.valid_loss.erase(i);
      if (std::isfinite(loss)) s.valid_loss[i] = loss;
    }
  }
  if (s.train_records == 0)
    fail(Status::corrupt_data, "'", path,
         "' has no \"train\" records (no iteration was logged): nothing to plot");
  if (s.train_loss.empty() && s.valid_loss.empty())
    fail(Status::corrupt_data, "'", path,
         "' has no finite loss (every lm_loss is null, missing or not a number): nothing to plot");
  return s;
}

void plot_metrics_png(const std::string &log_path, const std::string &png_path) {
  // The output's rules first: a bad target fails before any work. The log is
  // this command's input: the PNG may not replace it.
  const InputFile log(log_path, "metrics log");
  output_target(png_path, "plot output", OutputKind::png);
  const MetricsSeries s = read_metrics_log(log_path);

  // Data ranges: x over every logged iteration; loss over both losses; the
  // learning rate from 0.
  int64_t it0 = INT64_MAX, it1 = INT64_MIN;
  double l0 = INFINITY, l1 = -INFINITY, lr0 = 0, lr1 = 0;
  for (const auto *m : {&s.train_loss, &s.valid_loss, &s.lr})
    if (!m->empty())
      it0 = std::min(it0, m->begin()->first), it1 = std::max(it1, m->rbegin()->first);
  for (const auto *m : {&s.train_loss, &s.valid_loss})
    for (const auto &kv : *m) l0 = std::min(l0, kv.second), l1 = std::max(l1, kv.second);
  for (const auto &kv : s.lr) lr0 = std::min(lr0, kv.second), lr1 = std::max(lr1, kv.second);
  if (!(lr1 > lr0)) lr1 = 1e-3;  // no (positive) learning rate logged: an empty panel
  // Finite values whose span, or its round ticks, are not (1.7e308 and 5): no
  // picture shows them, and one drawn anyway was a flat line under
  // overlapping labels.
  // (The ticks' positions first: a label of an infinite one is undefined.)
  const auto ticks = [&](const char *what, double lo, double hi, int target) {
    const std::vector<double> at = std::isfinite(hi - lo) ? nice_ticks(lo, hi, target) : std::vector<double>{};
    if (at.empty() || !std::isfinite(at.front()) || !std::isfinite(at.back()))
      fail(Status::corrupt_data, "'", log_path, "': the ", what, " range from ", lo, " to ", hi,
           ", wider than a plot can show");
    return labelled_ticks(lo, hi, target);
  };
  std::vector<Tick> xt = labelled_ticks((double)it0, (double)it1, 8, 1.0);
  std::vector<Tick> loss_t = ticks("losses", l0, l1, 6), lr_t = ticks("learning rates", lr0, lr1, 4);

  // Layout, at text scale 2 (10 x 14 glyphs): title, loss panel, its x
  // numbers, learning-rate panel, its x numbers and the x title.
  const int sc = 2, th = text_height(sc), width = 1000;
  const int y_title_x = 12, left = y_title_x + th + 14 +
                                   std::max(ticks_width(loss_t, sc), ticks_width(lr_t, sc)) + 10;
  Axes loss_ax, lr_ax;
  loss_ax.left = lr_ax.left = left;
  loss_ax.right = lr_ax.right = width - 30;
  loss_ax.top = 52, loss_ax.bottom = loss_ax.top + 380;
  lr_ax.top = loss_ax.bottom + 56, lr_ax.bottom = lr_ax.top + 170;
  loss_ax.x0 = lr_ax.x0 = xt.front().at, loss_ax.x1 = lr_ax.x1 = xt.back().at;
  loss_ax.y0 = loss_t.front().at, loss_ax.y1 = loss_t.back().at;
  lr_ax.y0 = lr_t.front().at, lr_ax.y1 = lr_t.back().at;
  Canvas c(width, lr_ax.bottom + 64);

  std::string title = base_name(log_path);
  if (s.num_parameters > 0) title += ": " + short_count(s.num_parameters) + " parameters";
  title += it0 == it1 ? ", iteration " + std::to_string(it0)
                      : ", iterations " + std::to_string(it0) + " to " + std::to_string(it1);
  c.text(left, 16, title, kBlack, sc);

  draw_axes(c, loss_ax, xt, loss_t, "", "lm loss", y_title_x, sc);
  draw_axes(c, lr_ax, xt, lr_t, "iteration", "learning rate", y_title_x, sc);
  std::vector<LegendEntry> legend;
  if (!s.train_loss.empty()) {
    draw_polyline(c, loss_ax, points(s.train_loss), kTrainColour, 2);
    if (s.train_loss.size() <= 60)  // a short run: show where the points are
      for (const auto &kv : s.train_loss)
        c.dot(loss_ax.px((double)kv.first), loss_ax.py(kv.second), 3, kTrainColour);
    legend.push_back({"training loss", kTrainColour, s.train_loss.size() <= 60});
  }
  if (!s.valid_loss.empty()) {
    draw_polyline(c, loss_ax, points(s.valid_loss), kValidColour, 2);
    for (const auto &kv : s.valid_loss)
      c.dot(loss_ax.px((double)kv.first), loss_ax.py(kv.second), 4, kValidColour);
    legend.push_back({"validation loss", kValidColour, true});
  }
  draw_legend(c, loss_ax, legend, sc);
  if (!s.lr.empty()) {
    draw_polyline(c, lr_ax, points(s.lr), kLrColour, 2);
    if (s.lr.size() == 1)
      c.dot(lr_ax.px((double)s.lr.begin()->first), lr_ax.py(s.lr.begin()->second), 3, kLrColour);
    draw_legend(c, lr_ax, {{"learning rate", kLrColour, false}}, sc);
  }
  write_file_atomic(png_path, encode_png(c), "plot output", OutputKind::png);
}

}  // namespace ptdp
