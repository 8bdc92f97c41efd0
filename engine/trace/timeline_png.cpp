#include "engine/trace/timeline_png.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "engine/core/canvas.h"
#include "engine/core/json_text.h"
#include "engine/core/mapped_file.h"
#include "engine/core/output_file.h"
#include "engine/core/status.h"
#include "engine/trace/timeline.h"

namespace ptdp {

namespace {

using nlohmann::json;

enum class Kind { forward, backward, weight, comm, other };

struct Event {
  int64_t tid;
  double ts, end;  // microseconds
  int microbatch;  // -1 = none
  Kind kind;
};

// Ordered so that consecutive micro-batches (neighbours on a lane) differ most.
const Rgb kPalette[12] = {
    {31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},  {148, 103, 189}, {23, 190, 207},
    {140, 86, 75},  {227, 119, 194}, {188, 189, 34}, {0, 90, 90},   {250, 200, 20},  {90, 60, 160}};
const Rgb kNoMicrobatch = {150, 150, 150};  // a forward/backward span without args.microbatch
const Rgb kOther = {215, 205, 170};         // optimizer and anything else
const Rgb kComm = {120, 120, 120};
const Rgb kSeparator = {210, 210, 210};

Rgb microbatch_colour(int mb, Kind kind) {
  Rgb c = mb < 0 ? kNoMicrobatch : kPalette[mb % 12];
  // Forward: halfway to white; backward: 35% darker; a zero-bubble schedule's
  // weight gradients: the hue itself. Told apart at a glance.
  auto light = [](uint8_t v) { return (uint8_t)(v + (255 - v) / 2); };
  auto dark = [](uint8_t v) { return (uint8_t)(v * 65 / 100); };
  if (kind == Kind::forward) return {light(c.r), light(c.g), light(c.b)};
  if (kind == Kind::weight) return c;
  return {dark(c.r), dark(c.g), dark(c.b)};
}

Kind kind_of(const std::string &cat) {
  if (cat == "forward") return Kind::forward;
  if (cat == "backward") return Kind::backward;
  if (cat == "backward_weight") return Kind::weight;
  if (cat == "send" || cat == "recv" || cat == "comm") return Kind::comm;
  return Kind::other;
}

std::vector<Event> read_events(const std::string &path) {
  // A regular file only: a FIFO named as the trace would block the reader.
  const std::string text = read_small_file(path, "the trace '" + path + "'");
  const json j = parse_json_text(text, "'" + path + "'");
  // Chrome traces come as {"traceEvents": [...]} or as a bare array of events.
  const json *list = &j;
  if (j.is_object() && j.contains("traceEvents")) list = &j["traceEvents"];
  if (!list->is_array())
    fail(Status::corrupt_data, "'", path, "' is not a Chrome trace (no traceEvents array)");

  std::vector<Event> out;
  for (size_t i = 0; i < list->size(); i++) {
    const json &e = (*list)[i];
    if (!e.is_object() || e.value("ph", json()) != "X") continue;
    const json &tid = e.value("tid", json()), &ts = e.value("ts", json());
    if (!tid.is_number() || !ts.is_number())
      fail(Status::corrupt_data, "'", path, "': X event ", i, " has no numeric tid and ts");
    // A track is a whole number (1e300 or 0.7 was converted to one, tracks
    // merged), and a span is finite (one past the double range drew nothing).
    const bool whole_tid = tid.is_number_integer()
                               ? !(tid.is_number_unsigned() && tid.get<uint64_t>() > (uint64_t)INT32_MAX)
                               : false;
    if (!whole_tid || tid.get<int64_t>() < INT32_MIN || tid.get<int64_t>() > INT32_MAX)
      fail(Status::corrupt_data, "'", path, "': X event ", i, " has tid ", json_excerpt(tid),
           ": a track is a whole number of 32 bits");
    Event ev;
    ev.tid = tid.get<int64_t>();
    ev.ts = ts.get<double>();
    const json dur = e.value("dur", json());
    const double d = dur.is_number() ? dur.get<double>() : 0.0;
    if (!std::isfinite(ev.ts) || !std::isfinite(d) || d < 0 || !std::isfinite(ev.ts + d))
      fail(Status::corrupt_data, "'", path, "': X event ", i, " has ts ", json_excerpt(ts), " and dur ",
           json_excerpt(dur), ": a span is a finite time and a duration >= 0");
    ev.end = ev.ts + d;
    json cat = e.value("cat", json());
    ev.kind = kind_of(cat.is_string() ? cat.get<std::string>() : "");
    ev.microbatch = -1;
    const json &args = e.value("args", json());
    if (args.is_object() && args.contains("microbatch") && args["microbatch"].is_number_integer())
      ev.microbatch = std::max(-1, args["microbatch"].get<int>());
    out.push_back(ev);
  }
  if (out.empty()) fail(Status::corrupt_data, "'", path, "' has no X (complete) events to draw");
  return out;
}

}  // namespace

void render_timeline_png(const std::string &trace_json_path, const std::string &png_path,
                         int width) {
  const int m = kTimelinePngMargin;
  if (width < 2 * m + 100 || width > 8192)
    fail(Status::invalid_argument, "timeline PNG width ", width, " is outside [", 2 * m + 100,
         ", 8192]");
  // The trace is this command's input: the PNG may not replace it (checked now,
  // before any work, and again when written).
  const InputFile trace(trace_json_path, "trace");
  output_target(png_path, "timeline PNG", OutputKind::png);
  std::vector<Event> events = read_events(trace_json_path);

  std::map<int64_t, int> lane_of;  // sorted tids -> lane index
  double t0 = events[0].ts, t1 = events[0].end;
  for (const Event &e : events) {
    lane_of[e.tid] = 0;
    t0 = std::min(t0, e.ts), t1 = std::max(t1, e.end);
  }
  int lanes = 0;
  for (auto &kv : lane_of) kv.second = lanes++;
  if (lanes > 1024) fail(Status::invalid_argument, "trace has ", lanes, " tracks; at most 1024 are drawn");

  // Lanes 40 px tall, thinner when there are many (but never under 8 px).
  const int lane_h = std::max(8, std::min(40, 1280 / lanes));
  const int band_h = std::max(2, lane_h / 6);
  Canvas img(width, 2 * m + lanes * lane_h);
  const int plot_w = width - 2 * m;
  const double span = t1 > t0 ? t1 - t0 : 1.0;
  auto x_of = [&](double t) { return m + (t - t0) / span * plot_w; };

  // Per lane, rows [top, top + lane_h): compute spans, a 1-px gap, the comm band,
  // a 1-px gap, then the separator on the last row.
  auto top_of = [&](const Event &e) { return m + lane_of[e.tid] * lane_h; };
  auto px_range = [&](const Event &e, int &xa, int &xb) {
    xa = (int)std::floor(x_of(e.ts));
    xb = std::max(xa + 1, (int)std::ceil(x_of(e.end)));  // a short span still gets a pixel
    xb = std::min(xb, m + plot_w);
  };
  for (int l = 1; l < lanes; l++) img.fill(m, m + plot_w, m + l * lane_h - 1, m + l * lane_h, kSeparator);

  // Neutral spans first, so forward/backward draw over an overlapping optimizer span.
  for (Kind pass : {Kind::other, Kind::forward, Kind::comm}) {
    for (const Event &e : events) {
      bool compute = e.kind == Kind::forward || e.kind == Kind::backward || e.kind == Kind::weight;
      if (pass == Kind::forward ? !compute : e.kind != pass) continue;
      int xa, xb, top = top_of(e);
      px_range(e, xa, xb);
      int band_top = top + lane_h - 2 - band_h;
      if (e.kind == Kind::comm)
        img.fill(xa, xb, band_top, band_top + band_h, kComm);
      else
        img.fill(xa, xb, top + 1, band_top - 1,
                 e.kind == Kind::other ? kOther : microbatch_colour(e.microbatch, e.kind));
    }
  }

  // A black line where a span touches the previous one of another micro-batch.
  std::vector<const Event *> compute;
  for (const Event &e : events)
    if (e.kind == Kind::forward || e.kind == Kind::backward || e.kind == Kind::weight)
      compute.push_back(&e);
  std::stable_sort(compute.begin(), compute.end(), [](const Event *a, const Event *b) {
    return a->tid != b->tid ? a->tid < b->tid : a->ts < b->ts;
  });
  for (size_t i = 1; i < compute.size(); i++) {
    const Event &prev = *compute[i - 1], &cur = *compute[i];
    if (prev.tid != cur.tid || prev.microbatch == cur.microbatch) continue;
    int pa, pb, xa, xb;
    px_range(prev, pa, pb);
    px_range(cur, xa, xb);
    if (xa > pb) continue;  // white pixels already separate them
    int top = top_of(cur);
    img.fill(xa, xa + 1, top + 1, top + lane_h - 3 - band_h, kBlack);
  }

  write_file_atomic(png_path, encode_png(img), "timeline PNG", OutputKind::png);
}

}  // namespace ptdp
