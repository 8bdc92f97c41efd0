// CPU kernel tests: Reductions: sum of squares, column sums, accumulating backwards.
#include "tests/kernels/kernel_check.h"

namespace ptdp::cpu {
namespace {

// ---- reductions ---------------------------------------------------------------

TEST(KernelReduce, SumSquaresIndependentOfThreads) {
  ThreadGuard guard;
  const size_t n = 300000;  // several 64K chunks plus a partial one
  Rng rng(10);
  std::vector<float> x(n);
  for (auto &v : x) v = (float)rng.nonzero();
  omp_set_num_threads(1);
  const double s1 = sum_squares(x.data(), n);
  omp_set_num_threads(2);
  const double s2 = sum_squares(x.data(), n);
  // Bit-for-bit: the grad-norm clip must not depend on the machine's core count.
  EXPECT_EQ(std::memcmp(&s1, &s2, sizeof s1), 0) << s1 << " vs " << s2;
  double ref = 0;
  for (float v : x) ref += (double)v * v;
  EXPECT_NEAR(s1, ref, 1e-12 * ref);
}

TEST(KernelReduce, ColsumAccumulates) {
  const int N = 7, cols = 130;  // crosses the kernel's 64-column blocks
  Rng rng(11);
  Vec x = rng.vec(N * cols), out = rng.vec(cols);
  Vec expect = out;
  for (int j = 0; j < cols; j++) {
    double s = 0;
    for (int i = 0; i < N; i++) s += x[i * cols + j];
    expect[j] += s;
  }
  colsum_accumulate(out.data(), x.data(), N, cols);
  for (int j = 0; j < cols; j++) EXPECT_NEAR(out[j], expect[j], 1e-14) << j;
}

TEST(KernelReduce, BackwardsAccumulate) {
  // Gradients are summed over micro-batches: a second call must add, not overwrite.
  const int N = 3, h = 4;
  Rng rng(12);
  Vec x = rng.vec(N * h), w = rng.vec(h), b = rng.vec(h), dout = rng.vec(N * h);
  Vec out(N * h), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, h,
                    1e-5);
  Vec dx(N * h, 0.0), dw(h, 0.0), db(h, 0.0);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), N, h);
  Vec dx2 = dx, dw2 = dw, db2 = db;
  layernorm_backward(dx2.data(), dw2.data(), db2.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), N, h);
  for (int i = 0; i < N * h; i++) EXPECT_DOUBLE_EQ(dx2[i], 2 * dx[i]);
  for (int j = 0; j < h; j++) {
    EXPECT_DOUBLE_EQ(dw2[j], 2 * dw[j]);
    EXPECT_DOUBLE_EQ(db2[j], 2 * db[j]);
  }
  const int32_t tokens[N] = {1, 1, 0};
  Vec dwte(2 * h, 1.0), dwpe(N * h, 1.0);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens, N, 1, h);
  for (int j = 0; j < h; j++) {
    EXPECT_DOUBLE_EQ(dwte[1 * h + j], 1.0 + dout[0 * h + j] + dout[1 * h + j]);
    EXPECT_DOUBLE_EQ(dwte[0 * h + j], 1.0 + dout[2 * h + j]);
    EXPECT_DOUBLE_EQ(dwpe[2 * h + j], 1.0 + dout[2 * h + j]);
  }
}

}  // namespace
}  // namespace ptdp::cpu
