// The 16-bit conversions of mixed precision (engine/core/dtype.h) against
// their definitions: every 16-bit value round-trips, ties go to even, overflow
// and NaN behave as IEEE (and the GPU's __float2half_rn/__float2bfloat16_rn)
// say, and the vectorised bulk rounding equals the scalar one bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/core/dtype.h"

using namespace ptdp;

namespace {
uint32_t bits(float x) { return float_bits(x); }
}  // namespace

TEST(DType, EverySixteenBitValueRoundTrips) {
  for (uint32_t h = 0; h < 65536; h++) {
    const float b = bf16_to_float((uint16_t)h), f = f16_to_float((uint16_t)h);
    if (!std::isnan(b)) {
      EXPECT_EQ(float_to_bf16(b), h) << std::hex << h;
    }
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_f16(f), h) << std::hex << h;
    }
  }
}

TEST(DType, F16ValuesAreTheIeeeOnes) {
  EXPECT_EQ(f16_to_float(0x3c00), 1.f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.f);                 // largest finite
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.f, -14));    // smallest normal
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.f, -24));    // smallest subnormal
  EXPECT_EQ(f16_to_float(0x8001), -std::ldexp(1.f, -24));
  EXPECT_TRUE(std::isinf(f16_to_float(0x7c00)));
  EXPECT_EQ(bf16_to_float(0x3f80), 1.f);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
}

// Halfway cases between neighbours round to the even one; a hair above rounds up.
TEST(DType, TiesGoToEven) {
  for (uint16_t h : {0x3c00, 0x3c01, 0x0001, 0x0002, 0x03ff, 0x7bfe}) {
    const float lo = f16_to_float(h), hi = f16_to_float((uint16_t)(h + 1));
    const float mid = (float)(((double)lo + hi) / 2);
    EXPECT_EQ(float_to_f16(mid), (h & 1) ? h + 1 : h) << std::hex << h;
    EXPECT_EQ(float_to_f16(std::nextafter(mid, INFINITY)), h + 1) << std::hex << h;
    EXPECT_EQ(float_to_f16(std::nextafter(mid, 0.f)), h) << std::hex << h;
  }
  for (uint16_t h : {0x3f80, 0x3f81, 0x0001, 0x7f7e}) {
    const float lo = bf16_to_float(h), hi = bf16_to_float((uint16_t)(h + 1));
    const float mid = (float)(((double)lo + hi) / 2);
    EXPECT_EQ(float_to_bf16(mid), (h & 1) ? h + 1 : h) << std::hex << h;
    EXPECT_EQ(float_to_bf16(std::nextafter(mid, INFINITY)), h + 1) << std::hex << h;
  }
}

TEST(DType, OverflowAndNan) {
  EXPECT_EQ(round_to(DType::f16, 65519.f), 65504.f);  // below the halfway point to 65536
  EXPECT_TRUE(std::isinf(round_to(DType::f16, 65520.f)));
  EXPECT_TRUE(std::isinf(round_to(DType::f16, -1e6f)));
  EXPECT_LT(round_to(DType::f16, -1e6f), 0.f);
  EXPECT_TRUE(std::isinf(round_to(DType::bf16, std::numeric_limits<float>::max())));
  EXPECT_TRUE(std::isnan(round_to(DType::f16, NAN)));
  EXPECT_TRUE(std::isnan(round_to(DType::bf16, NAN)));
  EXPECT_EQ(round_to(DType::f16, 1e-8f), 0.f);  // below half the smallest subnormal
  EXPECT_EQ(round_to(DType::f32, 0.1f), 0.1f);
}

TEST(DType, BulkRoundingEqualsScalar) {
  std::mt19937 rng(5);
  std::vector<float> x;
  for (int i = 0; i < 300001; i++) {  // several chunks plus a tail
    uint32_t u = rng();
    float v;
    std::memcpy(&v, &u, 4);  // every exponent: subnormals, huge values, inf, NaN
    if (i % 3 == 0) v = std::ldexp((float)(u % 100000) - 50000.f, (int)(u % 40) - 30);
    x.push_back(v);
  }
  for (DType t : {DType::bf16, DType::f16}) {
    std::vector<float> bulk = x;
    round_to(t, bulk.data(), bulk.size());
    for (size_t i = 0; i < x.size(); i++) {
      const float want = round_to(t, x[i]);
      if (std::isnan(want))
        EXPECT_TRUE(std::isnan(bulk[i])) << dtype_name(t) << " " << i;
      else
        ASSERT_EQ(bits(bulk[i]), bits(want)) << dtype_name(t) << " element " << i << " = " << x[i];
    }
  }
}

// The bulk conversions a 16-bit run's CPU ops use (widen, compute, narrow)
// give the scalar ones' bits, across chunks and a tail.
TEST(DType, BulkConversionsEqualScalar) {
  std::vector<float> x(300001);
  for (size_t i = 0; i < x.size(); i++)
    x[i] = std::ldexp((float)((int)(i * 2654435761u % 200001) - 100000), (int)(i % 50) - 35);
  for (DType t : {DType::bf16, DType::f16}) {
    std::vector<uint16_t> h(x.size());
    std::vector<float> back(x.size());
    to_16bit(t, x.data(), h.data(), x.size());
    from_16bit(t, h.data(), back.data(), x.size());
    for (size_t i = 0; i < x.size(); i++) {
      const uint16_t want = t == DType::bf16 ? float_to_bf16(x[i]) : float_to_f16(x[i]);
      ASSERT_EQ(h[i], want) << dtype_name(t) << " element " << i << " = " << x[i];
      ASSERT_EQ(bits(back[i]), bits(round_to(t, x[i]))) << dtype_name(t) << " element " << i;
    }
  }
}

TEST(DType, ParseNames) {
  DType t;
  EXPECT_TRUE(parse_dtype("bf16", &t) && t == DType::bf16);
  EXPECT_TRUE(parse_dtype("fp16", &t) && t == DType::f16);
  EXPECT_TRUE(parse_dtype("float32", &t) && t == DType::f32);
  EXPECT_FALSE(parse_dtype("int8", &t));
}
