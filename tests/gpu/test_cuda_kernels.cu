// CUDA kernels against the CPU kernels on fresh random inputs. Needs only the
// CUDA runtime (the CPU references are compiled in), so it runs on a GPU
// machine without the rest of ptdp's dependencies. Exits 77 (skipped) when
// there is no usable device. Outputs are poisoned with NaN before every run, so
// an element a kernel forgets to write fails the comparison.
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops_cuda.h"
#include "tests/gpu/gpu_test_util.h"

namespace {

using namespace gpu_test;

void test_layernorm(int N, int h) {
  auto x = randn((size_t)N * h, 1, 3.f), w = randn(h, 2), b = randn(h, 3);
  std::vector<float> y(x.size()), m(N), r(N);
  ptdp::cpu::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, h,
                               1e-5f);
  Dev dx(x), dw(w), db(b), dy(x.size()), dm(N), dr(N);
  ptdp::cuda::layernorm_forward(dy.p, dm.p, dr.p, dx.p, dw.p, db.p, N, h, 1e-5f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // fp32, sums in another order over h <= 4096 terms: 1e-5 relative.
  std::string tag = "layernorm N=" + std::to_string(N) + " h=" + std::to_string(h);
  compare((tag + " out").c_str(), dy.get(), y, 1e-5f, 1e-5f);
  compare((tag + " rstd").c_str(), dr.get(), r, 1e-6f, 1e-5f);
}

void test_bias_gelu(int N, int f) {
  auto y = randn((size_t)N * f, 4, 2.f), bias = randn(f, 5);
  std::vector<float> z(y.size()), out(y.size());
  ptdp::cpu::bias_gelu_forward(z.data(), out.data(), y.data(), bias.data(), N, f);
  Dev dy(y), db(bias), dz(y.size()), dout(y.size());
  ptdp::cuda::bias_gelu_forward(dz.p, dout.p, dy.p, db.p, N, f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // CPU tanh is a polynomial-exp form accurate to ~2e-7; tanhf to a few ulp.
  std::string tag = "bias_gelu N=" + std::to_string(N) + " f=" + std::to_string(f);
  compare((tag + " z").c_str(), dz.get(), z, 0.f, 0.f);
  compare((tag + " out").c_str(), dout.get(), out, 2e-6f, 1e-5f);
}

void test_softmax(int batch, int s, bool causal) {
  auto S = randn((size_t)batch * s * s, 6, 4.f);
  std::vector<float> P(S.size());
  const float scale = 0.125f;
  ptdp::cpu::scale_mask_softmax_forward(P.data(), S.data(), batch, s, s, scale, causal, nullptr);
  Dev dS(S), dP(S.size());
  ptdp::cuda::scale_mask_softmax_forward(dP.p, dS.p, batch, s, s, scale, causal, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // exp in both, sums of <= s terms in another order: 1e-6 absolute on probabilities.
  std::string tag = "softmax batch=" + std::to_string(batch) + " s=" + std::to_string(s) +
                    (causal ? " causal" : "");
  compare(tag.c_str(), dP.get(), P, 1e-6f, 1e-5f);
}

// A vocab-parallel shard (rows [start, start + rows)) with and without positions.
void test_embedding(int s, int b, int h, int vocab, int start, int rows, bool positions) {
  auto wte = randn((size_t)rows * h, 7), wpe = randn((size_t)s * h, 8);
  auto tokens = random_ids((size_t)s * b, vocab, 9);
  std::vector<float> x((size_t)s * b * h);
  ptdp::cpu::embedding_forward(x.data(), tokens.data(), wte.data(), start, rows,
                               positions ? wpe.data() : nullptr, s, b, h);
  Dev dwte(wte), dwpe(wpe), dx(x.size());
  DevI dt(tokens);
  ptdp::cuda::embedding_forward(dx.p, dt.p, dwte.p, start, rows, positions ? dwpe.p : nullptr, s, b,
                                h, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // One addition per element in both: exact.
  std::string tag = "embedding h=" + std::to_string(h) + " rows " + std::to_string(start) + "+" +
                    std::to_string(rows) + (positions ? " +wpe" : "");
  compare(tag.c_str(), dx.get(), x, 0.f, 0.f);
}

void test_cross_entropy(int N, int Vp, int V) {
  auto logits = randn((size_t)N * Vp, 10, 3.f);
  auto targets = random_ids((size_t)N, V, 11);
  std::vector<float> loss(N);
  ptdp::cpu::cross_entropy_forward(loss.data(), logits.data(), targets.data(), N, Vp, V);
  Dev dl(logits), dloss(N);
  DevI dt(targets);
  ptdp::cuda::cross_entropy_forward(dloss.p, dl.p, dt.p, N, Vp, V, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // fp32 sums of V exp terms in another order: 1e-5 relative on a loss of ~log V.
  std::string tag = "cross_entropy V=" + std::to_string(V) + " Vp=" + std::to_string(Vp);
  compare(tag.c_str(), dloss.get(), loss, 1e-5f, 1e-5f);
}

void test_adamw(size_t n, int64_t step) {
  auto p = randn(n, 12), g = randn(n, 13, 0.1f), m = randn(n, 14, 0.01f), v = randn(n, 15, 0.01f);
  for (auto &x : v) x = x * x;  // second moments are non-negative
  Dev dp(p), dg(g), dm(m), dv(v);
  ptdp::cpu::AdamWParams a{3e-4, 0.9, 0.95, 1e-8, 0.1, step};
  ptdp::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
  ptdp::cuda::adamw_update(dp.p, dg.p, dm.p, dv.p, n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                           a.step, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // The same float arithmetic per element, but either side may fuse a multiply
  // and an add: a few ulp of the terms. exp_avg = b1*m + (1-b1)*g can cancel to
  // far below its terms, so its bound is on the terms, not on the result.
  std::string tag = "adamw n=" + std::to_string(n) + " step " + std::to_string(step);
  const auto m0 = randn(n, 14, 0.01f);  // the inputs again (m was updated in place)
  std::vector<float> m_bound(n);
  for (size_t i = 0; i < n; i++)
    m_bound[i] = 4 * std::ldexp(1.f, -24) * (0.9f * std::fabs(m0[i]) + 0.1f * std::fabs(g[i]));
  compare((tag + " param").c_str(), dp.get(), p, 1e-7f, 1e-6f);
  compare_bound((tag + " exp_avg").c_str(), dm.get(), m, m_bound);
  compare((tag + " exp_avg_sq").c_str(), dv.get(), v, 1e-12f, 1e-6f);
}

}  // namespace

int main() {
  gpu_test::require_device();
  for (int h : {1, 7, 384, 1000, 4096}) test_layernorm(37, h);
  for (int f : {1, 6, 1536, 1003}) test_bias_gelu(29, f);
  for (int s : {1, 5, 64, 257, 1024}) {
    test_softmax(3, s, true);
    test_softmax(3, s, false);
  }
  for (int h : {5, 64, 768}) {
    test_embedding(17, 3, h, 1000, 0, 1000, true);
    test_embedding(17, 3, h, 1000, 500, 500, false);  // tensor rank 1 of 2: half the ids are others'
  }
  for (int V : {1, 257, 50257}) test_cross_entropy(23, (V + 127) / 128 * 128, V);
  for (size_t n : {1, 7, 4096, 1000003}) test_adamw(n, 1 + (int64_t)(n % 5));
  std::printf("%d checks failed\n", failures);
  return failures ? 1 : 0;
}
