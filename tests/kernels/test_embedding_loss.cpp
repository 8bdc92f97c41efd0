// CPU kernel tests: Embedding and the vocab-padded cross-entropy: backward against finite differences.
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

TEST(KernelGrad, Embedding) {
  // Tokens repeat (their rows' gradients must add up) and token 5 never occurs.
  const int s = 3, b = 4, h = 3, V = 6;
  const int32_t tokens[s * b] = {0, 1, 2, 0, 1, 1, 3, 4, 0, 2, 4, 4};
  Rng rng(7);
  Vec wte = rng.vec(V * h), wpe = rng.vec(s * h), R = rng.vec(s * b * h), x(s * b * h);
  auto loss = [&] {
    embedding_forward(x.data(), tokens, wte.data(), wpe.data(), s, b, h);
    return dot(x, R);
  };
  loss();
  // Forward by definition: x[si*b+bi] = wte[token] + wpe[si].
  for (int r = 0; r < s * b; r++)
    for (int j = 0; j < h; j++)
      EXPECT_EQ(x[r * h + j], wte[tokens[r] * h + j] + wpe[(r / b) * h + j]);
  Vec dwte(V * h, 0.0), dwpe(s * h, 0.0);
  embedding_backward(dwte.data(), dwpe.data(), R.data(), tokens, s, b, h);
  EXPECT_LE(rel_err(dwte, numeric_grad(wte, loss)), kFdTol) << "dwte";
  EXPECT_LE(rel_err(dwpe, numeric_grad(wpe, loss)), kFdTol) << "dwpe";
  for (int j = 0; j < h; j++) EXPECT_EQ(dwte[5 * h + j], 0.0) << "unused token";
}

TEST(KernelGrad, CrossEntropyPaddedVocab) {
  const int N = 4, V = 7, Vp = 10;
  const int32_t targets[N] = {0, 6, 3, 3};
  const double dloss = 0.37;
  Rng rng(8);
  Vec logits = rng.vec(N * Vp), losses(N);
  // Huge padding logits: if they entered the softmax they would dominate it.
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++) logits[i * Vp + j] = 50.0;
  auto loss = [&] {
    cross_entropy_forward(losses.data(), logits.data(), targets, N, Vp, V);
    double L = 0;
    for (double l : losses) L += l;
    return dloss * L;
  };
  loss();
  // Forward against the definition over the first V columns only.
  for (int i = 0; i < N; i++) {
    double z = 0;
    for (int j = 0; j < V; j++) z += std::exp(logits[i * Vp + j]);
    EXPECT_NEAR(losses[i], std::log(z) - logits[i * Vp + targets[i]], 1e-13);
  }
  // Padding values must not change the loss at all, not even in the last bit.
  const Vec before = losses;
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++) logits[i * Vp + j] = -1e3;
  loss();
  for (int i = 0; i < N; i++) EXPECT_EQ(losses[i], before[i]);

  Vec dlogits(N * Vp, 123.0);  // garbage: padding must be written as 0
  cross_entropy_backward(dlogits.data(), logits.data(), targets, N, Vp, V, dloss);
  Vec num = numeric_grad(logits, loss);
  EXPECT_LE(rel_err(dlogits, num), kFdTol);
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++) {
      EXPECT_EQ(dlogits[i * Vp + j], 0.0) << "padding column " << j;
      EXPECT_EQ(num[i * Vp + j], 0.0) << "padding column " << j;
    }
}

}  // namespace
}  // namespace ptdp::cpu
