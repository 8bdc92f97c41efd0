// CPU kernel tests: bias + GeLU and SwiGLU: backward against finite differences.
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

TEST(KernelGrad, BiasGelu) {
  const int N = 6, f = 7;
  Rng rng(2);
  Vec y = rng.vec(N * f), bias = rng.vec(f), R = rng.vec(N * f);
  // Spread z over the region where the tanh curve bends, not just [-2, 2].
  for (auto &v : y) v *= 2.5;
  Vec z(N * f), out(N * f);
  auto loss = [&] {
    bias_gelu_forward(z.data(), out.data(), y.data(), bias.data(), N, f);
    return dot(out, R);
  };
  loss();
  Vec dz(N * f), dbias(f, 0.0);
  bias_gelu_backward(dz.data(), dbias.data(), R.data(), z.data(), N, f);
  EXPECT_LE(rel_err(dz, numeric_grad(y, loss)), kFdTol) << "dz (= dL/dy)";
  EXPECT_LE(rel_err(dbias, numeric_grad(bias, loss)), kFdTol) << "dbias";
}

TEST(KernelGrad, SwiGlu) {
  const int N = 6, f = 5;
  Rng rng(22);
  Vec y = rng.vec(N * 2 * f), bias = rng.vec(2 * f), R = rng.vec(N * f);
  for (auto &v : y) v *= 3;  // through the bend of silu
  Vec z(N * 2 * f), out(N * f);
  auto loss = [&] {
    swiglu_forward(z.data(), out.data(), y.data(), bias.data(), N, f);
    return dot(out, R);
  };
  loss();
  // out = silu(gate) * up, gate the first f columns of z.
  for (int i = 0; i < N; i++)
    for (int j = 0; j < f; j++) {
      const double g = y[i * 2 * f + j] + bias[j], u = y[i * 2 * f + f + j] + bias[f + j];
      EXPECT_NEAR(out[i * f + j], g / (1 + std::exp(-g)) * u, 1e-13);
    }
  Vec dz(N * 2 * f), dbias(2 * f, 0.0);
  swiglu_backward(dz.data(), dbias.data(), R.data(), z.data(), N, f);
  EXPECT_LE(rel_err(dz, numeric_grad(y, loss)), kFdTol) << "dz (= dL/dy)";
  EXPECT_LE(rel_err(dbias, numeric_grad(bias, loss)), kFdTol) << "dbias";
  // No bias: z is y.
  Vec z2(N * 2 * f), out2(N * f);
  swiglu_forward(z2.data(), out2.data(), z.data(), (const double *)nullptr, N, f);
  EXPECT_EQ(z2, z);
  EXPECT_EQ(out2, out);
}

// The rotation of every head vector by its position's angles: the backward
// (inverse on the gradient) is exactly its adjoint, <R x, y> = <x, R^T y>
// (the same fp32 cos and sin); it keeps each pair's norm and the inverse undoes
// it up to the tables' fp32 rounding; position-0 rows and the columns between
// vectors are unchanged.

}  // namespace
}  // namespace ptdp::cpu
