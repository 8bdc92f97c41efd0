// Unit tests for the CPU kernels (kernels/cpu/cpu_kernels.h).
//
// Every backward is checked against central finite differences of its own
// forward, in double precision, through the scalar objective L = sum(out * R)
// with a fixed random R (so dL/dout = R is what the backward receives).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/status.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ptdp::cpu {
namespace {

using Vec = std::vector<double>;

// Deterministic inputs, magnitudes in [0.2, 1] with random sign: never zero, so
// no term of a gradient vanishes by accident. Built from raw mt19937_64 output
// (std distributions differ between standard libraries).
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  double uniform() { return (double)(g() >> 11) * 0x1p-53; }  // [0, 1)
  double nonzero() {
    double m = 0.2 + 0.8 * uniform();
    return (g() & 1) ? -m : m;
  }
  Vec vec(size_t n) {
    Vec v(n);
    for (auto &x : v) x = nonzero();
    return v;
  }
};

double dot(const Vec &a, const Vec &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

// dloss/dx by central differences; x is perturbed one element at a time and
// restored. `loss` must recompute the forward from the current inputs.
template <class F>
Vec numeric_grad(Vec &x, F loss) {
  const double eps = 1e-6;
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double saved = x[i];
    // volatile: with -ffp-contract=fast (GCC's default, -mfma builds) an inlined
    // `dloss * L` could fuse into `lp - lm` and turn an exact 0 into rounding noise.
    x[i] = saved + eps;
    volatile double lp = loss();
    x[i] = saved - eps;
    volatile double lm = loss();
    x[i] = saved;
    g[i] = (lp - lm) / (2 * eps);
  }
  return g;
}

// Relative error in the max norm: max|a - n| / max(|a|, |n|). Per-element
// relative error is meaningless where a component is ~0 (GeLU' crosses zero).
double rel_err(const Vec &a, const Vec &n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); i++) {
    diff = std::max(diff, std::fabs(a[i] - n[i]));
    scale = std::max(scale, std::max(std::fabs(a[i]), std::fabs(n[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Tolerance for FD checks. In double with eps = 1e-6 the truncation error is
// O(eps^2) ~ 1e-12 and the rounding error ~ ulp(L)/eps ~ 1e-10 relative, both
// far below 1e-6; a wrong or missing term in a backward gives O(1e-2..1) error.
constexpr double kFdTol = 1e-6;

DropoutSpec make_spec(float p, uint32_t iteration = 3, uint32_t sample_offset = 0) {
  DropoutSpec d;
  d.key = DropoutKey{0x0123456789abcdefull, 0x5eed1234u, iteration};
  d.p = p;
  d.sample_offset = sample_offset;
  return d;
}

// Restores the OpenMP thread count on scope exit: later tests must not inherit ours.
struct ThreadGuard {
  int saved = omp_get_max_threads();
  ~ThreadGuard() { omp_set_num_threads(saved); }
};

// ---- finite-difference checks of every backward --------------------------------

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

TEST(KernelGrad, ScaleMaskSoftmaxCausal) { check_softmax_grad(true, nullptr, 5); }

TEST(KernelGrad, ScaleMaskSoftmaxGeneralMask) {
  // [sq=4, sk=5]; nonzero = masked. Row 2 is fully masked (zero output and gradient).
  const uint8_t mask[4 * 5] = {0, 1, 0, 0, 1,  //
                               1, 0, 0, 1, 0,  //
                               1, 1, 1, 1, 1,  //
                               0, 0, 0, 0, 7};
  check_softmax_grad(false, mask, 6);
}

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

// ---- GEMM against the definition --------------------------------------------------

// C = alpha * op(A) @ op(B) + beta * C, row-major, by the definition.
void naive_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double *A, int lda,
                const double *B, int ldb, double beta, double *C, int ldc) {
  for (int m = 0; m < M; m++)
    for (int n = 0; n < N; n++) {
      double s = 0;
      for (int k = 0; k < K; k++) {
        double a = ta ? A[k * lda + m] : A[m * lda + k];
        double b = tb ? B[n * ldb + k] : B[k * ldb + n];
        s += a * b;
      }
      C[m * ldc + n] = alpha * s + beta * C[m * ldc + n];
    }
}

// Storage of one operand case: op(A) is [M, K], op(B) is [K, N], C is [M, N],
// every leading dimension padded beyond its minimum.
struct GemmCase {
  bool ta, tb;
  int M = 3, N = 5, K = 4;
  int lda, ldb, ldc, sizeA, sizeB, sizeC;
  GemmCase(bool ta_, bool tb_) : ta(ta_), tb(tb_) {
    lda = (ta ? M : K) + 2;
    ldb = (tb ? K : N) + 3;
    ldc = N + 1;
    sizeA = (ta ? K : M) * lda;
    sizeB = (tb ? N : K) * ldb;
    sizeC = M * ldc;
  }
};

TEST(KernelGemm, MatchesNaiveAllTransposes) {
  const double alpha = 1.3, beta = -0.6;
  for (int t = 0; t < 4; t++) {
    GemmCase g(t & 1, t & 2);
    Rng rng(100 + t);
    // Padding of A and B holds random values too: reading it would show up.
    Vec A = rng.vec(g.sizeA), B = rng.vec(g.sizeB), C = rng.vec(g.sizeC);
    for (int m = 0; m < g.M; m++) C[m * g.ldc + g.N] = 777.0;  // C padding: must survive
    Vec ref = C;
    naive_gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, B.data(), g.ldb, beta,
               ref.data(), g.ldc);
    gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, B.data(), g.ldb, beta, C.data(),
         g.ldc);
    for (int i = 0; i < g.sizeC; i++)
      EXPECT_NEAR(C[i], ref[i], 1e-13) << "ta=" << g.ta << " tb=" << g.tb << " i=" << i;

    // beta = 0 must overwrite C, not scale it: callers pass uninitialised buffers.
    Vec Cn(g.sizeC, std::nan("")), ref0(g.sizeC, 0.0);
    naive_gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, B.data(), g.ldb, 0.0,
               ref0.data(), g.ldc);
    gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, B.data(), g.ldb, 0.0, Cn.data(),
         g.ldc);
    for (int m = 0; m < g.M; m++)
      for (int n = 0; n < g.N; n++)
        EXPECT_NEAR(Cn[m * g.ldc + n], ref0[m * g.ldc + n], 1e-13) << "beta=0, t=" << t;
  }
}

TEST(KernelGemm, StridedBatchedMatchesNaive) {
  ThreadGuard guard;
  const double alpha = 0.8, beta = 0.5;
  const int batch = 3;
  for (int t = 0; t < 4; t++) {
    GemmCase g(t & 1, t & 2);
    // Strides with gaps between operands, which must not be touched.
    const int64_t sA = g.sizeA + 7, sB = g.sizeB + 2, sC = g.sizeC + 5;
    Rng rng(200 + t);
    Vec A = rng.vec(sA * batch), B = rng.vec(sB * batch), C0 = rng.vec(sC * batch);
    Vec ref = C0;
    for (int i = 0; i < batch; i++)
      naive_gemm(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data() + i * sA, g.lda, B.data() + i * sB,
                 g.ldb, beta, ref.data() + i * sC, g.ldc);
    // The kernel has two paths: threads over the batch (batch >= threads) and
    // one BLAS call after another (batch < threads). Exercise both.
    for (int threads : {1, 8}) {
      omp_set_num_threads(threads);
      Vec C = C0;
      gemm_strided_batched(g.ta, g.tb, g.M, g.N, g.K, alpha, A.data(), g.lda, sA, B.data(), g.ldb,
                           sB, beta, C.data(), g.ldc, sC, batch);
      for (size_t i = 0; i < C.size(); i++)
        EXPECT_NEAR(C[i], ref[i], 1e-13) << "t=" << t << " threads=" << threads << " i=" << i;
    }
  }
}

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
