// The one small raster canvas behind ptdp's PNG pictures (timeline, planner
// plot, training plot): RGB pixels, rectangles, lines, dots, text in a 5x7
// bitmap font, and an 8-bit RGB PNG encoder (zlib). Everything clips to the
// picture, so callers may draw past its edges.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ptdp {

struct Rgb {
  uint8_t r, g, b;
};
inline bool operator==(Rgb a, Rgb b) { return a.r == b.r && a.g == b.g && a.b == b.b; }

constexpr Rgb kWhite = {255, 255, 255};
constexpr Rgb kBlack = {0, 0, 0};

// The font: glyphs of kGlyphW x kGlyphH pixels (letters with a descender
// reach down to row kGlyphRows - 1) in cells kCellW wide (one pixel of space
// right of each glyph), times the scale.
constexpr int kGlyphW = 5, kGlyphH = 7, kGlyphRows = 9, kCellW = 6;
// Whether the glyph of c has ink at (col, row), row < kGlyphRows; characters
// outside printable ASCII are drawn as a hollow box.
bool glyph_pixel(char c, int col, int row);
// Width and height in pixels of a line of text drawn at `scale` (the height
// without descenders: what to centre on).
int text_width(const std::string &s, int scale = 1);
inline int text_height(int scale = 1) { return kGlyphH * scale; }

class Canvas {
 public:
  Canvas(int w, int h, Rgb background = kWhite);
  int width() const { return w_; }
  int height() const { return h_; }
  const std::vector<uint8_t> &rgb() const { return px_; }  // rows of RGB triples
  Rgb at(int x, int y) const;                              // x, y inside the picture

  void put(int x, int y, Rgb c);
  // The rectangle [x0, x1) x [y0, y1).
  void fill(int x0, int x1, int y0, int y1, Rgb c);
  // A line from (x0, y0) to (x1, y1), both ends drawn, `thick` pixels wide.
  void line(int x0, int y0, int x1, int y1, Rgb c, int thick = 1);
  // A filled disc of radius r centred on (x, y).
  void dot(int x, int y, int r, Rgb c);
  // Text with its top-left corner at (x, y); returns its width. Vertical text
  // reads bottom to top (for a y-axis title) with its bottom-left at (x, y).
  int text(int x, int y, const std::string &s, Rgb c, int scale = 1);
  int text_up(int x, int y, const std::string &s, Rgb c, int scale = 1);

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

// The picture as a PNG file's bytes: 8-bit RGB, one IDAT, no filter.
std::string encode_png(const Canvas &c);

}  // namespace ptdp
