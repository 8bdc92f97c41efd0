// GPU op benchmark on the shapes of a 1.3B GPT (h 2048, a 16, s 2048, V 50304,
// micro-batch 2): the two ceilings first (device-to-device copy bandwidth, and
// GEMM rate through cuBLASLt), then each GEMM of a layer in bf16 and fp32
// (TFLOP/s), and the element-wise ops forward and backward with fp32 and bf16
// activations (GB/s over the fewest bytes each must move, and the share of the
// copy ceiling). Inputs are random, never zeros.
// Prints a table, then one "bench key=value ..." line per figure for scripts.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/cuda/gemm.h"
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

// Random device array of n elements of es bytes: fp32 for es = 4, bf16 for
// es = 2 (the benchmark's two storage types; not fp16).
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

// GB/s over the fewest bytes an op must move, and its share of the copy ceiling.
void report(const char *dtype, const char *name, double ms, double bytes, double copy_gbs) {
  const double gbs = bytes / ms / 1e6;
  std::printf("%-6s %-37s %10.3f ms %9.0f GB/s %5.0f%% of copy\n", dtype, name, ms, gbs,
              100 * gbs / copy_gbs);
  std::printf("bench name=%s dtype=%s gbs=%.1f of_copy=%.3f\n", name, dtype, gbs, gbs / copy_gbs);
}

// The element-wise ops of one layer and the loss, forward and backward, with
// activations stored as T (statistics and weight gradients fp32).
template <class T>
void bench_elementwise(double copy_gbs) {
  const int h = 2048, a = 16, s = 2048, b = 2, V = 50304, f = 4 * h, N = s * b;
  const int es = sizeof(T);
  const char *dt = std::is_same_v<T, float> ? "f32" : "bf16";
  auto dev = [&](size_t n, uint32_t seed) { return (T *)random_device(n, es, seed); };
  auto devf = [&](size_t n, uint32_t seed) { return (float *)random_device(n, 4, seed); };
  const ptdp::DropoutSpec drop{{1234, 77, 5}, 0.1f, 0};
  {
    T *x = dev((size_t)N * h, 6), *y = dev((size_t)N * h, 7), *dx = dev((size_t)N * h, 8);
    T *w = dev(h, 9), *bb = dev(h, 10);
    float *mean = devf(N, 11), *rstd = devf(N, 12), *dw = devf(h, 13), *db = devf(h, 14);
    ptdp::cuda::layernorm_forward(y, mean, rstd, x, w, bb, N, h, 1e-5f, 0);
    report(dt, "layernorm_fwd[N,h]", time_ms([&] {
             ptdp::cuda::layernorm_forward(y, mean, rstd, x, w, bb, N, h, 1e-5f, 0);
           }), 2.0 * N * h * es, copy_gbs);
    report(dt, "layernorm_bwd[N,h]", time_ms([&] {
             ptdp::cuda::layernorm_backward(dx, dw, db, y, x, w, mean, rstd, N, h, 0);
           }), 4.0 * N * h * es, copy_gbs);
    T *r = dev((size_t)N * h, 15);
    report(dt, "bias_dropout_add_fwd[N,h]", time_ms([&] {
             ptdp::cuda::bias_dropout_add_forward(y, r, x, w, s, b, h, drop, 0);
           }), 3.0 * N * h * es, copy_gbs);
    report(dt, "bias_dropout_add_bwd[N,h]", time_ms([&] {
             ptdp::cuda::bias_dropout_add_backward(dx, db, y, s, b, h, drop, 0);
           }), 2.0 * N * h * es, copy_gbs);
    cudaFree(x), cudaFree(y), cudaFree(dx), cudaFree(w), cudaFree(bb), cudaFree(r);
    cudaFree(mean), cudaFree(rstd), cudaFree(dw), cudaFree(db);
  }
  {
    T *y = dev((size_t)N * f, 16), *z = dev((size_t)N * f, 17), *o = dev((size_t)N * f, 18);
    T *bias = dev(f, 19);
    float *dbias = devf(f, 20);
    report(dt, "bias_gelu_fwd[N,4h]", time_ms([&] {
             ptdp::cuda::bias_gelu_forward(z, o, y, bias, N, f, 0);
           }), 3.0 * N * f * es, copy_gbs);
    report(dt, "bias_gelu_bwd[N,4h]", time_ms([&] {
             ptdp::cuda::bias_gelu_backward(o, dbias, y, z, N, f, 0);
           }), 3.0 * N * f * es, copy_gbs);
    cudaFree(y), cudaFree(z), cudaFree(o), cudaFree(bias), cudaFree(dbias);
  }
  {
    const size_t n = (size_t)b * a * s * s;
    T *S = dev(n, 21), *P = dev(n, 22), *dP = dev(n, 23);
    report(dt, "softmax_causal_fwd[b*a,s,s]", time_ms([&] {
             ptdp::cuda::scale_mask_softmax_forward(P, S, b * a, s, s, 0.088f, true, nullptr, 0);
           }), 2.0 * n * es, copy_gbs);
    report(dt, "softmax_bwd[b*a,s,s]", time_ms([&] {
             ptdp::cuda::scale_mask_softmax_backward(S, P, dP, b * a, s, s, 0.088f, 0);
           }), 3.0 * n * es, copy_gbs);
    report(dt, "dropout_attention[b*a,s,s]", time_ms([&] {
             ptdp::cuda::dropout_attention(S, P, b, a, s, s, 0, drop, 0);
           }), 2.0 * n * es, copy_gbs);
    cudaFree(S), cudaFree(P), cudaFree(dP);
  }
  {
    T *logits = dev((size_t)N * V, 24);
    float *mx = devf(N, 25), *sum = devf(N, 26), *tl = devf(N, 27);
    std::vector<int32_t> t = gpu_test::random_ids(N, V, 28);
    gpu_test::DevI targets(t);
    report(dt, "vocab_ce_max[N,V]", time_ms([&] {
             ptdp::cuda::vocab_ce_local_max(mx, logits, N, V, V, 0);
           }), 1.0 * N * V * es, copy_gbs);
    report(dt, "vocab_ce_sums[N,V]", time_ms([&] {
             ptdp::cuda::vocab_ce_local_sums(sum, tl, logits, mx, targets.p, N, V, V, 0, 0);
           }), 1.0 * N * V * es, copy_gbs);
    // Out of place, so every repetition reads the same logits.
    T *dlogits = dev((size_t)N * V, 29);
    report(dt, "vocab_ce_bwd[N,V]", time_ms([&] {
             ptdp::cuda::vocab_ce_backward(dlogits, logits, mx, sum, targets.p, N, V, V, 0, 1.f, 0);
           }), 2.0 * N * V * es, copy_gbs);
    cudaFree(logits), cudaFree(dlogits), cudaFree(mx), cudaFree(sum), cudaFree(tl);
  }
  {
    const size_t n = size_t(1) << 28;
    T *x = dev(n, 30);
    double *scratch, *out;
    CUDA_OK(cudaMalloc(&scratch, ptdp::cuda::sum_squares_scratch(n) * sizeof(double)));
    CUDA_OK(cudaMalloc(&out, sizeof(double)));
    report(dt, "sum_squares[2^28]", time_ms([&] {
             ptdp::cuda::sum_squares(out, x, n, scratch, 0);
           }), 1.0 * n * es, copy_gbs);
    float *master = devf(n, 31);
    report(dt, "cast_f32_to_storage[2^28]", time_ms([&] {
             ptdp::cuda::cast(x, gpu_test::dtype_of<T>(), master, ptdp::DType::f32, n, 0);
           }), (4.0 + es) * n, copy_gbs);
    cudaFree(x), cudaFree(scratch), cudaFree(out), cudaFree(master);
  }
}

// Causal attention of one layer (b 2, 16 heads, s 2048, hd 128) in T: the
// unfused path of GPT::attention_forward (scores GEMM, softmax, dropout,
// context GEMM; [s, s] matrices in memory) against the fused kernels. FLOPs
// counted are those of the causal half: 2 b a s^2 hd forward, 2.5x that backward.
template <class T>
void bench_attention(ptdp::cuda::Gemm &gemm) {
  const int s = 2048, b = 2, a = 16, hd = 128, w = a * hd;
  const int es = sizeof(T);
  const ptdp::DType dt = gpu_test::dtype_of<T>();
  const ptdp::DropoutSpec drop{{1234, 78, 5}, 0.1f, 0};
  T *qkv = (T *)random_device((size_t)s * b * 3 * w, es, 40);
  T *dqkv = (T *)random_device((size_t)s * b * 3 * w, es, 41);
  T *ctx = (T *)random_device((size_t)s * b * w, es, 42), *dctx = (T *)random_device((size_t)s * b * w, es, 43);
  float *lse = (float *)random_device((size_t)b * a * s, 4, 44);
  T *probs = (T *)random_device((size_t)b * a * s * s, es, 45);
  const float scale = 1.f / std::sqrt((float)hd);
  const int64_t ss = (int64_t)s * s;
  const double fwd_flops = 2.0 * b * a * (double)s * s * hd;
  const double unfused = time_ms([&] {
    gemm.run(dt, false, true, s, s, hd, 1.f, qkv, b * 3 * w, 3 * hd, qkv + hd, b * 3 * w, 3 * hd, 0.f,
             probs, s, ss, b * a, 0);
    ptdp::cuda::scale_mask_softmax_forward(probs, probs, b * a, s, s, scale, true, nullptr, 0);
    ptdp::cuda::dropout_attention(probs, probs, b, a, s, s, 0, drop, 0);
    gemm.run(dt, false, false, s, hd, s, 1.f, probs, s, ss, qkv + 2 * hd, b * 3 * w, 3 * hd, 0.f,
             ctx, b * w, hd, b * a, 0);
  });
  const double fused = time_ms([&] {
    ptdp::cuda::flash_attention_forward(ctx, lse, qkv, s, b, a, a, hd, scale, 0, drop, 0);
  });
  const double fused_bwd = time_ms([&] {
    ptdp::cuda::flash_attention_backward(dqkv, dctx, ctx, qkv, lse, s, b, a, a, hd, scale, 0, drop, 0);
  });
  const char *name = gpu_test::type_name<T>();
  std::printf("%-6s %-37s %10.3f ms %9.1f TFLOP/s\n", name, "attention fwd unfused (causal)", unfused,
              fwd_flops / unfused / 1e9);
  std::printf("%-6s %-37s %10.3f ms %9.1f TFLOP/s\n", name, "attention fwd fused", fused,
              fwd_flops / fused / 1e9);
  std::printf("%-6s %-37s %10.3f ms %9.1f TFLOP/s\n", name, "attention bwd fused", fused_bwd,
              2.5 * fwd_flops / fused_bwd / 1e9);
  std::printf("bench name=attention dtype=%s unfused_fwd_ms=%.3f fused_fwd_ms=%.3f fused_bwd_ms=%.3f\n",
              name, unfused, fused, fused_bwd);
  cudaFree(qkv), cudaFree(dqkv), cudaFree(ctx), cudaFree(dctx), cudaFree(lse), cudaFree(probs);
}

// The tensor-core kernels on the same layer, as a bf16 run calls them: bf16
// arrays, bf16 operands; with dropout 0.1 (the training figure) and without
// (what the dropout draws cost).
void bench_attention_mma() {
  ptdp::cuda::Gemm gemm;
  const int s = 2048, b = 2, a = 16, hd = 128, w = a * hd;
  using B16 = __nv_bfloat16;
  B16 *qkv = (B16 *)random_device((size_t)s * b * 3 * w, 2, 50);
  B16 *dqkv = (B16 *)random_device((size_t)s * b * 3 * w, 2, 51);
  B16 *ctx = (B16 *)random_device((size_t)s * b * w, 2, 52);
  B16 *dctx = (B16 *)random_device((size_t)s * b * w, 2, 53);
  float *lse = (float *)random_device((size_t)b * a * s, 4, 54);
  const float scale = 1.f / std::sqrt((float)hd);
  const double fwd_flops = 2.0 * b * a * (double)s * s * hd;
  for (float p : {0.1f, 0.f}) {
    const ptdp::DropoutSpec drop{{1234, 78, 5}, p, 0};
    const double fwd = time_ms([&] {
      ptdp::cuda::flash_attention_forward_mma(ctx, lse, qkv, s, b, a, a, hd, scale, 0, drop, DType::bf16, 0);
    });
    const double bwd_kernel = time_ms([&] {  // dQ by its own kernel
      ptdp::cuda::flash_attention_backward_mma(dqkv, dctx, ctx, qkv, lse, s, b, a, a, hd, scale, 0, drop,
                                               DType::bf16, 0);
    });
    const double bwd = time_ms([&] {  // dQ by a GEMM over dS (the training path)
      ptdp::cuda::flash_attention_backward_mma(dqkv, dctx, ctx, qkv, lse, s, b, a, a, hd, scale, 0, drop,
                                               DType::bf16, 0, &gemm);
    });
    const std::string what = p > 0 ? "" : ", no dropout";
    std::printf("%-6s %-37s %10.3f ms %9.1f TFLOP/s\n", "bf16",
                ("attention fwd fused, tensor cores" + what).c_str(), fwd, fwd_flops / fwd / 1e9);
    std::printf("%-6s %-37s %10.3f ms %9.1f TFLOP/s (dQ kernel %.3f ms)\n", "bf16",
                ("attention bwd fused, tensor cores" + what).c_str(), bwd, 2.5 * fwd_flops / bwd / 1e9,
                bwd_kernel);
    std::printf("bench name=attention_mma dtype=bf16 dropout=%g fused_fwd_ms=%.3f fused_bwd_ms=%.3f "
                "fused_bwd_dq_kernel_ms=%.3f\n",
                p, fwd, bwd, bwd_kernel);
  }
  cudaFree(qkv), cudaFree(dqkv), cudaFree(ctx), cudaFree(dctx), cudaFree(lse);
}

struct GemmShape {
  const char *name;
  bool ta, tb;
  int M, N, K, batch;
};

}  // namespace

// bench_gpu_ops [attention]: every figure, or only the tensor-core attention
// (what scripts/gpu_profile_attention.sh profiles).
int main(int argc, char **argv) {
  gpu_test::require_device();
  // Kernels' stream-ordered scratch comes from the default pool here (no
  // Device): keep what it reserves, as a Device's own pool does, or a timed
  // call may map its scratch afresh (this bench measured layernorm_backward
  // at twice the per-call time of the model's op profile).
  cudaMemPool_t pool;
  uint64_t keep_all = UINT64_MAX;
  CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  if (argc > 1) {
    if (argc != 2 || std::string(argv[1]) != "attention") {
      std::fprintf(stderr, "usage: bench_gpu_ops [attention]\n");
      return 2;
    }
    bench_attention_mma();
    return 0;
  }
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

  bench_attention<__nv_bfloat16>(gemm);
  bench_attention_mma();
  bench_elementwise<float>(copy_gbs);
  bench_elementwise<__nv_bfloat16>(copy_gbs);
  {  // AdamW over fp32 master weights and moments (16-bit runs too).
    const size_t n = size_t(1) << 28;
    float *p = (float *)random_device(n, 4, 21), *g = (float *)random_device(n, 4, 22);
    float *m = (float *)random_device(n, 4, 23), *v = (float *)random_device(n, 4, 24);
    report("f32", "adamw[2^28]", time_ms([&] {
             ptdp::cuda::adamw_update(p, g, m, v, n, 1e-9, 0.9, 0.95, 1e-8, 0.0, 10, 1.0, nullptr,
                                      ptdp::DType::f32, 0);
           }), 7.0 * n * 4, copy_gbs);
    // A bf16 run's step: clipping and the rounded model copy in the same pass.
    float *copy = (float *)random_device(n, 4, 25);
    report("f32", "adamw+clip+bf16_copy[2^28]", time_ms([&] {
             ptdp::cuda::adamw_update(p, g, m, v, n, 1e-9, 0.9, 0.95, 1e-8, 0.0, 10, 0.5, copy,
                                      ptdp::DType::bf16, 0);
           }), 8.0 * n * 4, copy_gbs);
    cudaFree(p), cudaFree(g), cudaFree(m), cudaFree(v), cudaFree(copy);
  }
  return 0;
}
