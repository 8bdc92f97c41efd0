// LayerNorm, bias+GeLU and scale+mask+softmax in CUDA against the CPU kernels
// (kernels/cpu), forward and backward, for fp32, bf16 and fp16 storage. The
// inputs are fresh random values rounded to the storage type, so the fp32 CPU
// reference sees exactly what the kernel reads; accumulated outputs (+=) start
// from random values. Outputs are poisoned with NaN first, so an element a
// kernel forgets to write fails. Where the API allows aliasing, the aliased call
// must give the same bits as the plain one. Exits 77 (skipped) without a device.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace {

using namespace gpu_test;
using std::fabs;

// fp32 arithmetic in another order (warp trees vs the CPU's sequential sums,
// FMAs, expf and tanhf vs the CPU's polynomials): 1e-5 relative to the
// magnitude of the terms that make a result (observed errors are ~1e-7..1e-6).
constexpr float kF32 = 1e-5f;

// A copy of v on the device as T (v already holds values of T).
template <class T>
DevArray<T> upload(std::vector<float> v) {
  return upload_rounded<T>(v);
}

// ---- LayerNorm ------------------------------------------------------------------
template <class T>
void test_layernorm(int N, int h) {
  const float eps_t = storage_eps<T>(), tiny = storage_tiny<T>();
  const std::string shape = "N=" + std::to_string(N) + " h=" + std::to_string(h);
  const size_t n = (size_t)N * h;

  // Forward.
  auto x = randn(n, 1, 3.f), w = randn(h, 2), b = randn(h, 3);
  for (auto &v : x) v += 0.5f;  // rows with a mean away from 0
  auto gx = upload_rounded<T>(x), gw = upload_rounded<T>(w), gb = upload_rounded<T>(b);
  std::vector<float> y(n), m(N), r(N);
  ptdp::cpu::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, h,
                               1e-5f);
  DevArray<T> gy(n);
  Dev gm(N), gr(N);
  ptdp::cuda::layernorm_forward<T>(gy.p, gm.p, gr.p, gx.p, gw.p, gb.p, N, h, 1e-5f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // out = (x - m) * r * w + b: fp32 error relative to the terms (|x| + |m|) r |w|
  // + |b| (x - m cancels, so not relative to xhat), plus
  // one rounding of the result to T. mean: relative to the mean of |x|.
  std::vector<float> by(n), bm(N);
  for (int i = 0; i < N; i++) {
    double ax = 0;
    for (int j = 0; j < h; j++) {
      const size_t k = (size_t)i * h + j;
      const float xhat = (x[k] - m[i]) * r[i];
      by[k] = kF32 * ((fabs(x[k]) + fabs(m[i])) * r[i] * fabs(w[j]) + fabs(b[j])) + eps_t * fabs(y[k]) + tiny;
      ax += fabs(x[k]);
    }
    bm[i] = kF32 * (float)(ax / h);
  }
  compare_bound(label<T>("layernorm", shape, "out").c_str(), download(gy), y, by);
  compare_bound(label<T>("layernorm", shape, "mean").c_str(), gm.get(), m, bm);
  compare(label<T>("layernorm", shape, "rstd").c_str(), gr.get(), r, 0.f, kF32);

  // Backward from the CPU's mean and rstd, accumulating into random dx, dw, db.
  auto dout = randn(n, 4), dx = randn(n, 5), dw = randn(h, 6), db = randn(h, 7);
  auto gdout = upload_rounded<T>(dout), gdx = upload_rounded<T>(dx);
  const std::vector<float> dx0 = dx, dw0 = dw, db0 = db;
  Dev gdw(dw), gdb(db), cm(m), cr(r);
  ptdp::cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                                m.data(), r.data(), N, h);
  ptdp::cuda::layernorm_backward<T>(gdx.p, gdw.p, gdb.p, gdout.p, gx.p, gw.p, cm.p, cr.p, N, h, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // dx0 + (g*w - mean(g*w) - xhat * mean(g*w*xhat)) * rstd: relative to the terms
  // (the means to the means of their |terms|), plus one rounding to T.
  // dw, db: fp32 sums over N rows, relative to dw0, db0 and the |terms|.
  std::vector<float> bdx(n), bdw(h), bdb(h);
  for (int j = 0; j < h; j++) bdw[j] = fabs(dw0[j]), bdb[j] = fabs(db0[j]);
  for (int i = 0; i < N; i++) {
    double sg = 0, sgx = 0;
    for (int j = 0; j < h; j++) {
      const size_t k = (size_t)i * h + j;
      const float xhat = (x[k] - m[i]) * r[i];
      sg += fabs(dout[k] * w[j]);
      sgx += fabs(dout[k] * w[j] * xhat);
      bdw[j] += fabs(dout[k] * xhat);
      bdb[j] += fabs(dout[k]);
    }
    for (int j = 0; j < h; j++) {
      const size_t k = (size_t)i * h + j;
      const float xhat = (x[k] - m[i]) * r[i];
      const float terms = (fabs(dout[k] * w[j]) + sg / h + fabs(xhat) * sgx / h) * r[i];
      bdx[k] = kF32 * (fabs(dx0[k]) + terms) + eps_t * fabs(dx[k]) + tiny;
    }
  }
  for (int j = 0; j < h; j++) bdw[j] *= kF32, bdb[j] *= kF32;
  const auto gdx1 = download(gdx), gdw1 = gdw.get(), gdb1 = gdb.get();
  compare_bound(label<T>("layernorm", shape, "dx").c_str(), gdx1, dx, bdx);
  compare_bound(label<T>("layernorm", shape, "dw").c_str(), gdw1, dw, bdw);
  compare_bound(label<T>("layernorm", shape, "db").c_str(), gdb1, db, bdb);

  // The same call again: the same bits (column sums in a fixed order).
  auto gdx2 = upload<T>(dx0);
  Dev gdw2(dw0), gdb2(db0);
  ptdp::cuda::layernorm_backward<T>(gdx2.p, gdw2.p, gdb2.p, gdout.p, gx.p, gw.p, cm.p, cr.p, N, h,
                                    0);
  CUDA_OK(cudaDeviceSynchronize());
  compare(label<T>("layernorm", shape, "dx rerun").c_str(), download(gdx2), gdx1, 0, 0);
  compare(label<T>("layernorm", shape, "dw rerun").c_str(), gdw2.get(), gdw1, 0, 0);
  compare(label<T>("layernorm", shape, "db rerun").c_str(), gdb2.get(), gdb1, 0, 0);
}

// ---- bias + GeLU ------------------------------------------------------------------
template <class T>
void test_bias_gelu(int N, int f) {
  const float eps_t = storage_eps<T>(), tiny = storage_tiny<T>();
  const std::string shape = "N=" + std::to_string(N) + " f=" + std::to_string(f);
  const size_t n = (size_t)N * f;

  // Forward.
  auto y = randn(n, 8, 2.f), bias = randn(f, 9);
  auto gyin = upload_rounded<T>(y), gbias = upload_rounded<T>(bias);
  std::vector<float> z(n), out(n);
  ptdp::cpu::bias_gelu_forward(z.data(), out.data(), y.data(), bias.data(), N, f);
  DevArray<T> gz(n), gout(n);
  ptdp::cuda::bias_gelu_forward<T>(gz.p, gout.p, gyin.p, gbias.p, N, f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // z = y + bias is exact in fp32, then rounded once to T. out: tanhf against the
  // CPU's polynomial tanh (each within ~2e-7) times 0.5 |z|: 2e-6 absolute.
  const auto gz1 = download(gz), gout1 = download(gout);
  compare(label<T>("bias_gelu", shape, "z").c_str(), gz1, z, tiny, eps_t);
  compare(label<T>("bias_gelu", shape, "out").c_str(), gout1, out, 2e-6f, kF32 + eps_t);
  // z aliasing y.
  auto gzy = upload<T>(y);
  DevArray<T> gout2(n);
  ptdp::cuda::bias_gelu_forward<T>(gzy.p, gout2.p, gzy.p, gbias.p, N, f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  compare(label<T>("bias_gelu", shape, "z (z = y)").c_str(), download(gzy), gz1, 0, 0);
  compare(label<T>("bias_gelu", shape, "out (z = y)").c_str(), download(gout2), gout1, 0, 0);

  // Backward from z as stored (rounded), accumulating into a random dbias.
  for (size_t k = 0; k < n; k++) z[k] = gz1[k];
  auto dout = randn(n, 10), dbias = randn(f, 11);
  auto gdout = upload_rounded<T>(dout), gzin = upload<T>(z);
  const std::vector<float> dbias0 = dbias;
  std::vector<float> dz(n);
  ptdp::cpu::bias_gelu_backward(dz.data(), dbias.data(), dout.data(), z.data(), N, f);
  DevArray<T> gdz(n);
  Dev gdbias(dbias0);
  ptdp::cuda::bias_gelu_backward<T>(gdz.p, gdbias.p, gdout.p, gzin.p, N, f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // dz = dout * gelu'(z): gelu' moves with tanh by 0.5 - z * tanh * du, du <= 0.8 (1 +
  // 0.134 z^2), below (1 + |z|)^3; times the two tanh errors (~2e-7 each) with room:
  // 1e-6 (1 + |z|)^3 |dout|, plus one rounding to T. dbias sums the stored dz: the
  // dz bounds, plus fp32 sums relative to |dbias0| and the |dz|.
  std::vector<float> bdz(n), bdb(f);
  for (int j = 0; j < f; j++) bdb[j] = kF32 * fabs(dbias0[j]);
  for (size_t k = 0; k < n; k++) {
    const float a = 1.f + fabs(z[k]);
    bdz[k] = 1e-6f * a * a * a * fabs(dout[k]) + eps_t * fabs(dz[k]) + tiny;
    bdb[k % f] += bdz[k] + kF32 * fabs(dz[k]);
  }
  const auto gdz1 = download(gdz), gdb1 = gdbias.get();
  compare_bound(label<T>("bias_gelu", shape, "dz").c_str(), gdz1, dz, bdz);
  compare_bound(label<T>("bias_gelu", shape, "dbias").c_str(), gdb1, dbias, bdb);
  // dz aliasing dout: the same bits, dbias included (a fixed order).
  auto gdzo = upload<T>(dout);
  Dev gdbias2(dbias0);
  ptdp::cuda::bias_gelu_backward<T>(gdzo.p, gdbias2.p, gdzo.p, gzin.p, N, f, 0);
  CUDA_OK(cudaDeviceSynchronize());
  compare(label<T>("bias_gelu", shape, "dz (dz = dout)").c_str(), download(gdzo), gdz1, 0, 0);
  compare(label<T>("bias_gelu", shape, "dbias (dz = dout)").c_str(), gdbias2.get(), gdb1, 0, 0);
}

// ---- scale + mask + softmax -------------------------------------------------------
// A random mask (~30% masked) with row s_q / 2 fully masked; none when !masked.
std::vector<uint8_t> make_mask(int s_q, int s_k, bool masked) {
  if (!masked) return {};
  std::mt19937 rng(14);
  std::vector<uint8_t> mk((size_t)s_q * s_k);
  for (auto &v : mk) v = rng() % 10 < 3;
  for (int j = 0; j < s_k; j++) mk[(size_t)(s_q / 2) * s_k + j] = 1;
  return mk;
}

template <class T>
void test_softmax(int batch, int s_q, int s_k, bool causal, bool masked) {
  const float eps_t = storage_eps<T>(), tiny = storage_tiny<T>(), scale = 0.125f;
  const std::string shape = "batch=" + std::to_string(batch) + " s=" + std::to_string(s_q) + "x" +
                            std::to_string(s_k) + (causal ? " causal" : "") +
                            (masked ? " mask" : "");
  const size_t n = (size_t)batch * s_q * s_k;
  const auto mk = make_mask(s_q, s_k, masked);
  DevArray<uint8_t> gmk(mk.size());
  if (masked) CUDA_OK(cudaMemcpy(gmk.p, mk.data(), mk.size(), cudaMemcpyHostToDevice));
  const uint8_t *mask = masked ? gmk.p : nullptr;

  // Forward.
  auto S = randn(n, 12, 4.f);
  auto gS = upload_rounded<T>(S);
  std::vector<float> P(n);
  ptdp::cpu::scale_mask_softmax_forward(P.data(), S.data(), batch, s_q, s_k, scale, causal,
                                        masked ? mk.data() : nullptr);
  DevArray<T> gP(n);
  ptdp::cuda::scale_mask_softmax_forward<T>(gP.p, gS.p, batch, s_q, s_k, scale, causal, mask, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // P in [0, 1]: expf against the CPU's exp (a few ulp) and the sum in another
  // order: 1e-6 absolute + 1e-5 relative, plus one rounding to T. Masked entries
  // (and fully masked rows) must be exactly 0.
  std::vector<float> bP(n);
  for (size_t k = 0; k < n; k++) bP[k] = P[k] == 0.f ? 0.f : 1e-6f + (kF32 + eps_t) * P[k] + tiny;
  const auto gP1 = download(gP);
  compare_bound(label<T>("softmax", shape, "P").c_str(), gP1, P, bP);
  // P aliasing S.
  auto gPS = upload<T>(S);
  ptdp::cuda::scale_mask_softmax_forward<T>(gPS.p, gPS.p, batch, s_q, s_k, scale, causal, mask, 0);
  CUDA_OK(cudaDeviceSynchronize());
  compare(label<T>("softmax", shape, "P (P = S)").c_str(), download(gPS), gP1, 0, 0);

  // Backward from P as stored (rounded).
  auto dP = randn(n, 13);
  auto gdP = upload_rounded<T>(dP), gPin = upload<T>(gP1);
  std::vector<float> dS(n);
  ptdp::cpu::scale_mask_softmax_backward(dS.data(), gP1.data(), dP.data(), batch, s_q, s_k, scale);
  DevArray<T> gdS(n);
  ptdp::cuda::scale_mask_softmax_backward<T>(gdS.p, gPin.p, gdP.p, batch, s_q, s_k, scale, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // scale * P * (dP - sum P * dP): relative to scale * P * (|dP| + sum |P * dP|),
  // plus one rounding to T (0 where P is 0).
  std::vector<float> bdS(n);
  for (size_t row = 0; row < n / s_k; row++) {
    const float *p = gP1.data() + row * s_k, *g = dP.data() + row * s_k;
    double dot = 0;
    for (int j = 0; j < s_k; j++) dot += fabs(p[j] * g[j]);
    for (int j = 0; j < s_k; j++) {
      const size_t k = row * s_k + j;
      bdS[k] = kF32 * scale * p[j] * (fabs(g[j]) + (float)dot) + eps_t * fabs(dS[k]) + tiny;
    }
  }
  const auto gdS1 = download(gdS);
  compare_bound(label<T>("softmax", shape, "dS").c_str(), gdS1, dS, bdS);
  // dS aliasing dP.
  auto gdSP = upload<T>(dP);
  ptdp::cuda::scale_mask_softmax_backward<T>(gdSP.p, gPin.p, gdSP.p, batch, s_q, s_k, scale, 0);
  CUDA_OK(cudaDeviceSynchronize());
  compare(label<T>("softmax", shape, "dS (dS = dP)").c_str(), download(gdSP), gdS1, 0, 0);
}

template <class T>
void test_all() {
  // h: scalar fallbacks (1, 7), 16 bytes for fp32 only (12), rows in registers
  // (384 .. 2048), the loop fallback (4096); N = 37: a partial chunk of rows.
  for (int h : {1, 7, 12, 384, 1000, 2048, 4096}) test_layernorm<T>(37, h);
  test_layernorm<T>(300, 1000);
  test_layernorm<T>(300, 2048);  // several chunks of the register kernel, 8 packs a lane (16-bit)
  for (int f : {1, 6, 1003, 1536}) test_bias_gelu<T>(29, f);
  // s: scalar (1, 5, 257), rows in registers (64 .. 2048); s_k = 4104 the loop
  // fallback with 16-byte rows; 3x7 and 5x4104 non-square (causal: j > i masked).
  for (int s : {1, 5, 64, 257, 1024, 2048})
    for (bool causal : {false, true}) test_softmax<T>(3, s, s, causal, false);
  for (int s : {1, 5, 257, 1024})
    for (bool causal : {false, true}) test_softmax<T>(2, s, s, causal, true);
  for (bool causal : {false, true}) {
    test_softmax<T>(2, 3, 7, causal, true);
    test_softmax<T>(2, 5, 4104, causal, false);
    test_softmax<T>(2, 5, 4104, causal, true);
  }
}

}  // namespace

int main() {
  require_device();
  test_all<float>();
  test_all<__nv_bfloat16>();
  test_all<__half>();
  return gpu_test::finish();
}
