// The vocab-parallel cross-entropy, the reductions (global norm, column sums),
// casts and AdamW in CUDA against the CPU kernels on fresh random inputs.
// Outputs are poisoned with NaN first. Exits 77 (skipped) without a device.
#include <algorithm>
#include <utility>

#include "kernels/kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace {

using namespace gpu_test;

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

// AdamW with the gradient scale (unscaling, clipping) and the rounded model
// copy of a 16-bit run folded in (copy_type f32: no copy).
void test_adamw(size_t n, int64_t step, double grad_scale, ptdp::DType copy_type) {
  auto p = randn(n, 12), g = randn(n, 13, 0.1f), m = randn(n, 14, 0.01f), v = randn(n, 15, 0.01f);
  for (auto &x : v) x = x * x;  // second moments are non-negative
  const bool copy = copy_type != ptdp::DType::f32;
  std::vector<float> model(copy ? n : 0, -7.f);
  Dev dp(p), dg(g), dm(m), dv(v), dmodel(n);
  ptdp::cpu::AdamWParams a{3e-4, 0.9, 0.95, 1e-8, 0.1, step, grad_scale,
                           copy ? model.data() : nullptr, copy_type};
  ptdp::cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, a);
  ptdp::cuda::adamw_update(dp.p, dg.p, dm.p, dv.p, n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay,
                           a.step, grad_scale, copy ? dmodel.p : nullptr, copy_type, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // The same float arithmetic per element, but either side may fuse a multiply
  // and an add: a few ulp of the terms. exp_avg = b1*m + (1-b1)*g can cancel to
  // far below its terms, so its bound is on the terms, not on the result.
  std::string tag = "adamw n=" + std::to_string(n) + " step " + std::to_string(step) +
                    " grad scale " + std::to_string(grad_scale) + " copy " +
                    ptdp::dtype_name(copy_type);
  const auto m0 = randn(n, 14, 0.01f);  // the inputs again (m was updated in place)
  std::vector<float> m_bound(n);
  for (size_t i = 0; i < n; i++)
    m_bound[i] = 4 * std::ldexp(1.f, -24) * (0.9f * std::fabs(m0[i]) + 0.1f * std::fabs(g[i]) * grad_scale);
  compare((tag + " param").c_str(), dp.get(), p, 1e-7f, 1e-6f);
  compare_bound((tag + " exp_avg").c_str(), dm.get(), m, m_bound);
  compare((tag + " exp_avg_sq").c_str(), dv.get(), v, 1e-12f, 1e-6f);
  if (copy) {
    // The copy is the device's own weights rounded, every element written: a
    // weight a few ulp off may round to the neighbouring 16-bit value, so it
    // is held to its own param, not the CPU's copy.
    const std::vector<float> dev_p = dp.get(), dev_model = dmodel.get();
    size_t off = 0;
    for (size_t i = 0; i < n; i++) off += dev_model[i] != ptdp::round_to(copy_type, dev_p[i]);
    std::printf("%-48s %s (%zu of %zu differ)\n", (tag + " model copy").c_str(), off ? "FAIL" : "ok",
                off, n);
    if (off) failures++;
    compare((tag + " model copy vs cpu").c_str(), dev_model, model, 1e-2f, 1e-2f);
  }
}

// The three vocab-parallel steps on one tensor rank's shard: columns
// [vocab_start, vocab_start + cols) of a vocabulary, padded to ld; targets fall
// inside and outside the shard.
template <class T>
void test_vocab_ce(int N, int ld, int cols, int vocab_start, int vocab) {
  auto logits = randn((size_t)N * ld, 30, 3.f);
  auto targets = random_ids((size_t)N, vocab, 31);
  DevArray<T> dl = upload_rounded<T>(logits);
  DevI dt(targets);
  std::vector<float> mx(N), sum(N), tl(N);
  ptdp::cpu::vocab_ce_local_max(mx.data(), logits.data(), N, ld, cols);
  // Pretend the other ranks raised the max a little: step 2 uses the global max.
  for (auto &m : mx) m = (cols ? m : -1.f) + 0.25f;
  ptdp::cpu::vocab_ce_local_sums(sum.data(), tl.data(), logits.data(), mx.data(), targets.data(),
                                 N, ld, cols, vocab_start);
  Dev dmx(N), dsum(N), dtl(N), dmx_global(mx);
  ptdp::cuda::vocab_ce_local_max(dmx.p, dl.p, N, ld, cols, 0);
  ptdp::cuda::vocab_ce_local_sums(dsum.p, dtl.p, dl.p, dmx_global.p, dt.p, N, ld, cols, vocab_start, 0);
  DevArray<T> dgrad(logits.size());
  ptdp::cuda::vocab_ce_backward(dgrad.p, dl.p, dmx_global.p, dsum.p, dt.p, N, ld, cols, vocab_start,
                                0.37f, 0);
  // In place (dlogits aliasing logits), as the model calls it.
  ptdp::cuda::vocab_ce_backward(dl.p, dl.p, dmx_global.p, dsum.p, dt.p, N, ld, cols, vocab_start,
                                0.37f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  char tag[128];
  std::snprintf(tag, sizeof tag, "vocab_ce %s N=%d ld=%d cols=%d start=%d", type_name<T>(), N, ld,
                cols, vocab_start);
  std::vector<float> local_max(N);
  ptdp::cpu::vocab_ce_local_max(local_max.data(), logits.data(), N, ld, cols);
  // A max and a copied logit are exact.
  compare((std::string(tag) + " max").c_str(), dmx.get(), local_max, 0.f, 0.f);
  compare((std::string(tag) + " target logit").c_str(), dtl.get(), tl, 0.f, 0.f);
  // The sums and gradients against float64 (the CPU twin's serial fp32 sum of
  // 50k terms is itself 1e-4 off; seen on the first H100 run): the GPU's sums
  // of partial sums and expf (within 2 ulp) stay within 1e-5 relative.
  std::vector<float> sum64(N), grad64(logits.size(), 0.f);
  for (int i = 0; i < N; i++) {
    double acc = 0;
    for (int j = 0; j < cols; j++) acc += std::exp((double)logits[(size_t)i * ld + j] - mx[i]);
    sum64[i] = (float)acc;
    const int64_t t = (int64_t)targets[i] - vocab_start;
    for (int j = 0; j < cols; j++)
      grad64[(size_t)i * ld + j] = (float)(0.37 * std::exp((double)logits[(size_t)i * ld + j] - mx[i]) / acc -
                                           (j == t ? 0.37 : 0.0));
  }
  compare((std::string(tag) + " sum exp").c_str(), dsum.get(), sum64, 0.f, 1e-5f);
  // dlogits = dloss * (p - onehot): 1e-5 relative from the sum, 1e-8 absolute for
  // the exponential's ulps on p ~ 1, then one rounding to T (relative, or
  // absolute for fp16 subnormals); padding exactly 0.
  const float eps = storage_eps<T>(), atol = 1e-8f + storage_tiny<T>();
  compare((std::string(tag) + " dlogits").c_str(), download(dgrad), grad64, atol, 1e-5f + eps);
  compare((std::string(tag) + " dlogits in place").c_str(), download(dl), grad64, atol, 1e-5f + eps);
}

// The global norm's sum of squares: double partials over fixed chunks, so the
// same on every run, and the CPU's up to the order of double additions.
// offset = 1 starts the array 2 or 4 bytes past an aligned address: the
// one-by-one path.
template <class T>
void test_sum_squares(size_t n, size_t offset = 0) {
  auto x = randn(n + offset, 40, 2.f);
  DevArray<T> dx = upload_rounded<T>(x);
  const double ref = ptdp::cpu::sum_squares(x.data() + offset, n);
  DevArray<double> scratch(std::max<size_t>(1, ptdp::cuda::sum_squares_scratch(n))), out(1), again(1);
  ptdp::cuda::sum_squares(out.p, dx.p + offset, n, scratch.p, 0);
  ptdp::cuda::sum_squares(again.p, dx.p + offset, n, scratch.p, 0);
  CUDA_OK(cudaDeviceSynchronize());
  const double got = out.get()[0], got2 = again.get()[0];
  const bool ok = std::fabs(got - ref) <= 1e-12 * ref + 1e-300 && got == got2;
  std::printf("%-48s rel err %.2g, repeat %s %s\n",
              ("sum_squares " + std::string(type_name<T>()) + " n=" + std::to_string(n) +
               (offset ? " unaligned" : "")).c_str(),
              ref ? std::fabs(got - ref) / ref : std::fabs(got), got == got2 ? "equal" : "DIFFERS",
              ok ? "ok" : "FAIL");
  if (!ok) failures++;
}

// Column sums accumulate into a nonzero fp32 vector; error bound on the terms.
template <class T>
void test_colsum(int N, int cols) {
  auto x = randn((size_t)N * cols, 50);
  DevArray<T> dx = upload_rounded<T>(x);
  auto out = randn(cols, 51);
  std::vector<float> bound(cols, 0.f);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < cols; j++) bound[j] += std::fabs(x[(size_t)i * cols + j]);
  Dev dout(out);
  ptdp::cpu::colsum_accumulate(out.data(), x.data(), N, cols);
  for (int j = 0; j < cols; j++) bound[j] = (N + 2) * std::ldexp(1.f, -23) * (bound[j] + std::fabs(out[j]));
  ptdp::cuda::colsum_accumulate(dout.p, dx.p, N, cols, 0);
  CUDA_OK(cudaDeviceSynchronize());
  compare_bound(("colsum " + std::string(type_name<T>()) + " N=" + std::to_string(N) + " cols=" +
                 std::to_string(cols)).c_str(),
                dout.get(), out, bound);
}

// One multiply, one rounding: exactly the host's result.
template <class T>
void test_scale(size_t n) {
  auto x = randn(n, 60);
  DevArray<T> dx = upload_rounded<T>(x);
  for (auto &v : x) v = from_storage(to_storage<T>(v * 0.3f));
  ptdp::cuda::scale_inplace(dx.p, n, 0.3f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  compare(("scale_inplace " + std::string(type_name<T>()) + " n=" + std::to_string(n)).c_str(),
          download(dx), x, 0.f, 0.f);
}

// Every pair of f32/bf16/f16 on values that exercise the rounding: ties,
// subnormals, overflow to infinity, infinities and NaN. Bits must equal the
// host's round-to-nearest-even (engine/core/dtype.h).
template <class S, class D>
void test_cast() {
  std::vector<float> v = randn(10007, 70, 100.f);
  const float special[] = {0.f, -0.f, 1.f, 65504.f, 65520.f, 70000.f, -1e30f, 1e-8f, 3e-39f,
                           1.00390625f, 1.01171875f, INFINITY, -INFINITY, NAN};
  for (size_t i = 0; i < sizeof special / sizeof *special; i++) v[i] = special[i];
  DevArray<S> src = upload_rounded<S>(v);
  DevArray<D> dst(v.size());
  ptdp::cuda::cast(dst.p, dtype_of<D>(), src.p, dtype_of<S>(), v.size(), 0);
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = dst.get();
  size_t bad = 0;
  for (size_t i = 0; i < v.size(); i++) {
    const D want = to_storage<D>(v[i]);
    const float a = from_storage(got[i]), b = from_storage(want);
    if (std::memcmp(&got[i], &want, sizeof(D)) != 0 && !(std::isnan(a) && std::isnan(b))) bad++;
  }
  std::printf("%-48s %zu of %zu differ %s\n",
              ("cast " + std::string(type_name<S>()) + " -> " + type_name<D>()).c_str(), bad,
              v.size(), bad ? "FAIL" : "ok");
  if (bad) failures++;
}

template <class S>
void test_casts_from() {
  test_cast<S, float>();
  test_cast<S, __nv_bfloat16>();
  test_cast<S, __half>();
}

template <class T>
void test_storage_type() {
  for (int cols : {0, 1, 257, 25152}) test_vocab_ce<T>(19, (cols + 127) / 128 * 128 + 128, cols, 25152, 50304);
  test_vocab_ce<T>(7, 50304, 50257, 0, 50257);
  test_vocab_ce<T>(5, 1001, 999, 0, 999);  // rows not 16-byte aligned: the one-by-one path
  for (size_t n : {0, 1, 65535, 65536, 1000003}) test_sum_squares<T>(n);
  test_sum_squares<T>(1000003, 1);
  for (auto [N, cols] : {std::pair{1, 1}, {300, 7}, {1000, 2048}, {37, 1003}}) test_colsum<T>(N, cols);
  test_scale<T>(100003);
  test_casts_from<T>();
}

}  // namespace

int main() {
  require_device();
  for (int V : {1, 257, 50257}) test_cross_entropy(23, (V + 127) / 128 * 128, V);
  for (size_t n : {1, 7, 4096, 1000003}) test_adamw(n, 1 + (int64_t)(n % 5), 1.0, ptdp::DType::f32);
  test_adamw(1000003, 3, 0.37, ptdp::DType::bf16);  // clipped, bf16 model copy
  test_adamw(4099, 2, 0.5, ptdp::DType::f16);
  test_storage_type<float>();
  test_storage_type<__nv_bfloat16>();
  test_storage_type<__half>();
  return gpu_test::finish();
}
