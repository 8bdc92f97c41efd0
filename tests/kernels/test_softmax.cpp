// CPU kernel tests: Scaled, masked softmax: backward against finite differences, masked rows and normalisation.
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

// FD check of dS for one masking mode; the backward only sees P, so masked
// entries must come out as exact zeros through P = 0.
void check_softmax_grad(bool causal, const uint8_t *mask, uint64_t seed) {
  const int batch = 2, sq = 4, sk = 5, n = batch * sq * sk;
  const double scale = 0.7;
  Rng rng(seed);
  Vec S = rng.vec(n), R = rng.vec(n), P(n);
  auto loss = [&] {
    scale_mask_softmax_forward(P.data(), S.data(), batch, sq, sk, scale, causal, mask);
    return dot(P, R);
  };
  loss();
  Vec dS(n);
  scale_mask_softmax_backward(dS.data(), P.data(), R.data(), batch, sq, sk, scale);
  Vec num = numeric_grad(S, loss);
  EXPECT_LE(rel_err(dS, num), kFdTol) << "causal=" << causal << " mask=" << (mask != nullptr);
  for (int i = 0; i < n; i++) {
    if (num[i] == 0.0) {
      EXPECT_EQ(dS[i], 0.0) << "masked entry " << i;
    }
  }
}

TEST(KernelGrad, ScaleMaskSoftmaxCausal) { check_softmax_grad(true, nullptr, 5); }

TEST(KernelGrad, ScaleMaskSoftmaxGeneralMask) {
  // [sq=4, sk=5]; nonzero = masked. Row 2 is fully masked (zero output and gradient).
  const uint8_t mask[4 * 5] = {0, 1, 0, 0, 1,  //
                               1, 0, 0, 1, 0,  //
                               1, 1, 1, 1, 1,  //
                               0, 0, 0, 0, 7};
  check_softmax_grad(false, mask, 6);
}

// ---- softmax properties ---------------------------------------------------------

TEST(KernelSoftmax, MaskedRowsAndNormalisation) {
  const int batch = 2, sq = 4, sk = 6;
  // Row 1 fully masked; rows 0, 2, 3 partly.
  uint8_t mask[sq * sk] = {};
  for (int j = 0; j < sk; j++) mask[1 * sk + j] = 1;
  mask[0 * sk + 0] = mask[0 * sk + 3] = mask[2 * sk + 5] = mask[3 * sk + 1] = 1;
  Rng rng(13);
  Vec S = rng.vec(batch * sq * sk), P(S.size());
  for (int causal = 0; causal < 2; causal++) {
    scale_mask_softmax_forward(P.data(), S.data(), batch, sq, sk, 1.5, causal != 0, mask);
    for (int bi = 0; bi < batch; bi++)
      for (int i = 0; i < sq; i++) {
        const double *row = P.data() + (bi * sq + i) * sk;
        // Causal + mask[0][0] hides row 0's only visible column as well.
        const bool all_masked = i == 1 || (causal && i == 0);
        double sum = 0;
        for (int j = 0; j < sk; j++) {
          const bool hidden = mask[i * sk + j] || (causal && j > i);
          if (hidden || all_masked) {
            EXPECT_EQ(row[j], 0.0) << "causal=" << causal << " row " << i << " col " << j;
          } else {  // every visible column gets weight: catches an off-by-one causal edge
            EXPECT_GT(row[j], 0.0) << "causal=" << causal << " row " << i << " col " << j;
          }
          sum += row[j];
        }
        EXPECT_NEAR(sum, all_masked ? 0.0 : 1.0, 1e-14) << "causal=" << causal << " row " << i;
      }
  }
}

}  // namespace
}  // namespace ptdp::cpu
