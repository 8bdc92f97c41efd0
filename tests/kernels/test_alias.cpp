// CPU kernel tests: In-place use, where the header allows aliasing.
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

// ---- in-place use, where the header allows aliasing ---------------------------------

TEST(KernelAlias, InPlaceMatchesOutOfPlace) {
  Rng rng(15);
  const int N = 4, f = 6;
  // bias_gelu: z may alias y; dz may alias dout.
  Vec y = rng.vec(N * f), bias = rng.vec(f), dout = rng.vec(N * f);
  Vec z(N * f), out(N * f), out2(N * f), dz(N * f), db(f, 0.0), db2(f, 0.0);
  bias_gelu_forward(z.data(), out.data(), y.data(), bias.data(), N, f);
  Vec zy = y;
  bias_gelu_forward(zy.data(), out2.data(), zy.data(), bias.data(), N, f);
  EXPECT_EQ(zy, z);
  EXPECT_EQ(out2, out);
  bias_gelu_backward(dz.data(), db.data(), dout.data(), z.data(), N, f);
  Vec d2 = dout;
  bias_gelu_backward(d2.data(), db2.data(), d2.data(), z.data(), N, f);
  EXPECT_EQ(d2, dz);
  EXPECT_EQ(db2, db);

  // softmax: P may alias S, dS may alias dP.
  const int sq = 3, sk = 4;
  Vec S = rng.vec(2 * sq * sk), P(S.size()), dP = rng.vec(S.size()), dS(S.size());
  scale_mask_softmax_forward(P.data(), S.data(), 2, sq, sk, 0.5, true, (const uint8_t *)nullptr);
  Vec PS = S;
  scale_mask_softmax_forward(PS.data(), PS.data(), 2, sq, sk, 0.5, true, (const uint8_t *)nullptr);
  EXPECT_EQ(PS, P);
  scale_mask_softmax_backward(dS.data(), P.data(), dP.data(), 2, sq, sk, 0.5);
  Vec dPS = dP;
  scale_mask_softmax_backward(dPS.data(), P.data(), dPS.data(), 2, sq, sk, 0.5);
  EXPECT_EQ(dPS, dS);

  // cross_entropy: dlogits may alias logits.
  const int V = 5, Vp = 8;
  const int32_t targets[2] = {4, 0};
  Vec logits = rng.vec(2 * Vp), dl(logits.size());
  cross_entropy_backward(dl.data(), logits.data(), targets, 2, Vp, V, 1.0);
  Vec ll = logits;
  cross_entropy_backward(ll.data(), ll.data(), targets, 2, Vp, V, 1.0);
  EXPECT_EQ(ll, dl);

  // bias_dropout_add backward: dy may alias dout.
  const DropoutSpec d = make_spec(0.3f);
  Vec g = rng.vec(2 * 3 * 5), dy(g.size());
  bias_dropout_add_backward(dy.data(), (double *)nullptr, g.data(), 2, 3, 5, d);
  Vec gg = g;
  bias_dropout_add_backward(gg.data(), (double *)nullptr, gg.data(), 2, 3, 5, d);
  EXPECT_EQ(gg, dy);
}

}  // namespace
}  // namespace ptdp::cpu
