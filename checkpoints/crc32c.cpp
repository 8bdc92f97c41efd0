// CRC32C two ways: a slicing-by-8 table version that runs anywhere, and the
// SSE4.2 crc32 instruction on x86-64 CPUs that have it (checked at run time,
// so one binary works on every machine). Both give the same bits.
#include "checkpoints/crc32c.h"

#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ptdp {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // Castagnoli, bit-reversed

// t[0][b] is the CRC of the byte b; t[k][b] that of b followed by k zero bytes.
// With them 8 input bytes fold into the CRC with 8 independent lookups.
struct Tables {
  uint32_t t[8][256];
  Tables() {
    for (uint32_t b = 0; b < 256; b++) {
      uint32_t c = b;
      for (int i = 0; i < 8; i++) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
      t[0][b] = c;
    }
    for (int k = 1; k < 8; k++)
      for (int b = 0; b < 256; b++) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
};

const Tables &tables() {
  static const Tables t;  // built once, thread-safe (C++11 static init)
  return t;
}

#if defined(__x86_64__)
// Compiled for SSE4.2 alone, so the rest of the build needs no -msse4.2.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint64_t c = ~crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // unaligned-safe load
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = (uint32_t)c;
  for (; n > 0; p++, n--) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}
#endif

}  // namespace

uint32_t crc32c_table(uint32_t crc, const void *data, size_t n) {
  const auto &t = tables().t;
  const unsigned char *p = static_cast<const unsigned char *>(data);
  crc = ~crc;
  // Bytes are assembled by hand, so this is right on any endianness.
  for (; n >= 8; p += 8, n -= 8) {
    uint32_t lo = crc ^ (p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
          t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]];
  }
  for (; n > 0; p++, n--) crc = (crc >> 8) ^ t[0][(crc ^ *p) & 0xff];
  return ~crc;
}

bool crc32c_hardware() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
#else
  return false;
#endif
}

uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
#if defined(__x86_64__)
  if (crc32c_hardware()) return crc32c_sse42(crc, data, n);
#endif
  return crc32c_table(crc, data, n);
}

}  // namespace ptdp
