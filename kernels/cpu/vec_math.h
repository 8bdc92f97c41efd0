// Elementwise math that the compiler can vectorise: float versions are
// branch-free polynomials (relative error < 2e-7 over the range used), double
// versions call libm so that the double-precision tests see exact math.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ptdp::cpu {

// e^x: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 Taylor-Horner polynomial,
// 2^n by building the exponent bits. Inputs below -87 flush to 0, above 88 saturate.
inline float vexp(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  float n = std::nearbyint(x * 1.44269504f);
  float r = x - n * 0.693145752f;  // ln2 split in two for an exact product
  r = r - n * 1.42860677e-6f;
  float p = 1.f / 720;
  p = p * r + 1.f / 120;
  p = p * r + 1.f / 24;
  p = p * r + 1.f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}
inline double vexp(double x) { return std::exp(x); }

// tanh(u) = 1 - 2 / (e^{2u} + 1), accurate to ~2e-7 absolute for float.
inline float vtanh(float u) { return 1.f - 2.f / (vexp(2.f * u) + 1.f); }
inline double vtanh(double u) { return std::tanh(u); }

}  // namespace ptdp::cpu
