// Per-rank timelines: recording, the Chrome trace JSON, and the PNG rendering
// (decoded here with zlib to look at pixels).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/core/status.h"
#include "engine/trace/timeline.h"
#include "engine/trace/timeline_png.h"
#include "tests/support/expect_error.h"

using namespace ptdp;
using nlohmann::json;

namespace {

std::string temp_dir() {
  static std::string dir = [] {
    std::string t = ::testing::TempDir() + "ptdp_timeline_XXXXXX";
    if (!mkdtemp(&t[0])) std::abort();
    return t;
  }();
  return dir;
}

std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

const int64_t kOrigin = 5'000'000;
int64_t us(double t) { return kOrigin + (int64_t)(t * 1000); }  // trace microseconds -> ns

Span compute(bool fwd, double t0, double t1, int mb) {
  return Span{fwd ? "F" : "B", fwd ? "forward" : "backward", us(t0), us(t1), mb, 0, "", -1};
}

// Four ranks over [0, 2000] us, laid out so the tests know what lies where.
std::string write_four_rank_trace() {
  std::vector<Timeline> tl(4);
  for (auto &t : tl) t.set_enabled(true);
  tl[0].add(compute(true, 0, 400, 1));
  tl[0].add(compute(true, 800, 1200, 0));  // covers the middle
  tl[1].add(compute(true, 0, 400, 0));     // lane 1 is empty in the middle
  tl[1].add(compute(false, 1600, 2000, 0));
  tl[2].add(compute(true, 0, 1000, 2));    // same micro-batch: F light, B dark
  tl[2].add(compute(false, 1000, 2000, 2));
  tl[3].add(compute(true, 0, 1000, 0));    // touching spans of two micro-batches
  tl[3].add(compute(true, 1000, 2000, 1));
  tl[3].add(Span{"send_forward", "send", us(0), us(2000), 0, 0, "pp", 4096});
  std::vector<RankTimeline> ranks;
  for (int r = 0; r < 4; r++) ranks.push_back({r, "tp 0, pp " + std::to_string(r) + ", dp 0", &tl[r]});
  std::string path = temp_dir() + "/four.json";
  write_chrome_trace(path, ranks, kOrigin);
  return path;
}

uint32_t be32(const std::string &s, size_t at) {
  return (uint32_t)(uint8_t)s[at] << 24 | (uint32_t)(uint8_t)s[at + 1] << 16 |
         (uint32_t)(uint8_t)s[at + 2] << 8 | (uint32_t)(uint8_t)s[at + 3];
}

struct Decoded {
  uint32_t w = 0, h = 0;
  std::vector<uint8_t> raw;  // rows of filter byte + RGB
  int sum(int x, int y) const {
    const uint8_t *p = &raw[(size_t)y * (1 + 3 * w) + 1 + 3 * x];
    return p[0] + p[1] + p[2];
  }
};

Decoded decode_png(const std::string &png) {
  Decoded d;
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(png.substr(12, 4), "IHDR");
  d.w = be32(png, 16);
  d.h = be32(png, 20);
  EXPECT_EQ(png[24], 8);  // bit depth
  EXPECT_EQ(png[25], 2);  // RGB
  std::string idat;
  for (size_t at = 8; at + 8 <= png.size();) {
    uint32_t len = be32(png, at);
    std::string type = png.substr(at + 4, 4);
    std::string body = png.substr(at + 4, 4 + len);
    EXPECT_EQ(be32(png, at + 8 + len), (uint32_t)crc32(0, (const Bytef *)body.data(), (uInt)body.size()))
        << type;
    if (type == "IDAT") idat += png.substr(at + 8, len);
    at += 12 + len;
  }
  d.raw.resize((size_t)d.h * (1 + 3 * d.w));
  uLongf n = d.raw.size();
  EXPECT_EQ(uncompress(d.raw.data(), &n, (const Bytef *)idat.data(), idat.size()), Z_OK);
  EXPECT_EQ(n, d.raw.size());
  return d;
}

}  // namespace

TEST(Timeline, RecordsOnlyWhenEnabled) {
  Timeline t;
  EXPECT_FALSE(t.enabled());
  t.add(compute(true, 0, 1, 0));
  EXPECT_TRUE(t.spans().empty());
  t.set_enabled(true);
  int64_t a = Timeline::now_ns(), b = Timeline::now_ns();
  EXPECT_LE(a, b);
  t.add(Span{"F", "forward", a, b, 3, 1, "", -1});
  ASSERT_EQ(t.spans().size(), 1u);
  EXPECT_EQ(t.spans()[0].microbatch, 3);
  t.clear();
  EXPECT_TRUE(t.spans().empty());
}

TEST(Timeline, ChromeTraceJson) {
  Timeline r0, r1;
  r0.set_enabled(true);
  r1.set_enabled(true);
  r0.add(compute(true, 1.5, 10, 0));
  r0.add(compute(false, 10, 30, 0));
  r1.add(Span{"all_reduce \"dp\"", "comm", us(40), us(42.25), -1, -1, "dp", 1 << 20});
  std::string path = temp_dir() + "/trace.json";
  write_chrome_trace(path, {{0, "tp 0, pp 0, dp 0", &r0}, {1, "tp 0, pp 1, dp 0", &r1}}, kOrigin);

  json j = json::parse(read_file(path));
  std::vector<json> x;
  std::set<std::string> names;
  for (const json &e : j.at("traceEvents")) {
    if (e.at("ph") == "X") x.push_back(e);
    if (e.at("ph") == "M" && e.at("name") == "thread_name") names.insert(e.at("args").at("name").get<std::string>());
  }
  ASSERT_EQ(x.size(), 3u);
  EXPECT_EQ(names, (std::set<std::string>{"rank 0 (tp 0, pp 0, dp 0)", "rank 1 (tp 0, pp 1, dp 0)"}));
  EXPECT_EQ(x[0].at("tid"), 0);
  EXPECT_EQ(x[0].at("pid"), 0);
  EXPECT_EQ(x[0].at("cat"), "forward");
  EXPECT_DOUBLE_EQ(x[0].at("ts").get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(x[0].at("dur").get<double>(), 8.5);
  EXPECT_EQ(x[0].at("args").at("microbatch"), 0);
  EXPECT_EQ(x[0].at("args").at("chunk"), 0);
  EXPECT_FALSE(x[0].at("args").contains("bytes"));
  EXPECT_EQ(x[1].at("name"), "B");
  EXPECT_EQ(x[2].at("tid"), 1);
  EXPECT_EQ(x[2].at("name"), "all_reduce \"dp\"");  // escaped and back
  EXPECT_DOUBLE_EQ(x[2].at("ts").get<double>(), 40);
  EXPECT_DOUBLE_EQ(x[2].at("dur").get<double>(), 2.25);
  EXPECT_EQ(x[2].at("args").at("group"), "dp");
  EXPECT_EQ(x[2].at("args").at("bytes"), 1 << 20);
  EXPECT_FALSE(x[2].at("args").contains("microbatch"));
}

TEST(Timeline, UnwritablePathNamesIt) {
  Timeline t;
  std::string bad = temp_dir() + "/no/such/dir/trace.json";
  expect_error([&] { write_chrome_trace(bad, {{0, "", &t}}, 0); }, Status::io_error, bad);
}

TEST(TimelinePng, RendersLanesAndColours) {
  std::string png_path = temp_dir() + "/four.png";
  render_timeline_png(write_four_rank_trace(), png_path, 1600);
  Decoded d = decode_png(read_file(png_path));
  ASSERT_EQ(d.w, 1600u);
  const int m = kTimelinePngMargin, lane_h = ((int)d.h - 2 * m) / 4;
  ASSERT_EQ((int)d.h, 2 * m + 4 * lane_h);
  auto x_at = [&](double t) { return m + (int)(t / 2000 * (1600 - 2 * m)); };
  auto y_in = [&](int lane) { return m + lane * lane_h + lane_h / 3; };  // the compute rows
  const int white = 3 * 255;

  EXPECT_EQ(d.sum(5, 5), white);                      // margin
  EXPECT_LT(d.sum(x_at(1000), y_in(0)), white);       // lane 0: forward span in the middle
  EXPECT_EQ(d.sum(x_at(1000), y_in(1)), white);       // lane 1: nothing in the middle
  EXPECT_LT(d.sum(x_at(1500), y_in(2)), d.sum(x_at(500), y_in(2)));  // B darker than F
  EXPECT_EQ(d.sum(x_at(1000), y_in(3)), 0);           // black border between micro-batches
  EXPECT_GT(d.sum(x_at(1000) + 5, y_in(3)), 0);
  EXPECT_EQ(d.sum(x_at(1000), m + 3 * lane_h + lane_h - 5), 3 * 120);  // lane 3's comm band
  EXPECT_EQ(d.sum(x_at(1000), m + 2 * lane_h + lane_h - 5), white);    // lane 2 has none
}

TEST(TimelinePng, ClearErrors) {
  std::string dir = temp_dir();
  // A FIFO named as the trace is refused, not waited on.
  ASSERT_EQ(::mkfifo((dir + "/fifo.json").c_str(), 0644), 0);
  expect_error([&] { render_timeline_png(dir + "/fifo.json", dir + "/f.png"); }, Status::io_error,
               "is not a regular file");
  write_text(dir + "/bad.json", "{\"traceEvents\": [ {\"ph\": \"X\", ");
  expect_error([&] { render_timeline_png(dir + "/bad.json", dir + "/bad.png"); }, Status::corrupt_data,
               "is not valid JSON");
  write_text(dir + "/empty.json", "{\"traceEvents\": [{\"ph\": \"M\", \"name\": \"thread_name\"}]}");
  expect_error([&] { render_timeline_png(dir + "/empty.json", dir + "/e.png"); }, Status::corrupt_data,
               "no X");
  write_text(dir + "/notid.json", "[{\"ph\": \"X\", \"ts\": 1, \"dur\": 2}]");
  expect_error([&] { render_timeline_png(dir + "/notid.json", dir + "/e.png"); }, Status::corrupt_data,
               "numeric tid");
  // A track that is no whole number (tracks merged) and a span past the
  // double range (nothing drawn) are refused: both drew a wrong picture.
  for (const char *tid : {"1e300", "0.7", "4294967296", "-9223372036854775808"}) {
    write_text(dir + "/tid.json", std::string("[{\"ph\": \"X\", \"tid\": ") + tid + ", \"ts\": 1, \"dur\": 2}]");
    expect_error([&] { render_timeline_png(dir + "/tid.json", dir + "/e.png"); }, Status::corrupt_data,
                 "a track is a whole number of 32 bits");
  }
  for (const char *span : {"\"ts\": 1e308, \"dur\": 1e308", "\"ts\": 1, \"dur\": -2"}) {
    write_text(dir + "/span.json", std::string("[{\"ph\": \"X\", \"tid\": 0, ") + span + "}]");
    expect_error([&] { render_timeline_png(dir + "/span.json", dir + "/e.png"); }, Status::corrupt_data,
                 "a span is a finite time and a duration >= 0");
  }
  expect_error([&] { render_timeline_png(dir + "/missing.json", dir + "/e.png"); }, Status::io_error,
               dir + "/missing.json");
  std::string trace = write_four_rank_trace(), bad_png = dir + "/no/such/dir/out.png";
  expect_error([&] { render_timeline_png(trace, bad_png); }, Status::io_error, bad_png);
  expect_error([&] { render_timeline_png(trace, dir + "/w.png", 10); }, Status::invalid_argument, "width");
  // The PNG never replaces the trace it is drawn from, however it is spelled.
  const std::string before = read_file(trace), link = dir + "/trace_link.json";
  ASSERT_EQ(::symlink(trace.c_str(), link.c_str()), 0);
  for (const std::string &out : {trace, link})
    expect_error([&] { render_timeline_png(trace, out); }, Status::invalid_argument,
                 "is the trace '" + trace + "' this run reads");
  EXPECT_EQ(read_file(trace), before);
}
