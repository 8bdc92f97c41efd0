// Reads back the PNGs ptdp writes (8-bit RGB, filter 0 rows) with zlib alone:
// signature, IHDR, each chunk's CRC, the pixels. For tests.
#pragma once
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

struct DecodedPng {
  uint32_t w = 0, h = 0;
  std::vector<uint8_t> rgb;  // rows of RGB triples (filter bytes removed)
  const uint8_t *at(int x, int y) const { return &rgb[((size_t)y * w + x) * 3]; }
  bool white(int x, int y) const {
    return at(x, y)[0] == 255 && at(x, y)[1] == 255 && at(x, y)[2] == 255;
  }
  bool is(int x, int y, uint8_t r, uint8_t g, uint8_t b) const {
    return at(x, y)[0] == r && at(x, y)[1] == g && at(x, y)[2] == b;
  }
  size_t count(uint8_t r, uint8_t g, uint8_t b) const {
    size_t n = 0;
    for (size_t i = 0; i < rgb.size(); i += 3)
      n += rgb[i] == r && rgb[i + 1] == g && rgb[i + 2] == b;
    return n;
  }
};

inline uint32_t png_be32(const std::string &s, size_t at) {
  return (uint32_t)(uint8_t)s[at] << 24 | (uint32_t)(uint8_t)s[at + 1] << 16 |
         (uint32_t)(uint8_t)s[at + 2] << 8 | (uint32_t)(uint8_t)s[at + 3];
}

// Adds a test failure (and returns what it could) when the bytes are not such a PNG.
inline DecodedPng decode_png(const std::string &png) {
  DecodedPng d;
  if (png.size() < 33 || png.substr(0, 8) != std::string("\x89PNG\r\n\x1a\n", 8) ||
      png.substr(12, 4) != "IHDR") {
    ADD_FAILURE() << "not a PNG (" << png.size() << " bytes)";
    return d;
  }
  d.w = png_be32(png, 16);
  d.h = png_be32(png, 20);
  EXPECT_EQ(png[24], 8);  // bit depth
  EXPECT_EQ(png[25], 2);  // RGB
  std::string idat;
  bool end = false;
  for (size_t at = 8; at + 12 <= png.size() && !end;) {
    uint32_t len = png_be32(png, at);
    std::string type = png.substr(at + 4, 4), body = png.substr(at + 4, 4 + len);
    EXPECT_EQ(png_be32(png, at + 8 + len),
              (uint32_t)crc32(0, (const Bytef *)body.data(), (uInt)body.size()))
        << type;
    if (type == "IDAT") idat += png.substr(at + 8, len);
    end = type == "IEND";
    at += 12 + len;
  }
  EXPECT_TRUE(end) << "no IEND chunk";
  std::vector<uint8_t> raw((size_t)d.h * (1 + 3 * d.w));
  uLongf n = raw.size();
  EXPECT_EQ(uncompress(raw.data(), &n, (const Bytef *)idat.data(), idat.size()), Z_OK);
  EXPECT_EQ(n, raw.size());
  d.rgb.resize((size_t)d.w * d.h * 3);
  for (uint32_t y = 0; y < d.h; y++) {
    EXPECT_EQ(raw[y * (1 + 3 * d.w)], 0) << "row " << y << " filter";
    std::copy(&raw[y * (1 + 3 * d.w) + 1], &raw[y * (1 + 3 * d.w) + 1 + 3 * d.w],
              &d.rgb[y * 3 * d.w]);
  }
  return d;
}
