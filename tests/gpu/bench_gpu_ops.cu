// GPU op benchmark on the shapes of a 1.3B GPT (h 2048, a 16, s 2048, V 50304,
// micro-batch 2): the two ceilings first (device-to-device copy bandwidth, and
// GEMM rate through cuBLASLt), then each GEMM of a layer in bf16 and fp32
// (TFLOP/s), and the element-wise kernels (GB/s over the fewest bytes each must
// move, and the share of the copy ceiling). Inputs are random, never zeros.
// Prints a table, then one "bench key=value ..." line per figure for scripts.
#include <algorithm>

#include "kernels/cuda/ops_cuda.h"
#include "tests/gpu/gpu_test_util.h"

namespace {

using ptdp::DType;

__global__ void fill_kernel(uint8_t *p, size_t n, int es, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    uint32_t x = (uint32_t)i * 2654435761u ^ seed;  // integer hash -> uniform in [-1, 1)
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13;
    const float v = (x >> 8) * (2.f / 16777216.f) - 1.f;
    if (es == 4) {
      ((float *)p)[i] = v;
    } else {
      const uint32_t u = __float_as_uint(v) + 0x7fffu;  // bf16 bits, rounded
      ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
    }
  }
}

// Random device array of n elements of es bytes (bf16 pattern for es = 2;
// fine for fp16 too: |v| < 1 is in range).
void *random_device(size_t n, int es, uint32_t seed) {
  void *p;
  CUDA_OK(cudaMalloc(&p, n * es + 256));
  fill_kernel<<<1024, 256>>>((uint8_t *)p, n, es, seed);
  CUDA_OK(cudaGetLastError());
  return p;
}

// Median milliseconds of `reps` runs after `warm` warm-ups, timed with events.
template <class F>
double time_ms(F f, int warm = 3, int reps = 20) {
  for (int i = 0; i < warm; i++) f();
  CUDA_OK(cudaGetLastError());
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; i++) {
    CUDA_OK(cudaEventRecord(a));
    f();
    CUDA_OK(cudaEventRecord(b));
    CUDA_OK(cudaEventSynchronize(b));
    CUDA_OK(cudaEventElapsedTime(&ms[i], a, b));
  }
  CUDA_OK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

struct GemmShape {
  const char *name;
  bool ta, tb;
  int M, N, K, batch;
};

}  // namespace

int main() {
  gpu_test::require_device();
  const int h = 2048, a = 16, s = 2048, b = 2, V = 50304, f = 4 * h, d = h / a, N = s * b;

  // Ceiling 1: copy bandwidth (bytes read + written).
  const size_t copy_bytes = size_t(1) << 30;
  void *src = random_device(copy_bytes / 4, 4, 1), *dst = random_device(copy_bytes / 4, 4, 2);
  const double copy_ms = time_ms([&] { cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice); });
  const double copy_gbs = 2.0 * copy_bytes / copy_ms / 1e6;
  cudaFree(src);
  cudaFree(dst);
  std::printf("%-44s %10.3f ms %9.0f GB/s\n", "copy 1 GiB device to device", copy_ms, copy_gbs);
  std::printf("bench name=copy gbs=%.1f\n", copy_gbs);

  // GEMMs: forward of one layer and the logits, plus the two backward GEMMs of fc1.
  const GemmShape shapes[] = {
      {"qkv      [N,h]x[h,3h]", false, false, N, 3 * h, h, 1},
      {"scores   b*a x [s,d]x[d,s]^T", false, true, s, s, d, b * a},
      {"context  b*a x [s,s]x[s,d]", false, false, s, d, s, b * a},
      {"proj     [N,h]x[h,h]", false, false, N, h, h, 1},
      {"fc1      [N,h]x[h,4h]", false, false, N, f, h, 1},
      {"fc2      [N,4h]x[4h,h]", false, false, N, h, f, 1},
      {"fc1 dX   [N,4h]x[h,4h]^T", false, true, N, h, f, 1},
      {"fc1 dW   [N,h]^T x [N,4h]", true, false, h, f, N, 1},
      {"logits   [N,h]x[V,h]^T", false, true, N, V, h, 1},
      {"square   8192^3", false, false, 8192, 8192, 8192, 1},
  };
  ptdp::cuda::Gemm gemm;
  for (DType dt : {DType::bf16, DType::f32}) {
    const int es = (int)ptdp::dtype_size(dt);
    for (const auto &g : shapes) {
      const size_t na = (size_t)g.M * g.K, nb = (size_t)g.K * g.N, nc = (size_t)g.M * g.N;
      void *A = random_device(na * g.batch, es, 3), *B = random_device(nb * g.batch, es, 4),
           *C = random_device(nc * g.batch, es, 5);
      const int lda = g.ta ? g.M : g.K, ldb = g.tb ? g.K : g.N;
      const double ms = time_ms([&] {
        gemm.run(dt, g.ta, g.tb, g.M, g.N, g.K, 1.f, A, lda, (int64_t)na, B, ldb, (int64_t)nb, 0.f,
                 C, g.N, (int64_t)nc, g.batch, 0);
      });
      const double tflops = 2.0 * g.M * g.N * g.K * g.batch / ms / 1e9;
      std::printf("%-6s %-37s %10.3f ms %9.1f TFLOP/s\n", ptdp::dtype_name(dt), g.name, ms, tflops);
      std::printf("bench name=gemm dtype=%s shape=%dx%dx%dx%d ta=%d tb=%d tflops=%.2f\n",
                  ptdp::dtype_name(dt), g.M, g.N, g.K, g.batch, g.ta, g.tb, tflops);
      cudaFree(A);
      cudaFree(B);
      cudaFree(C);
    }
  }

  // Element-wise kernels (fp32), GB/s over the bytes each must move at least.
  auto report = [&](const char *name, double ms, double bytes) {
    const double gbs = bytes / ms / 1e6;
    std::printf("f32    %-37s %10.3f ms %9.0f GB/s %5.0f%% of copy\n", name, ms, gbs,
                100 * gbs / copy_gbs);
    std::printf("bench name=%s gbs=%.1f of_copy=%.3f\n", name, gbs, gbs / copy_gbs);
  };
  {
    float *x = (float *)random_device((size_t)N * h, 4, 6), *y = (float *)random_device((size_t)N * h, 4, 7);
    float *w = (float *)random_device(h, 4, 8), *bb = (float *)random_device(h, 4, 9);
    float *mean = (float *)random_device(N, 4, 10), *rstd = (float *)random_device(N, 4, 11);
    report("layernorm_fwd[N,h]",
           time_ms([&] { ptdp::cuda::layernorm_forward(y, mean, rstd, x, w, bb, N, h, 1e-5f, 0); }),
           2.0 * N * h * 4);
    cudaFree(x), cudaFree(y), cudaFree(w), cudaFree(bb), cudaFree(mean), cudaFree(rstd);
  }
  {
    float *y = (float *)random_device((size_t)N * f, 4, 12), *z = (float *)random_device((size_t)N * f, 4, 13);
    float *o = (float *)random_device((size_t)N * f, 4, 14), *bias = (float *)random_device(f, 4, 15);
    report("bias_gelu_fwd[N,4h]",
           time_ms([&] { ptdp::cuda::bias_gelu_forward(z, o, y, bias, N, f, 0); }), 3.0 * N * f * 4);
    cudaFree(y), cudaFree(z), cudaFree(o), cudaFree(bias);
  }
  {
    const size_t n = (size_t)b * a * s * s;
    float *S = (float *)random_device(n, 4, 16), *P = (float *)random_device(n, 4, 17);
    report("softmax_causal_fwd[b*a,s,s]",
           time_ms([&] { ptdp::cuda::scale_mask_softmax_forward(P, S, b * a, s, s, 0.088f, true, 0); }),
           2.0 * n * 4);
    cudaFree(S), cudaFree(P);
  }
  {
    float *logits = (float *)random_device((size_t)N * V, 4, 18), *loss = (float *)random_device(N, 4, 19);
    std::vector<int32_t> t = gpu_test::random_ids(N, V, 20);
    gpu_test::DevI targets(t);
    report("cross_entropy_fwd[N,V]",
           time_ms([&] { ptdp::cuda::cross_entropy_forward(loss, logits, targets.p, N, V, V, 0); }),
           1.0 * N * V * 4);
    cudaFree(logits), cudaFree(loss);
  }
  {
    const size_t n = size_t(1) << 28;
    float *p = (float *)random_device(n, 4, 21), *g = (float *)random_device(n, 4, 22);
    float *m = (float *)random_device(n, 4, 23), *v = (float *)random_device(n, 4, 24);
    report("adamw[2^28]", time_ms([&] {
             ptdp::cuda::adamw_update(p, g, m, v, n, 1e-9, 0.9, 0.95, 1e-8, 0.0, 10, 0);
           }), 7.0 * n * 4);
    cudaFree(p), cudaFree(g), cudaFree(m), cudaFree(v);
  }
  return 0;
}
