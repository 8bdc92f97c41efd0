// Element types of tensors and messages, and the 16-bit formats of mixed
// precision (ARCHITECTURE §3): bfloat16 (8-bit exponent, 7-bit mantissa) and
// IEEE binary16 (5-bit exponent, 10-bit mantissa, max 65504). Conversions from
// float round to nearest, ties to even, as the GPU's __float2bfloat16_rn and
// __float2half_rn do, so both backends give the same bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ptdp {

enum class DType : uint8_t { f32, f64, bf16, f16 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::bf16:
    case DType::f16: return 2;
    default: return 4;
  }
}
inline const char *dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    default: return "f32";
  }
}
// "f32"/"fp32"/"float32", "bf16"/"bfloat16", "f16"/"fp16"/"float16", "f64"/"fp64";
// false for anything else.
bool parse_dtype(const std::string &s, DType *out);

inline uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// ---- bfloat16: the top half of a float ----------------------------------------
inline uint16_t float_to_bf16(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (overflow goes to inf)
  return (uint16_t)(u >> 16);
}
inline float bf16_to_float(uint16_t h) { return bits_float((uint32_t)h << 16); }

// ---- IEEE binary16 -------------------------------------------------------------
inline uint16_t float_to_f16(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // Below the smallest normal (2^-14): a multiple of 2^-24, rounded to even.
    // Adding 0.5 makes the FPU round the mantissa at that position for us.
    const float r = bits_float(a) + 0.5f;
    return sign | (uint16_t)(float_bits(r) - 0x3f000000u);
  }
  // Normal: rebias the exponent (127 -> 15) and round away 13 mantissa bits.
  uint32_t m = a - 0x38000000u;
  m += 0xfffu + ((m >> 13) & 1u);
  return sign | (uint16_t)(m >> 13);
}
inline float f16_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e == 0) {  // subnormal: m * 2^-24
    const float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

// x rounded to the nearest value of type t (f32: x itself).
inline float round_to(DType t, float x) {
  if (t == DType::bf16) return bf16_to_float(float_to_bf16(x));
  if (t == DType::f16) return f16_to_float(float_to_f16(x));
  return x;
}

// Bulk conversions (vectorised where the CPU allows).
void round_to(DType t, float *x, size_t n);  // in place; f32/f64: nothing to do
void to_16bit(DType t, const float *in, uint16_t *out, size_t n);    // t: bf16 or f16
void from_16bit(DType t, const uint16_t *in, float *out, size_t n);  // exact

}  // namespace ptdp
