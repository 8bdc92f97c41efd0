// CPU kernel tests: LayerNorm and RMSNorm: backward against finite differences.
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

TEST(KernelGrad, LayerNorm) {
  const int N = 5, h = 8;
  Rng rng(1);
  Vec x = rng.vec(N * h), w = rng.vec(h), b = rng.vec(h), R = rng.vec(N * h);
  Vec out(N * h), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, h,
                      1e-5);
    return dot(out, R);
  };
  loss();  // leaves mean/rstd of the unperturbed x for the backward
  // The backward accumulates: start from zero to read off the gradient itself.
  Vec dx(N * h, 0.0), dw(h, 0.0), db(h, 0.0);
  layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, h);
  EXPECT_LE(rel_err(dx, numeric_grad(x, loss)), kFdTol) << "dx";
  EXPECT_LE(rel_err(dw, numeric_grad(w, loss)), kFdTol) << "dw";
  EXPECT_LE(rel_err(db, numeric_grad(b, loss)), kFdTol) << "db";
}

TEST(KernelGrad, RmsNorm) {
  const int N = 5, h = 8;
  Rng rng(21);
  Vec x = rng.vec(N * h), w = rng.vec(h), R = rng.vec(N * h);
  Vec out(N * h), rstd(N);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, h, 1e-5);
    return dot(out, R);
  };
  loss();
  // The forward by its definition: x / sqrt(mean(x^2) + eps) * w.
  for (int i = 0; i < N; i++) {
    double ss = 0;
    for (int j = 0; j < h; j++) ss += x[i * h + j] * x[i * h + j];
    for (int j = 0; j < h; j++)
      EXPECT_NEAR(out[i * h + j], x[i * h + j] / std::sqrt(ss / h + 1e-5) * w[j], 1e-14);
  }
  Vec dx(N * h, 0.0), dw(h, 0.0);
  rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, h);
  EXPECT_LE(rel_err(dx, numeric_grad(x, loss)), kFdTol) << "dx";
  EXPECT_LE(rel_err(dw, numeric_grad(w, loss)), kFdTol) << "dw";
}

}  // namespace
}  // namespace ptdp::cpu
