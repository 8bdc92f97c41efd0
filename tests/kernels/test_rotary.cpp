// CPU kernel tests: Rotary position embedding: backward against finite differences.
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

TEST(KernelGrad, RotaryEmbedding) {
  const int s = 5, b = 2, hd = 8, vecs = 3, stride = 20, ld = 64;
  std::vector<float> cos_t(s * hd / 2), sin_t(s * hd / 2);
  rope_table(cos_t.data(), sin_t.data(), s, hd, 500000.0);
  EXPECT_EQ(cos_t[0], 1.f);  // position 0
  EXPECT_EQ(sin_t[0], 0.f);
  // Position 3, pair 1: angle 3 / 500000^(2/8), as transformers computes it in fp32.
  const float inv = 1.f / std::pow(500000.f, 2.f / 8.f);
  EXPECT_EQ(cos_t[3 * 4 + 1], (float)std::cos((double)(3.f * inv)));
  Rng rng(23);
  Vec x = rng.vec(s * b * ld), y = rng.vec(s * b * ld);
  Vec rx = x, ry = y;
  rope_rotate(rx.data(), cos_t.data(), sin_t.data(), s, b, ld, vecs, stride, hd, false);
  rope_rotate(ry.data(), cos_t.data(), sin_t.data(), s, b, ld, vecs, stride, hd, true);
  EXPECT_NEAR(dot(rx, y), dot(x, ry), 1e-12);
  for (int r = 0; r < s * b; r++)
    for (int c = 0; c < ld; c++) {
      const int k = c / stride, j = c % stride;
      const size_t at = (size_t)r * ld + c;
      if (k >= vecs || j >= hd || r < b) {
        EXPECT_EQ(rx[at], x[at]) << "untouched " << r << "," << c;  // not a vector, or position 0
      } else if (j < hd / 2) {
        const size_t o = at + hd / 2;
        // The tables are fp32: cos^2 + sin^2 is 1 within 2^-22.
        const double n2 = x[at] * x[at] + x[o] * x[o];
        EXPECT_NEAR(rx[at] * rx[at] + rx[o] * rx[o], n2, 3e-7 * n2);
      }
    }
  Vec back = rx;
  rope_rotate(back.data(), cos_t.data(), sin_t.data(), s, b, ld, vecs, stride, hd, true);
  for (size_t i = 0; i < x.size(); i++) EXPECT_NEAR(back[i], x[i], 3e-7) << i;  // |x| <= 1
}

}  // namespace
}  // namespace ptdp::cpu
