// CPU kernel tests: AdamW against its formula, in float and double, and the fused scale and model copy.
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

// ---- AdamW --------------------------------------------------------------------

TEST(KernelAdamW, ThreeStepsMatchFormula) {
  const int n = 6;
  AdamWParams a{1e-2, 0.9, 0.95, 1e-8, 0.1, 0};
  Rng rng(9);
  Vec p = rng.vec(n), m(n, 0.0), v(n, 0.0);
  Vec rp = p, rm = m, rv = v;  // reference state
  const Vec p0 = p;
  Vec g1;
  for (int step = 1; step <= 3; step++) {
    Vec g = rng.vec(n);
    if (step == 1) g1 = g;
    a.step = step;
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
    for (int i = 0; i < n; i++) {
      rm[i] = a.beta1 * rm[i] + (1 - a.beta1) * g[i];
      rv[i] = a.beta2 * rv[i] + (1 - a.beta2) * g[i] * g[i];
      double mhat = rm[i] / (1 - std::pow(a.beta1, step));
      double vhat = rv[i] / (1 - std::pow(a.beta2, step));
      // Decoupled weight decay: wd * p is added to the step, not to the gradient.
      rp[i] -= a.lr * (mhat / (std::sqrt(vhat) + a.eps) + a.weight_decay * rp[i]);
    }
    for (int i = 0; i < n; i++) {
      EXPECT_NEAR(m[i], rm[i], 1e-15) << "step " << step;
      EXPECT_NEAR(v[i], rv[i], 1e-15) << "step " << step;
      EXPECT_NEAR(p[i], rp[i], 1e-14) << "step " << step;
    }
    // Step 1 by hand: mhat = g, vhat = g^2, so the step is lr * (sign(g) + wd * p).
    if (step == 1)
      for (int i = 0; i < n; i++) {
        double sign = g1[i] > 0 ? 1.0 : -1.0;
        EXPECT_NEAR(p[i], p0[i] - a.lr * (sign + a.weight_decay * p0[i]), 1e-8);
      }
  }
}

// The fp32 kernel against torch.optim.AdamW's formula in double, with the betas
// of GPT training (0.9, 0.999): 1 - beta must be formed in double. Rounding beta2
// to float first makes (1 - beta2) 1.3e-5 too small and every update 6.4e-6 too
// large, well outside the 1e-6 bound (float arithmetic itself stays below 5e-7).
TEST(KernelAdamW, FloatMatchesDoubleFormulaWithBeta2Near1) {
  const int n = 64;
  AdamWParams a{1e-3, 0.9, 0.999, 1e-8, 0.0, 0};
  Rng rng(11);
  std::vector<float> p(n, 0.f), m(n, 0.f), v(n, 0.f);
  std::vector<double> rm(n, 0.0), rv(n, 0.0), rp(n, 0.0);
  for (int step = 1; step <= 3; step++) {
    std::vector<float> g(n);
    for (auto &x : g) x = (float)rng.nonzero();
    a.step = step;
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
    for (int i = 0; i < n; i++) {
      const double gi = g[i];
      rm[i] = a.beta1 * rm[i] + (1 - a.beta1) * gi;
      rv[i] = a.beta2 * rv[i] + (1 - a.beta2) * gi * gi;
      rp[i] -= a.lr / (1 - std::pow(a.beta1, step)) * rm[i] /
               (std::sqrt(rv[i]) / std::sqrt(1 - std::pow(a.beta2, step)) + a.eps);
      EXPECT_NEAR(v[i], rv[i], 5e-7 * rv[i]) << "step " << step << " element " << i;
      EXPECT_NEAR(p[i], rp[i], 1e-6 * std::abs(rp[i])) << "step " << step << " element " << i;
    }
  }
}

// The fused pass (gradient scale and a 16-bit model copy folded in) gives the
// bits of the passes it replaced: scale_inplace, the update, then the master
// weights copied and rounded in bulk.
TEST(KernelAdamW, FusedScaleAndModelCopyMatchSeparatePasses) {
  const size_t n = 1003;
  Rng rng(13);
  for (DType t : {DType::bf16, DType::f16}) {
    for (double scale : {1.0, 0.37}) {
      std::vector<float> p(n), g(n), m(n, 0.f), v(n, 0.f);
      for (auto &x : p) x = (float)rng.nonzero();
      for (auto &x : g) x = (float)(rng.nonzero() * 3);
      std::vector<float> p2 = p, g2 = g, m2 = m, v2 = v, copy(n, -1.f);
      for (int64_t step = 1; step <= 2; step++) {
        AdamWParams a{1e-2, 0.9, 0.95, 1e-8, 0.1, step};
        // Separate passes.
        scale_inplace(g2.data(), n, (float)scale);
        adamw_update(p2.data(), g2.data(), m2.data(), v2.data(), n, a);
        std::vector<float> rounded = p2;
        round_to(t, rounded.data(), n);
        // Fused.
        a.grad_scale = scale;
        a.model_copy = copy.data();
        a.model_type = t;
        adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
        g2 = g;  // the fused pass leaves the gradients as they were
        ASSERT_EQ(0, std::memcmp(p.data(), p2.data(), n * 4)) << dtype_name(t) << " " << scale;
        ASSERT_EQ(0, std::memcmp(m.data(), m2.data(), n * 4)) << dtype_name(t) << " " << scale;
        ASSERT_EQ(0, std::memcmp(v.data(), v2.data(), n * 4)) << dtype_name(t) << " " << scale;
        ASSERT_EQ(0, std::memcmp(copy.data(), rounded.data(), n * 4)) << dtype_name(t) << " " << scale;
      }
    }
  }
  // A model copy needs float weights and a 16-bit type.
  std::vector<double> pd(4, 1.0), gd(4, 1.0), md(4, 0.0), vd(4, 0.0);
  float dummy[4];
  AdamWParams a{1e-2, 0.9, 0.95, 1e-8, 0.1, 1, 1.0, dummy, DType::bf16};
  EXPECT_THROW(adamw_update(pd.data(), gd.data(), md.data(), vd.data(), 4, a), Error);
  std::vector<float> pf(4, 1.f), gf(4, 1.f), mf(4, 0.f), vf(4, 0.f);
  a.model_type = DType::f32;
  EXPECT_THROW(adamw_update(pf.data(), gf.data(), mf.data(), vf.data(), 4, a), Error);
}

}  // namespace
}  // namespace ptdp::cpu
