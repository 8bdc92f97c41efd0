// CPU kernel tests: Dropout: bias + dropout + add, attention dropout (adjoint, mask from output, rate, determinism, bytes drawn, global indexing).
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

TEST(KernelGrad, BiasDropoutAdd) {
  // The mask is a pure function of (key, sample, element), so the forward is a
  // fixed linear map of y + bias and FD is exact up to rounding.
  const int s = 4, b = 3, h = 5;
  const DropoutSpec d = make_spec(0.3f, 3, /*sample_offset=*/5);
  Rng rng(3);
  Vec y = rng.vec(s * b * h), bias = rng.vec(h), res = rng.vec(s * b * h), R = rng.vec(s * b * h);
  Vec out(s * b * h);
  auto loss = [&] {
    bias_dropout_add_forward(out.data(), res.data(), y.data(), bias.data(), s, b, h, d);
    return dot(out, R);
  };
  Vec dy(s * b * h), dbias(h, 0.0);
  bias_dropout_add_backward(dy.data(), dbias.data(), R.data(), s, b, h, d);
  EXPECT_LE(rel_err(dy, numeric_grad(y, loss)), kFdTol) << "dy";
  EXPECT_LE(rel_err(dbias, numeric_grad(bias, loss)), kFdTol) << "dbias";
  EXPECT_LE(rel_err(R, numeric_grad(res, loss)), kFdTol) << "dresidual should be dout";
  // Make sure the test actually exercised dropping (60 draws at p = 0.3).
  int dropped = 0;
  for (double v : dy) dropped += (v == 0.0);
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, s * b * h);
}

TEST(KernelGrad, DropoutAttentionIsSelfAdjoint) {
  // Linear, so its backward is its adjoint; the header says the same call is
  // its own backward, which requires <D x, y> == <x, D y>.
  const int b = 2, a = 3, sq = 4, sk = 6, n = b * a * sq * sk;
  const DropoutSpec d = make_spec(0.3f, 3, 2);
  Rng rng(4);
  Vec x = rng.vec(n), y = rng.vec(n), Dx(n), Dy(n);
  dropout_attention(Dx.data(), x.data(), b, a, sq, sk, /*head_offset=*/5, d);
  dropout_attention(Dy.data(), y.data(), b, a, sq, sk, 5, d);
  const double lhs = dot(Dx, y), rhs = dot(x, Dy);
  EXPECT_NEAR(lhs, rhs, 1e-12 * (std::fabs(lhs) + 1));
  int dropped = 0;
  for (double v : Dx) dropped += (v == 0.0);
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, n);
}

// The model's attention backward reads the mask back from the forward's output:
// for inputs that are never 0 it must equal applying the mask again.
TEST(KernelDropout, BackwardFromOutputEqualsTheMask) {
  const int b = 2, a = 3, sq = 8, sk = 8, n = b * a * sq * sk;
  const DropoutSpec d = make_spec(0.3f, 7, 3);
  Rng rng(9);
  Vec x = rng.vec(n), dy = rng.vec(n), y(n), want(n), got(n);
  for (double &v : x) v = std::fabs(v) + 0.01;  // probabilities: positive
  dropout_attention(y.data(), x.data(), b, a, sq, sk, 1, d);
  dropout_attention(want.data(), dy.data(), b, a, sq, sk, 1, d);
  dropout_backward_from_output(got.data(), dy.data(), y.data(), (size_t)n, attention_dropout_rate(d.p));
  for (int i = 0; i < n; i++) ASSERT_EQ(got[i], want[i]) << i;
}

// ---- dropout ------------------------------------------------------------------------

TEST(KernelDropout, RateScaleAndDeterminism) {
  const int sq = 100, sk = 1000, n = sq * sk;
  const DropoutSpec d = make_spec(0.5f);
  Rng rng(14);
  std::vector<float> in(n), out(n), again(n), other(n);
  for (auto &v : in) v = (float)rng.nonzero();
  dropout_attention(out.data(), in.data(), 1, 1, sq, sk, 0, d);
  int kept = 0;
  for (int i = 0; i < n; i++) {
    if (out[i] != 0.f) {
      kept++;
      EXPECT_EQ(out[i], 2.f * in[i]) << i;  // inverted dropout: 1 / (1 - p) = 2 exactly
    }
  }
  // 0.01 is ~6 standard deviations of a binomial fraction over 1e5 draws.
  EXPECT_NEAR(kept / (double)n, 0.5, 0.01);

  dropout_attention(again.data(), in.data(), 1, 1, sq, sk, 0, d);
  EXPECT_EQ(std::memcmp(out.data(), again.data(), n * sizeof(float)), 0) << "same key";

  // Another iteration is an independent mask: about half the decisions differ.
  dropout_attention(other.data(), in.data(), 1, 1, sq, sk, 0, make_spec(0.5f, /*iteration=*/4));
  int differ = 0;
  for (int i = 0; i < n; i++) differ += (out[i] != 0.f) != (other[i] != 0.f);
  EXPECT_NEAR(differ / (double)n, 0.5, 0.02);
}

// Attention dropout draws a byte an element, 16 elements a Philox call: its
// rate is p rounded to a multiple of 1/256 and the kept values scale by the
// inverse of what is kept of that rate.
TEST(KernelDropout, AttentionDrawsBytes) {
  EXPECT_EQ(attention_drop_threshold(0.f), 0u);
  EXPECT_EQ(attention_drop_threshold(0.1f), 26u);  // 25.6 rounds up
  EXPECT_EQ(attention_drop_threshold(1e-6f), 1u);  // any p > 0 drops something
  EXPECT_EQ(attention_drop_threshold(0.9999f), 255u);
  EXPECT_FLOAT_EQ(attention_dropout_rate(0.1f), 26.f / 256.f);
  const int sq = 64, sk = 80, n = sq * sk;
  const DropoutSpec d = make_spec(0.1f, 3, 5);
  std::vector<double> in(n, 1.0), out(n);
  dropout_attention(out.data(), in.data(), 1, 1, sq, sk, /*head_offset=*/3, d);
  int kept = 0;
  for (int e = 0; e < n; e++) {
    const uint64_t el = 3ull * n + (uint64_t)e;
    const Philox4x32 r = attention_draws(d.key, d.sample_offset, el >> 4);
    const bool keep = draw_byte(r, (int)(el & 15)) >= 26u;
    ASSERT_EQ(keep, attention_keep(d, d.sample_offset, el)) << e;
    ASSERT_EQ(out[e], keep ? 1.0 / (1.0 - 26.0 / 256.0) : 0.0) << e;
    kept += keep;
  }
  // A binomial fraction over 5120 draws: 0.02 is about 5 standard deviations.
  EXPECT_NEAR(kept / (double)n, 1.0 - 26.0 / 256.0, 0.02);
}

TEST(KernelDropout, GlobalIndexing) {
  // bias_dropout_add: element (si, bi, j) uses sample = sample_offset + bi and
  // element = si*h + j, so the mask is the same under any data-parallel split.
  const int s = 5, b = 3, h = 8;
  const DropoutSpec d = make_spec(0.4f, 3, /*sample_offset=*/11);
  std::vector<float> ones(s * b * h, 1.f), out(s * b * h);
  bias_dropout_add_forward(out.data(), (const float *)nullptr, ones.data(), (const float *)nullptr,
                           s, b, h, d);
  for (int si = 0; si < s; si++)
    for (int bi = 0; bi < b; bi++)
      for (int j = 0; j < h; j++)
        EXPECT_EQ(out[(si * b + bi) * h + j] != 0.f,
                  dropout_keep(d, d.sample_offset + bi, (uint64_t)si * h + j));
  // Rows [2, 5) as a sequence-parallel slice (position_offset 2) draw the
  // full sequence's bits for those rows.
  DropoutSpec slice = d;
  slice.position_offset = 2;
  std::vector<float> part(3 * b * h);
  bias_dropout_add_forward(part.data(), (const float *)nullptr, ones.data(), (const float *)nullptr,
                           3, b, h, slice);
  for (size_t i = 0; i < part.size(); i++) EXPECT_EQ(part[i], out[2 * b * h + i]) << i;

  // dropout_attention: heads [2, 4) of a 4-head call equal a 2-head call with
  // head_offset = 2 (tensor-parallel split of the heads).
  const int a = 4, sq = 3, sk = 5, per_head = sq * sk;
  std::vector<float> in(b * a * per_head), full(in.size()), half(b * 2 * per_head);
  for (size_t i = 0; i < in.size(); i++) in[i] = 1.f + (float)i;
  dropout_attention(full.data(), in.data(), b, a, sq, sk, 0, d);
  std::vector<float> in_half(half.size());
  for (int bi = 0; bi < b; bi++)
    for (int k = 0; k < 2 * per_head; k++)
      in_half[bi * 2 * per_head + k] = in[(bi * a + 2) * per_head + k];
  dropout_attention(half.data(), in_half.data(), b, 2, sq, sk, 2, d);
  for (int bi = 0; bi < b; bi++)
    for (int k = 0; k < 2 * per_head; k++)
      EXPECT_EQ(half[bi * 2 * per_head + k], full[(bi * a + 2) * per_head + k]);
}

}  // namespace
}  // namespace ptdp::cpu
