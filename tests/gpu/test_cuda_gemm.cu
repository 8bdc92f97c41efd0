// cuBLASLt GEMMs (kernels/cuda/gemm.cu) against a float64 reference computed
// from the same (16-bit-rounded) inputs: every transpose combination, padded
// leading dimensions, beta = 0 and beta != 0, strided batches, unaligned
// operands, and the argument errors. Exits 77 without a device.
#include <algorithm>
#include <cstring>

#include "engine/core/dtype.h"
#include "engine/core/status.h"
#include "kernels/cuda/gemm.h"
#include "tests/gpu/gpu_test_util.h"

namespace {

using namespace gpu_test;
using ptdp::DType;

// Host values as they are stored in dtype dt: rounded for 16-bit types.
std::vector<float> stored(std::vector<float> v, DType dt) {
  for (auto &x : v) x = ptdp::round_to(dt, x);
  return v;
}

// Device copy of v in dtype dt (v already representable), as raw bytes.
DevArray<uint8_t> upload(const std::vector<float> &v, DType dt) {
  const size_t es = ptdp::dtype_size(dt);
  std::vector<uint8_t> bytes(v.size() * es);
  for (size_t i = 0; i < v.size(); i++) {
    if (dt == DType::f32) {
      std::memcpy(&bytes[i * 4], &v[i], 4);
    } else {
      const uint16_t h = dt == DType::bf16 ? ptdp::float_to_bf16(v[i]) : ptdp::float_to_f16(v[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return DevArray<uint8_t>(bytes);
}

std::vector<float> download(const DevArray<uint8_t> &d, DType dt) {
  const auto bytes = d.get();
  const size_t es = ptdp::dtype_size(dt), n = bytes.size() / es;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) {
    if (dt == DType::f32) {
      std::memcpy(&v[i], &bytes[i * 4], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      v[i] = dt == DType::bf16 ? ptdp::bf16_to_float(h) : ptdp::f16_to_float(h);
    }
  }
  return v;
}

struct Case {
  DType dt;
  bool ta, tb;
  int M, N, K, pad, batch;
  float alpha, beta;
  int offset;  // elements added to every pointer: tests unaligned operands
  bool c_f32 = false;  // C in fp32 while A and B are dt (a 16-bit run's GEMMs on CUDA)
};

void run_case(ptdp::cuda::Gemm &gemm, const Case &c) {
  const int lda = (c.ta ? c.M : c.K) + c.pad, ldb = (c.tb ? c.K : c.N) + c.pad, ldc = c.N + c.pad;
  const int64_t sA = (int64_t)(c.ta ? c.K : c.M) * lda + 5, sB = (int64_t)(c.tb ? c.N : c.K) * ldb + 3,
                sC = (int64_t)c.M * ldc + 1;
  static unsigned seed = 100;
  const auto A = stored(randn(c.offset + sA * c.batch, seed++), c.dt);
  const auto B = stored(randn(c.offset + sB * c.batch, seed++), c.dt);
  const DType ct = c.c_f32 ? DType::f32 : c.dt;
  const auto C0 = stored(randn(c.offset + sC * c.batch, seed++), ct);
  auto dA = upload(A, c.dt), dB = upload(B, c.dt), dC = upload(C0, ct);
  const size_t es = ptdp::dtype_size(c.dt), esc = ptdp::dtype_size(ct);
  gemm.run(c.dt, ct, c.ta, c.tb, c.M, c.N, c.K, c.alpha, dA.p + c.offset * es, lda, sA,
           dB.p + c.offset * es, ldb, sB, c.beta, dC.p + c.offset * esc, ldc, sC, c.batch, 0);
  CUDA_OK(cudaDeviceSynchronize());
  const auto C = download(dC, ct);

  // Per element: |gpu - ref| <= u * |ref| + (K + 2) * 2^-24 * sum |terms|: the
  // rounding of the stored result (u: half an ulp of the type, doubled for the
  // fp32 error that can push it over a rounding boundary) plus the worst case of
  // K fp32 additions.
  const double u = ct == DType::f32 ? 0 : ct == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
  const double gamma = (c.K + 2) * std::ldexp(1.0, -24);
  size_t bad = 0, checked = 0;
  double worst = 0;
  std::vector<char> touched(C.size(), 0);
  for (int bi = 0; bi < c.batch; bi++) {
    const float *a = A.data() + c.offset + bi * sA, *b = B.data() + c.offset + bi * sB;
    for (int i = 0; i < c.M; i++)
      for (int j = 0; j < c.N; j++) {
        double ref = 0, mag = 0;
        for (int k = 0; k < c.K; k++) {
          const double x = c.ta ? a[(size_t)k * lda + i] : a[(size_t)i * lda + k];
          const double y = c.tb ? b[(size_t)j * ldb + k] : b[(size_t)k * ldb + j];
          ref += x * y;
          mag += std::fabs(x * y);
        }
        const size_t at = c.offset + bi * sC + (size_t)i * ldc + j;
        ref = c.alpha * ref + c.beta * C0[at];
        mag = std::fabs(c.alpha) * mag + std::fabs(c.beta * C0[at]);
        const double d = std::fabs(C[at] - ref);
        if (!(d <= u * std::fabs(ref) + gamma * mag)) bad++;
        worst = std::max(worst, d / (mag + 1e-30));
        touched[at] = 1;
        checked++;
      }
  }
  // Elements outside op(A) op(B)'s footprint (padding, gaps between batches) are untouched.
  size_t clobbered = 0;
  for (size_t i = 0; i < C.size(); i++)
    if (!touched[i] && std::memcmp(&C[i], &C0[i], 4) != 0) clobbered++;
  char tag[160];
  std::snprintf(tag, sizeof tag, "gemm %s%s %c%c M=%d N=%d K=%d pad=%d batch=%d beta=%g off=%d",
                ptdp::dtype_name(c.dt), c.c_f32 ? "->f32" : "", c.ta ? 'T' : 'N', c.tb ? 'T' : 'N',
                c.M, c.N, c.K, c.pad, c.batch, c.beta, c.offset);
  std::printf("%-72s worst err/|terms| %.2g %s\n", tag, worst,
              bad || clobbered ? "FAIL" : "ok");
  if (bad || clobbered) {
    std::printf("  %zu of %zu out of tolerance, %zu padding elements overwritten\n", bad, checked,
                clobbered);
    failures++;
  }
}

double gelu_tanh(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1 + std::tanh(u));
}
double gelu_tanh_grad(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}

// A GEMM with a fused epilogue (run_fused, C = A op(B), the linear layers'
// shapes) against float64 from the same inputs: bias: C = AB + bias; bias_gelu:
// aux = AB + bias, C = gelu(aux); dgelu: C = AB * gelu'(aux_in). Bounds: one
// rounding of the stored result (two for dgelu), K fp32 additions, and for the GeLU forms 1e-3
// (absolute, resp. relative to AB) for cuBLASLt's own form of the GeLU, which
// is not the CPU's tanh polynomial bit for bit. A wrong layout, bias
// orientation or aux leading dimension gives errors of order 1.
void run_fused_case(ptdp::cuda::Gemm &gemm, ptdp::cuda::Gemm::Epilogue e, DType dt, bool tb, int M,
                    int N, int K) {
  using E = ptdp::cuda::Gemm::Epilogue;
  static unsigned seed = 500;
  const int ldb = tb ? K : N;
  const auto A = stored(randn((size_t)M * K, seed++), dt);
  const auto B = stored(randn((size_t)K * N, seed++, 1.f / std::sqrt((float)K)), dt);
  const auto bias = stored(randn(N, seed++), dt);
  const auto aux_in = stored(randn((size_t)M * N, seed++, 2.f), dt);
  auto dA = upload(A, dt), dB = upload(B, dt), dbias = upload(bias, dt), daux = upload(aux_in, dt);
  DevArray<uint8_t> dC((size_t)M * N * ptdp::dtype_size(dt));
  const bool fused = gemm.run_fused(e, dt, tb, M, N, K, dA.p, K, dB.p, ldb, dC.p,
                                    e == E::dgelu ? nullptr : dbias.p, daux.p, 0);
  CUDA_OK(cudaDeviceSynchronize());
  const char *name = e == E::bias ? "bias" : e == E::bias_gelu ? "bias_gelu" : "dgelu";
  char tag[160];
  std::snprintf(tag, sizeof tag, "gemm+%s %s N%c M=%d N=%d K=%d", name, ptdp::dtype_name(dt),
                tb ? 'T' : 'N', M, N, K);
  if (!fused) {  // every model shape has an algorithm on sm_80 and later
    std::printf("%-72s FAIL (cuBLASLt has no algorithm)\n", tag);
    failures++;
    return;
  }
  const auto C = download(dC, dt), aux = download(daux, dt);
  const double u = dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048, gamma = (K + 2) * std::ldexp(1.0, -24);
  size_t bad = 0;
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double acc = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        const double t = (double)A[(size_t)i * K + k] * B[tb ? (size_t)j * K + k : (size_t)k * N + j];
        acc += t;
        mag += std::fabs(t);
      }
      const size_t at = (size_t)i * N + j;
      double ref, bound;
      if (e == E::dgelu) {
        const double g = gelu_tanh_grad(aux_in[at]);
        ref = acc * g;
        // Two roundings: cuBLASLt may round the product to 16 bits before
        // multiplying by the gradient (seen on an H100: 1.5x one rounding's bound).
        bound = 2 * u * std::fabs(ref) + std::fabs(g) * gamma * mag + 1e-3 * std::fabs(acc);
      } else {
        const double z = acc + bias[j];
        const double dz = std::fabs(aux[at] - z), bz = u * std::fabs(z) + gamma * (mag + std::fabs(bias[j]));
        if (e == E::bias_gelu && !(dz <= bz)) bad++;  // aux: the GeLU's input
        ref = e == E::bias ? z : gelu_tanh(z);
        bound = e == E::bias ? bz : u * std::fabs(ref) + 1.2 * gamma * (mag + std::fabs(bias[j])) + 1e-3;
      }
      const double d = std::fabs(C[at] - ref);
      if (!(d <= bound)) bad++;
      worst = std::max(worst, d / (bound + 1e-30));
    }
  std::printf("%-72s worst err/bound %.2g %s\n", tag, worst, bad ? "FAIL" : "ok");
  if (bad) {
    std::printf("  %zu of %d out of tolerance\n", bad, M * N);
    failures++;
  }
}

// A weight gradient with its bias gradient (run_bias_grad, BGRADB): C [M, N]
// (fp32, holding C0) += A^T B with A [K, M], B [K, N] in dt, and dbias [M] =
// the column sums of A, against float64: C to fp32's bound for K terms, dbias
// to fp32's bound for K additions of 16-bit values.
void run_bias_grad_case(ptdp::cuda::Gemm &gemm, DType dt, int M, int N, int K) {
  static unsigned seed = 900;
  const auto A = stored(randn((size_t)K * M, seed++), dt), B = stored(randn((size_t)K * N, seed++), dt);
  const auto C0 = randn((size_t)M * N, seed++);
  auto dA = upload(A, dt), dB = upload(B, dt), dC = upload(C0, DType::f32);
  DevArray<uint8_t> dbias((size_t)M * 4);
  char tag[160];
  std::snprintf(tag, sizeof tag, "gemm+bias_grad %s TN M=%d N=%d K=%d", ptdp::dtype_name(dt), M, N, K);
  const bool fused = gemm.run_bias_grad(dt, M, N, K, dA.p, M, dB.p, N, (float *)dC.p, N,
                                        (float *)dbias.p, 0);
  CUDA_OK(cudaDeviceSynchronize());
  if (!fused) {
    std::printf("%-72s FAIL (cuBLASLt has no algorithm)\n", tag);
    failures++;
    return;
  }
  const auto C = download(dC, DType::f32), db = download(dbias, DType::f32);
  const double gamma = (K + 2) * std::ldexp(1.0, -24);
  size_t bad = 0;
  double worst = 0;
  for (int i = 0; i < M; i++) {
    double sum = 0, abs_sum = 0;
    for (int k = 0; k < K; k++) sum += A[(size_t)k * M + i], abs_sum += std::fabs(A[(size_t)k * M + i]);
    const double d = std::fabs(db[i] - sum), bound = gamma * abs_sum;
    if (!(d <= bound)) bad++;
    worst = std::max(worst, d / (bound + 1e-30));
    for (int j = 0; j < N; j++) {
      double ref = C0[(size_t)i * N + j], mag = std::fabs(ref);
      for (int k = 0; k < K; k++) {
        const double t = (double)A[(size_t)k * M + i] * B[(size_t)k * N + j];
        ref += t;
        mag += std::fabs(t);
      }
      const double e = std::fabs(C[(size_t)i * N + j] - ref), b2 = gamma * mag;
      if (!(e <= b2)) bad++;
      worst = std::max(worst, e / (b2 + 1e-30));
    }
  }
  std::printf("%-72s worst err/bound %.2g %s\n", tag, worst, bad ? "FAIL" : "ok");
  if (bad) {
    std::printf("  %zu of %d out of tolerance\n", bad, M * N + M);
    failures++;
  }
}

// A bad call throws ptdp::Error naming the problem; nothing is launched.
void expect_error(const char *what, const char *needle, void (*call)(ptdp::cuda::Gemm &),
                  ptdp::cuda::Gemm &gemm) {
  try {
    call(gemm);
  } catch (const ptdp::Error &e) {
    const bool ok = std::strstr(e.what(), needle) != nullptr;
    std::printf("%-72s %s (%s)\n", what, ok ? "ok" : "FAIL", e.what());
    if (!ok) failures++;
    return;
  }
  std::printf("%-72s FAIL (no error)\n", what);
  failures++;
}

}  // namespace

int main() {
  require_device();
  ptdp::cuda::Gemm gemm;
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (int t = 0; t < 4; t++) {
      const bool ta = t & 1, tb = t & 2;
      run_case(gemm, {dt, ta, tb, 37, 19, 53, 0, 1, 1.f, 0.f, 0});
      run_case(gemm, {dt, ta, tb, 37, 19, 53, 3, 1, 0.7f, 0.5f, 1});
      run_case(gemm, {dt, ta, tb, 24, 40, 64, 8, 3, 1.f, 1.f, 0});
      run_case(gemm, {dt, ta, tb, 64, 96, 1024, 0, 1, 1.f, 0.f, 0});
    }
  run_case(gemm, {DType::bf16, false, false, 512, 768, 2048, 0, 1, 1.f, 0.f, 0});
  run_case(gemm, {DType::bf16, false, true, 128, 128, 64, 0, 8, 0.125f, 0.f, 0});  // attention QK^T
  // 16-bit operands, fp32 C (ops' storage_type path): results held to fp32's bound.
  for (DType dt : {DType::bf16, DType::f16})
    for (int t = 0; t < 4; t++) {
      const bool ta = t & 1, tb = t & 2;
      run_case(gemm, {dt, ta, tb, 37, 19, 53, 3, 1, 0.7f, 0.5f, 1, true});
      run_case(gemm, {dt, ta, tb, 24, 40, 64, 8, 3, 1.f, 1.f, 0, true});
    }
  run_case(gemm, {DType::bf16, true, false, 512, 768, 2048, 0, 1, 1.f, 1.f, 0, true});  // dW +=
  // The linear layers' epilogues (Ops::linear_*): QKV's bias, fc1's bias + GeLU,
  // fc2's input gradient through the GeLU.
  using E = ptdp::cuda::Gemm::Epilogue;
  for (DType dt : {DType::bf16, DType::f16}) {
    run_fused_case(gemm, E::bias, dt, true, 96, 72, 64);
    run_fused_case(gemm, E::bias_gelu, dt, true, 96, 256, 64);
    run_fused_case(gemm, E::dgelu, dt, false, 96, 256, 64);
    run_fused_case(gemm, E::bias_gelu, dt, true, 256, 1024, 256);
    run_fused_case(gemm, E::dgelu, dt, false, 256, 1024, 256);
  }
  for (DType dt : {DType::bf16, DType::f16}) {
    run_bias_grad_case(gemm, dt, 72, 64, 96);    // QKV's and fc1's weight and bias gradients
    run_bias_grad_case(gemm, dt, 1024, 256, 256);
  }
  // fp32 and an aux width off a multiple of 8: not fused (the caller composes).
  const bool f32_fused = gemm.run_fused(E::bias, DType::f32, true, 8, 8, 8, nullptr, 8, nullptr, 8,
                                        nullptr, nullptr, nullptr, 0);
  const bool odd_fused = gemm.run_fused(E::dgelu, DType::bf16, false, 8, 12, 8, nullptr, 8, nullptr,
                                        12, nullptr, nullptr, nullptr, 0);
  std::printf("%-72s %s\n", "run_fused declines fp32 and an aux width of 12",
              !f32_fused && !odd_fused ? "ok" : "FAIL");
  if (f32_fused || odd_fused) failures++;
  expect_error("gemm rejects ldc < N", "leading dimensions", [](ptdp::cuda::Gemm &g) {
    g.run(DType::f32, false, false, 4, 8, 4, 1.f, nullptr, 4, nullptr, 8, 0.f, nullptr, 7, 0);
  }, gemm);
  expect_error("gemm rejects K = 0", "K = 0", [](ptdp::cuda::Gemm &g) {
    g.run(DType::f32, false, false, 4, 8, 0, 1.f, nullptr, 4, nullptr, 8, 0.f, nullptr, 8, 0);
  }, gemm);
  expect_error("gemm rejects f64", "allowed: f32, bf16, f16", [](ptdp::cuda::Gemm &g) {
    g.run(DType::f64, false, false, 4, 8, 4, 1.f, nullptr, 4, nullptr, 8, 0.f, nullptr, 8, 0);
  }, gemm);
  expect_error("gemm rejects bf16 into f16", "C must be bf16 or f32", [](ptdp::cuda::Gemm &g) {
    g.run(DType::bf16, DType::f16, false, false, 4, 8, 4, 1.f, nullptr, 4, 0, nullptr, 8, 0, 0.f,
          nullptr, 8, 0, 1, 0);
  }, gemm);
  return gpu_test::finish();
}
