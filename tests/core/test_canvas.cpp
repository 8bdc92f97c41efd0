// The shared canvas (engine/core/canvas.h): the hand-made font, text boxes,
// the PNG encoder read back with zlib; the chart helpers' ticks; and the
// training plot of a --log-json file (engine/train/metrics_plot.h) with its
// errors.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <set>
#include <filesystem>
#include <string>

#include "engine/core/canvas.h"
#include "engine/core/chart.h"
#include "engine/train/metrics_plot.h"
#include "tests/support/expect_error.h"
#include "tests/support/png_decode.h"
#include "tests/support/temp_dir.h"

using namespace ptdp;

namespace {

// The bounding box of the pixels that are not white: {x0, y0, x1, y1}, inclusive; x0 = -1 if none.
std::vector<int> ink_box(const Canvas &c) {
  std::vector<int> box = {-1, -1, -1, -1};
  for (int y = 0; y < c.height(); y++)
    for (int x = 0; x < c.width(); x++) {
      if (c.at(x, y) == kWhite) continue;
      if (box[0] < 0) box = {x, y, x, y};
      box[0] = std::min(box[0], x), box[1] = std::min(box[1], y);
      box[2] = std::max(box[2], x), box[3] = std::max(box[3], y);
    }
  return box;
}

}  // namespace

TEST(Font, EveryPrintableGlyphHasInkAndIsItsOwn) {
  std::set<std::string> seen;
  for (int ch = 33; ch <= 126; ch++) {
    std::string bits;
    int ink = 0;
    for (int row = 0; row < kGlyphRows; row++)
      for (int col = 0; col < kGlyphW; col++) {
        bool on = glyph_pixel((char)ch, col, row);
        bits += on ? '#' : '.';
        ink += on;
      }
    EXPECT_GT(ink, 0) << "glyph '" << (char)ch << "' is empty";
    EXPECT_TRUE(seen.insert(bits).second) << "glyph '" << (char)ch << "' repeats another";
    EXPECT_FALSE(glyph_pixel((char)ch, kGlyphW, 0));  // nothing outside the cell
    EXPECT_FALSE(glyph_pixel((char)ch, 0, kGlyphRows));
  }
  for (int row = 0; row < kGlyphRows; row++)
    for (int col = 0; col < kGlyphW; col++) EXPECT_FALSE(glyph_pixel(' ', col, row));
  EXPECT_TRUE(glyph_pixel('\x01', 0, 0));  // outside ASCII: a box
}

TEST(Font, TextSetsPixelsInItsBox) {
  Canvas c(200, 60);
  int w = c.text(10, 20, "Ab4", kBlack, 1);  // ink on each edge of the box
  EXPECT_EQ(w, text_width("Ab4", 1));
  EXPECT_EQ(w, 3 * kCellW - 1);
  EXPECT_EQ(ink_box(c), (std::vector<int>{10, 20, 10 + w - 1, 20 + kGlyphH - 1}));
  // 'A' at scale 1: the apex row ".###." and the bar row "#####".
  EXPECT_TRUE(c.at(10, 20) == kWhite);
  EXPECT_TRUE(c.at(11, 20) == kBlack);
  for (int x = 10; x < 15; x++) EXPECT_TRUE(c.at(x, 23) == kBlack);

  Canvas d(200, 60);  // scale 3 and a descender: 3x the box, the tail 2 rows lower
  w = d.text(5, 4, "gy", {200, 0, 0}, 3);
  EXPECT_EQ(w, (2 * kCellW - 1) * 3);
  EXPECT_EQ(ink_box(d), (std::vector<int>{5, 4 + 2 * 3, 5 + w - 1, 4 + kGlyphRows * 3 - 1}));
  EXPECT_TRUE(d.at(ink_box(d)[2], ink_box(d)[3]) == kWhite);  // "y" ends in ".###."
}

TEST(Font, TextUpTurnsALeft) {
  Canvas c(60, 120);
  int w = c.text_up(10, 100, "Loss", kBlack, 2);
  EXPECT_EQ(w, text_width("Loss", 2));
  // Reads upwards: x spans the glyph height, y runs from the baseline up.
  EXPECT_EQ(ink_box(c), (std::vector<int>{10, 100 - w, 10 + 2 * kGlyphH - 1, 99}));
}

TEST(Canvas, DrawsClippedAndEncodesAPng) {
  Canvas c(7, 5, {10, 20, 30});
  c.fill(-5, 2, -5, 100, {255, 0, 0});  // clipped to columns 0, 1
  c.line(6, 0, 6, 4, {0, 255, 0});
  c.put(100, 100, kBlack);  // outside: nothing
  DecodedPng d = decode_png(encode_png(c));
  ASSERT_EQ(d.w, 7u);
  ASSERT_EQ(d.h, 5u);
  for (int y = 0; y < 5; y++) {
    EXPECT_TRUE(d.is(0, y, 255, 0, 0) && d.is(1, y, 255, 0, 0));
    EXPECT_TRUE(d.is(2, y, 10, 20, 30));
    EXPECT_TRUE(d.is(6, y, 0, 255, 0));
  }
  expect_error([] { Canvas(0, 5); }, Status::invalid_argument, "picture size 0 x 5");
}

TEST(Chart, NiceTicksAndLabels) {
  std::vector<double> t = nice_ticks(2, 40, 8);
  EXPECT_EQ(t.front(), 0);
  EXPECT_EQ(t.back(), 40);
  EXPECT_EQ(t[1], 5);
  t = nice_ticks(1, 3, 8, 1.0);  // iterations: never a step under 1
  EXPECT_EQ(t, (std::vector<double>{1, 2, 3}));
  t = nice_ticks(3.27, 5.54, 6);
  EXPECT_LE(t.front(), 3.27);
  EXPECT_GE(t.back(), 5.54);
  EXPECT_GE(t.size(), 3u);
  EXPECT_GE(nice_ticks(7, 7, 5).size(), 2u);  // one value still gets a range
  EXPECT_EQ(tick_label(0, 0.5), "0");
  EXPECT_EQ(tick_label(3.5, 0.5), "3.5");
  EXPECT_EQ(tick_label(600, 100), "600");
  EXPECT_EQ(tick_label(0.06, 0.02), "0.06");
  EXPECT_EQ(tick_label(0.0015, 0.0005), "1.5e-3");
  EXPECT_EQ(tick_label(0.002, 0.0005), "2e-3");
  EXPECT_EQ(tick_label(3e6, 1e6), "3e6");
  EXPECT_EQ(tick_label(-2.5, 0.5), "-2.5");
}

namespace {

const char *kLog =
    "{\"kind\": \"run\", \"iteration\": 0, \"num_parameters\": 21504}\n"
    "{\"kind\": \"train\", \"iteration\": 2, \"lr\": 0.001, \"lm_loss\": 5.5}\n"
    "{\"kind\": \"train\", \"iteration\": 4, \"lr\": 0.002, \"lm_loss\": 5.0}\n"
    "\n"
    "{\"kind\": \"valid\", \"iteration\": 4, \"lm_loss\": 4.9}\n"
    "{\"kind\": \"train\", \"iteration\": 6, \"lr\": 0.0015, \"lm_loss\": null}\n"
    "{\"kind\": \"train\", \"iteration\": 8, \"lr\": 0.001, \"lm_loss\": 4.0}\n"
    "{\"kind\": \"valid\", \"iteration\": 8, \"lm_loss\": 4.2}\n";

}  // namespace

TEST(MetricsPlot, ReadsTheSeries) {
  TempDir dir;
  // A resumed run logs iteration 8 again (the later record wins), and a record
  // still being written (no newline yet) is left out.
  write_file(dir.path + "/m.jsonl", std::string(kLog) +
                                        "{\"kind\": \"run\", \"iteration\": 6}\n"
                                        "{\"kind\": \"train\", \"iteration\": 8, \"lr\": 0.0009, "
                                        "\"lm_loss\": 3.9}\n{\"kind\": \"train\", \"itera");
  MetricsSeries s = read_metrics_log(dir.path + "/m.jsonl");
  EXPECT_EQ(s.train_records, 5);
  EXPECT_EQ(s.num_parameters, 21504);
  EXPECT_EQ(s.train_loss, (std::map<int64_t, double>{{2, 5.5}, {4, 5.0}, {8, 3.9}}));  // 6: null
  EXPECT_EQ(s.valid_loss, (std::map<int64_t, double>{{4, 4.9}, {8, 4.2}}));
  EXPECT_EQ(s.lr.size(), 4u);
  EXPECT_EQ(s.lr.at(8), 0.0009);
}

TEST(MetricsPlot, DrawsLossesAndLearningRate) {
  TempDir dir;
  write_file(dir.path + "/m.jsonl", kLog);
  plot_metrics_png(dir.path + "/m.jsonl", dir.path + "/m.png");
  DecodedPng d = decode_png(read_file(dir.path + "/m.png"));
  ASSERT_EQ(d.w, 1000u);
  ASSERT_GT(d.h, 600u);
  EXPECT_GT(d.count(31, 119, 180), 200u);  // training loss
  EXPECT_GT(d.count(230, 110, 0), 100u);   // validation loss
  EXPECT_GT(d.count(44, 160, 44), 200u);   // learning rate
  EXPECT_GT(d.count(40, 40, 40), 2000u);   // frames, ticks and their numbers
  struct stat st;
  ASSERT_EQ(::stat((dir.path + "/m.png").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);  // written as the other writers do
}

TEST(MetricsPlot, ClearErrors) {
  TempDir dir;
  const std::string log = dir.path + "/m.jsonl", png = dir.path + "/m.png";
  write_file(log, kLog);
  expect_error([&] { plot_metrics_png(dir.path + "/none.jsonl", png); }, Status::io_error,
               "cannot read '" + dir.path + "/none.jsonl': No such file or directory");
  expect_error([&] { plot_metrics_png(dir.path, png); }, Status::io_error, "is a directory");
  // A FIFO named as the log is refused, not waited on.
  ASSERT_EQ(::mkfifo((dir.path + "/fifo.jsonl").c_str(), 0644), 0);
  expect_error([&] { plot_metrics_png(dir.path + "/fifo.jsonl", png); }, Status::io_error,
               "is not a regular file");
  write_file(dir.path + "/text.jsonl", "{\"kind\": \"run\"}\nnot json at all\n{}\n");
  expect_error([&] { plot_metrics_png(dir.path + "/text.jsonl", png); }, Status::corrupt_data,
               "line 2 is not JSON");
  write_file(dir.path + "/array.jsonl", "[1, 2]\n");
  expect_error([&] { plot_metrics_png(dir.path + "/array.jsonl", png); }, Status::corrupt_data,
               "line 1 is not a JSON object");
  write_file(dir.path + "/noiter.jsonl", "{\"kind\": \"train\", \"iteration\": \"x\"}\n");
  expect_error([&] { plot_metrics_png(dir.path + "/noiter.jsonl", png); }, Status::corrupt_data,
               "line 1: a train record without an integer \"iteration\"");
  // Past int64's range (it wrapped to a negative iteration, drawn).
  write_file(dir.path + "/huge.jsonl", "{\"kind\": \"train\", \"iteration\": 9223372036854775808, \"lm_loss\": 1}\n");
  expect_error([&] { plot_metrics_png(dir.path + "/huge.jsonl", png); }, Status::corrupt_data,
               "line 1: a train record without an integer \"iteration\" (a whole number up to 2^63 - 1)");
  write_file(dir.path + "/run_only.jsonl", "{\"kind\": \"run\", \"iteration\": 0}\n");
  expect_error([&] { plot_metrics_png(dir.path + "/run_only.jsonl", png); }, Status::corrupt_data,
               "no \"train\" records (no iteration was logged)");
  write_file(dir.path + "/empty.jsonl", "");
  expect_error([&] { plot_metrics_png(dir.path + "/empty.jsonl", png); }, Status::corrupt_data,
               "no iteration was logged");
  write_file(dir.path + "/nan.jsonl",
             "{\"kind\": \"train\", \"iteration\": 1, \"lm_loss\": null}\n");
  expect_error([&] { plot_metrics_png(dir.path + "/nan.jsonl", png); }, Status::corrupt_data,
               "no finite loss");
  // Finite values no picture can span (a flat line under overlapping labels
  // was written, exit 0); a line nested past the JSON limit is refused by line.
  write_file(dir.path + "/huge.jsonl",
             "{\"kind\": \"train\", \"iteration\": 1, \"lm_loss\": 1.7e308, \"lr\": 1e-3}\n"
             "{\"kind\": \"train\", \"iteration\": 2, \"lm_loss\": -5, \"lr\": 1e-3}\n");
  expect_error([&] { plot_metrics_png(dir.path + "/huge.jsonl", png); }, Status::corrupt_data,
               "the losses range from -5 to 1.7e+308, wider than a plot can show");
  write_file(dir.path + "/deep.jsonl", std::string(100000, '[') + std::string(100000, ']') + "\n");
  expect_error([&] { plot_metrics_png(dir.path + "/deep.jsonl", png); }, Status::corrupt_data,
               "line 1 is not JSON");
  EXPECT_FALSE(std::filesystem::exists(png));

  ::mkdir((dir.path + "/out").c_str(), 0755);
  expect_error([&] { plot_metrics_png(log, dir.path + "/out"); }, Status::invalid_argument,
               "is a directory: refusing to replace it");
  expect_error([&] { plot_metrics_png(log, "/dev/null"); }, Status::invalid_argument,
               "is a character device");
  expect_error([&] { plot_metrics_png(log, log); }, Status::invalid_argument,
               "refusing to overwrite an input");
  EXPECT_EQ(read_file(log), kLog);  // untouched
  expect_error([&] { plot_metrics_png(log, dir.path + "/no/such/dir/m.png"); }, Status::io_error,
               dir.path + "/no/such/dir/m.png");
}
