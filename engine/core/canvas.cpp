#include "engine/core/canvas.h"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "engine/core/status.h"

namespace ptdp {

int text_width(const std::string &s, int scale) {
  // The last cell's trailing space is not part of the text.
  return s.empty() ? 0 : ((int)s.size() * kCellW - (kCellW - kGlyphW)) * scale;
}

Canvas::Canvas(int w, int h, Rgb background) : w_(w), h_(h) {
  if (w <= 0 || h <= 0 || w > 16384 || h > 16384)
    fail(Status::invalid_argument, "picture size ", w, " x ", h, " is outside 1..16384");
  px_.resize((size_t)w * h * 3);
  for (size_t i = 0; i < px_.size(); i += 3)
    px_[i] = background.r, px_[i + 1] = background.g, px_[i + 2] = background.b;
}

Rgb Canvas::at(int x, int y) const {
  const uint8_t *p = &px_[((size_t)y * w_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Canvas::put(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  uint8_t *p = &px_[((size_t)y * w_ + x) * 3];
  p[0] = c.r, p[1] = c.g, p[2] = c.b;
}

void Canvas::fill(int x0, int x1, int y0, int y1, Rgb c) {
  x0 = std::max(x0, 0), y0 = std::max(y0, 0), x1 = std::min(x1, w_), y1 = std::min(y1, h_);
  for (int y = y0; y < y1; y++)
    for (int x = x0; x < x1; x++) put(x, y, c);
}

void Canvas::line(int x0, int y0, int x1, int y1, Rgb c, int thick) {
  // Enough steps that consecutive points touch; each point is a small square.
  int steps = std::max(std::abs(x1 - x0), std::abs(y1 - y0));
  int lo = -(thick - 1) / 2, hi = thick / 2;
  for (int i = 0; i <= steps; i++) {
    int x = steps ? x0 + (int)((int64_t)(x1 - x0) * i / steps) : x0;
    int y = steps ? y0 + (int)((int64_t)(y1 - y0) * i / steps) : y0;
    fill(x + lo, x + hi + 1, y + lo, y + hi + 1, c);
  }
}

void Canvas::dot(int x, int y, int r, Rgb c) {
  for (int dy = -r; dy <= r; dy++)
    for (int dx = -r; dx <= r; dx++)
      if (dx * dx + dy * dy <= r * r + r / 2) put(x + dx, y + dy, c);
}

int Canvas::text(int x, int y, const std::string &s, Rgb c, int scale) {
  for (size_t i = 0; i < s.size(); i++)
    for (int row = 0; row < kGlyphRows; row++)
      for (int col = 0; col < kGlyphW; col++)
        if (glyph_pixel(s[i], col, row)) {
          int gx = x + ((int)i * kCellW + col) * scale, gy = y + row * scale;
          fill(gx, gx + scale, gy, gy + scale, c);
        }
  return text_width(s, scale);
}

int Canvas::text_up(int x, int y, const std::string &s, Rgb c, int scale) {
  // Turned a quarter left: the glyph's column runs up, its row runs right.
  for (size_t i = 0; i < s.size(); i++)
    for (int row = 0; row < kGlyphRows; row++)
      for (int col = 0; col < kGlyphW; col++)
        if (glyph_pixel(s[i], col, row)) {
          int gx = x + row * scale, gy = y - ((int)i * kCellW + col + 1) * scale;
          fill(gx, gx + scale, gy, gy + scale, c);
        }
  return text_width(s, scale);
}

namespace {

void put_be32(std::string &s, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) s.push_back((char)((v >> shift) & 0xff));
}

void put_chunk(std::string &png, const char *type, const std::string &data) {
  std::string body = std::string(type, 4) + data;
  put_be32(png, (uint32_t)data.size());
  png += body;
  put_be32(png, (uint32_t)crc32(0, (const Bytef *)body.data(), (uInt)body.size()));
}

}  // namespace

// Filter 0 (none) on every row: simple, and small enough for pictures that
// are mostly flat colour.
std::string encode_png(const Canvas &c) {
  size_t row = (size_t)c.width() * 3;
  std::vector<uint8_t> raw((row + 1) * c.height());
  for (int y = 0; y < c.height(); y++) {
    raw[y * (row + 1)] = 0;
    std::memcpy(&raw[y * (row + 1) + 1], &c.rgb()[y * row], row);
  }
  uLongf zlen = compressBound((uLong)raw.size());
  std::string z(zlen, '\0');
  int rc = compress2((Bytef *)&z[0], &zlen, raw.data(), (uLong)raw.size(), Z_DEFAULT_COMPRESSION);
  if (rc != Z_OK) fail(Status::internal, "zlib compress2 failed (", rc, ")");
  z.resize(zlen);

  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_be32(ihdr, (uint32_t)c.width());
  put_be32(ihdr, (uint32_t)c.height());
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // depth 8, RGB, deflate, filter 0, no interlace
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", "");
  return png;
}

}  // namespace ptdp
