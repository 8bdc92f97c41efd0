// RMSNorm, SwiGLU and rotary embeddings in CUDA against their CPU twins
// (kernels/cpu), forward and backward, for fp32, bf16 and fp16 storage; inputs
// rounded to the storage type first, so the fp32 CPU reference reads exactly
// what the kernel reads. Bounds: fp32 arithmetic in another order (kF32,
// relative to the magnitude of the terms) plus one rounding of each stored
// result to T. Exits 77 (skipped) without a device.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace {

using namespace gpu_test;
using std::fabs;

constexpr float kF32 = 1e-5f;  // as test_cuda_layers: observed fp32 errors ~1e-7..1e-6

// ---- RMSNorm ------------------------------------------------------------------------
template <class T>
void test_rmsnorm(int N, int h) {
  const float eps_t = storage_eps<T>(), tiny = storage_tiny<T>();
  const std::string shape = "N=" + std::to_string(N) + " h=" + std::to_string(h);
  const size_t n = (size_t)N * h;
  auto x = randn(n, 31, 2.f), w = randn(h, 32);
  auto gx = upload_rounded<T>(x), gw = upload_rounded<T>(w);
  std::vector<float> y(n), r(N);
  ptdp::cpu::rmsnorm_forward(y.data(), r.data(), x.data(), w.data(), N, h, 1e-6f);
  DevArray<T> gy(n);
  Dev gr(N);
  ptdp::cuda::rmsnorm_forward<T>(gy.p, gr.p, gx.p, gw.p, N, h, 1e-6f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // out = x r w: fp32 error relative to |x| r |w|, plus one rounding to T.
  std::vector<float> by(n);
  for (size_t k = 0; k < n; k++)
    by[k] = kF32 * fabs(x[k]) * r[k / h] * fabs(w[k % h]) + eps_t * fabs(y[k]) + tiny;
  compare_bound(label<T>("rmsnorm", shape, "out").c_str(), download(gy), y, by);
  compare(label<T>("rmsnorm", shape, "rstd").c_str(), gr.get(), r, 0.f, kF32);

  // Backward from the CPU's rstd, accumulating into random dx, dw.
  auto dout = randn(n, 33), dx = randn(n, 34), dw = randn(h, 35);
  auto gdout = upload_rounded<T>(dout), gdx = upload_rounded<T>(dx);
  const std::vector<float> dx0 = dx, dw0 = dw;
  Dev gdw(dw), cr(r);
  ptdp::cpu::rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), r.data(), N, h);
  ptdp::cuda::rmsnorm_backward<T>(gdx.p, gdw.p, gdout.p, gx.p, gw.p, cr.p, N, h, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // dx0 + (g w - xhat mean(g w xhat)) r: relative to the terms (the mean to the
  // mean of its |terms|), plus one rounding; dw: fp32 sums over N rows.
  std::vector<float> bdx(n), bdw(h);
  for (int j = 0; j < h; j++) bdw[j] = fabs(dw0[j]);
  for (int i = 0; i < N; i++) {
    double sgx = 0;
    for (int j = 0; j < h; j++) {
      const size_t k = (size_t)i * h + j;
      const float xhat = x[k] * r[i];
      sgx += fabs(dout[k] * w[j] * xhat);
      bdw[j] += fabs(dout[k] * xhat);
    }
    for (int j = 0; j < h; j++) {
      const size_t k = (size_t)i * h + j;
      const float terms = (fabs(dout[k] * w[j]) + fabs(x[k] * r[i]) * sgx / h) * r[i];
      bdx[k] = kF32 * (fabs(dx0[k]) + terms) + eps_t * fabs(dx[k]) + tiny;
    }
  }
  for (int j = 0; j < h; j++) bdw[j] *= kF32;
  const auto gdx1 = download(gdx), gdw1 = gdw.get();
  compare_bound(label<T>("rmsnorm", shape, "dx").c_str(), gdx1, dx, bdx);
  compare_bound(label<T>("rmsnorm", shape, "dw").c_str(), gdw1, dw, bdw);
  // Again: the same bits (column sums in a fixed order).
  std::vector<float> dx0_copy = dx0;  // values of T already: rounding keeps them
  auto gdx2 = upload_rounded<T>(dx0_copy);
  Dev gdw2(dw0);
  ptdp::cuda::rmsnorm_backward<T>(gdx2.p, gdw2.p, gdout.p, gx.p, gw.p, cr.p, N, h, 0);
  CUDA_OK(cudaDeviceSynchronize());
  compare(label<T>("rmsnorm", shape, "dx rerun").c_str(), download(gdx2), gdx1, 0, 0);
  compare(label<T>("rmsnorm", shape, "dw rerun").c_str(), gdw2.get(), gdw1, 0, 0);
}

// ---- SwiGLU -------------------------------------------------------------------------
template <class T>
void test_swiglu(int N, int f, bool with_bias) {
  const float eps_t = storage_eps<T>(), tiny = storage_tiny<T>();
  const std::string shape =
      "N=" + std::to_string(N) + " f=" + std::to_string(f) + (with_bias ? " bias" : "");
  const size_t n = (size_t)N * f;
  auto y = randn(2 * n, 36, 2.5f), bias = randn(2 * f, 37);
  auto gy = upload_rounded<T>(y), gbias = upload_rounded<T>(bias);
  std::vector<float> z(2 * n), out(n);
  ptdp::cpu::swiglu_forward(z.data(), out.data(), y.data(), with_bias ? bias.data() : nullptr, N, f);
  DevArray<T> gz(2 * n), gout(n);
  ptdp::cuda::swiglu_forward<T>(gz.p, gout.p, gy.p, with_bias ? gbias.p : nullptr, N, f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // z = y + bias: exact in fp32, then one rounding. out = g sigmoid(g) u: expf
  // against the CPU's exp (~1e-7 relative each), relative to |g| |u|.
  std::vector<float> bout(n);
  for (size_t k = 0; k < n; k++) {
    const size_t row = k / f, j = k % f;
    const float g = z[row * 2 * f + j], u = z[row * 2 * f + f + j];
    bout[k] = kF32 * fabs(g * u) + eps_t * fabs(out[k]) + tiny;
  }
  const auto gz1 = download(gz), gout1 = download(gout);
  compare(label<T>("swiglu", shape, "z").c_str(), gz1, z, tiny, eps_t);
  compare_bound(label<T>("swiglu", shape, "out").c_str(), gout1, out, bout);
  // z aliasing y: the same bits.
  auto gzy = upload_rounded<T>(y);
  DevArray<T> gout2(n);
  ptdp::cuda::swiglu_forward<T>(gzy.p, gout2.p, gzy.p, with_bias ? gbias.p : nullptr, N, f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  compare(label<T>("swiglu", shape, "z (z = y)").c_str(), download(gzy), gz1, 0, 0);
  compare(label<T>("swiglu", shape, "out (z = y)").c_str(), download(gout2), gout1, 0, 0);

  // Backward from z as stored, accumulating into a random dbias.
  for (size_t k = 0; k < 2 * n; k++) z[k] = gz1[k];
  auto dout = randn(n, 38), dbias = randn(2 * f, 39);
  auto gdout = upload_rounded<T>(dout), gzin = upload_rounded<T>(z);
  const std::vector<float> dbias0 = dbias;
  std::vector<float> dz(2 * n);
  ptdp::cpu::swiglu_backward(dz.data(), dbias.data(), dout.data(), z.data(), N, f);
  DevArray<T> gdz(2 * n);
  Dev gdbias(dbias0);
  ptdp::cuda::swiglu_backward<T>(gdz.p, gdbias.p, gdout.p, gzin.p, N, f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // d gate = d u s (1 + g (1 - s)): relative to |d| |u| (1 + |g|); d up = d g s:
  // to |d| |g|. dbias sums the stored dz: their bounds plus fp32 sums.
  std::vector<float> bdz(2 * n), bdb(2 * f);
  for (int j = 0; j < 2 * f; j++) bdb[j] = kF32 * fabs(dbias0[j]);
  for (size_t k = 0; k < n; k++) {
    const size_t row = k / f, j = k % f, gi = row * 2 * f + j, ui = gi + f;
    const float g = z[gi], u = z[ui], d = dout[k];
    bdz[gi] = kF32 * fabs(d * u) * (1 + fabs(g)) + eps_t * fabs(dz[gi]) + tiny;
    bdz[ui] = kF32 * fabs(d * g) + eps_t * fabs(dz[ui]) + tiny;
    bdb[j] += bdz[gi] + kF32 * fabs(dz[gi]);
    bdb[f + j] += bdz[ui] + kF32 * fabs(dz[ui]);
  }
  compare_bound(label<T>("swiglu", shape, "dz").c_str(), download(gdz), dz, bdz);
  compare_bound(label<T>("swiglu", shape, "dbias").c_str(), gdbias.get(), dbias, bdb);
}

// ---- rotary embeddings -------------------------------------------------------------
// The model's qkv layout [s, b, heads, 3, hd]: q of head k at column 3 k hd, k at 3 k hd + hd.
template <class T>
void test_rope(int s, int b, int heads, int hd) {
  const float eps_t = storage_eps<T>(), tiny = storage_tiny<T>();
  const std::string shape = "s=" + std::to_string(s) + " b=" + std::to_string(b) + " heads=" +
                            std::to_string(heads) + " hd=" + std::to_string(hd);
  const int ld = heads * 3 * hd, half = hd / 2;
  const size_t n = (size_t)s * b * ld;
  std::vector<float> cos_t((size_t)s * half), sin_t((size_t)s * half);
  ptdp::cpu::rope_table(cos_t.data(), sin_t.data(), s, hd, 10000.0);
  Dev gcos(cos_t), gsin(sin_t);
  auto x = randn(n, 40, 2.f);
  auto gx = upload_rounded<T>(x);
  const std::vector<float> x0 = x;
  for (int part = 0; part < 2; part++) {  // q, then k
    ptdp::cpu::rope_rotate(x.data() + part * hd, cos_t.data(), sin_t.data(), s, b, ld, heads,
                           3 * hd, hd, false);
    ptdp::cuda::rope_rotate<T>(gx.p + part * hd, gcos.p, gsin.p, s, b, ld, heads, 3 * hd, hd,
                               false, 0);
  }
  CUDA_OK(cudaDeviceSynchronize());
  // a c - e s: relative to |a| + |e|, plus one rounding; v untouched (bound 0).
  std::vector<float> bx(n);
  for (size_t k = 0; k < n; k++) {
    const int c = (int)(k % ld), j = c % (3 * hd);
    if (j >= 2 * hd) continue;  // v
    const size_t pair = j % hd < half ? k + half : k - half;
    bx[k] = kF32 * (fabs(x0[k]) + fabs(x0[pair])) + eps_t * fabs(x[k]) + tiny;
  }
  const auto gx1 = download(gx);
  compare_bound(label<T>("rope", shape, "q, k").c_str(), gx1, x, bx);
  // The inverse on the rotated values: the CPU's inverse of the same input.
  std::vector<float> back = gx1;
  for (int part = 0; part < 2; part++) {
    ptdp::cpu::rope_rotate(back.data() + part * hd, cos_t.data(), sin_t.data(), s, b, ld, heads,
                           3 * hd, hd, true);
    ptdp::cuda::rope_rotate<T>(gx.p + part * hd, gcos.p, gsin.p, s, b, ld, heads, 3 * hd, hd,
                               true, 0);
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (size_t k = 0; k < n; k++) {
    const int j = (int)(k % ld) % (3 * hd);
    if (j >= 2 * hd) continue;
    const size_t pair = j % hd < half ? k + half : k - half;
    bx[k] = kF32 * (fabs(gx1[k]) + fabs(gx1[pair])) + eps_t * fabs(back[k]) + tiny;
  }
  compare_bound(label<T>("rope", shape, "inverse").c_str(), download(gx), back, bx);
}

template <class T>
void test_all() {
  // h: scalar fallbacks (1, 7), rows in registers (384 .. 2048), the loop
  // fallback (4096); N = 37: a partial chunk of rows.
  for (int h : {1, 7, 384, 1000, 2048, 4096}) test_rmsnorm<T>(37, h);
  for (int f : {1, 6, 1003, 1536})
    for (bool bias : {false, true}) test_swiglu<T>(29, f, bias);
  test_rope<T>(7, 3, 2, 8);
  test_rope<T>(33, 2, 4, 128);
  test_rope<T>(5, 1, 3, 6);  // hd not a multiple of 4
}

}  // namespace

int main() {
  require_device();
  test_all<float>();
  test_all<__nv_bfloat16>();
  test_all<__half>();
  return gpu_test::finish();
}
