#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"

namespace ptdp::cuda {

namespace {

struct AdamConsts {
  float b1, b2, omb1, omb2, bc1, bc2, lr, eps, wd, gs;
};

__device__ __forceinline__ void adam_one(float &p, float g, float &m, float &v, const AdamConsts &c) {
  g *= c.gs;  // unscaling and clipping, as the separate pass it replaces rounded it
  m = c.b1 * m + c.omb1 * g;
  v = c.b2 * v + c.omb2 * g * g;
  p -= c.lr * ((m * c.bc1) / (sqrtf(v * c.bc2) + c.eps) + c.wd * p);
}

// Four parameters per thread with 16-byte loads and stores of all the arrays.
// S: the model's type, whose rounded copy of the weights goes to `copy`
// (float: no copy, the model's weights are the master weights), and as S to
// copy16 where set (8-byte stores).
template <class S>
__global__ void adamw_vec4(float4 *param, const float4 *grad, float4 *exp_avg, float4 *exp_avg_sq,
                           float4 *copy, S *copy16, size_t n4, AdamConsts c) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
       i += (size_t)gridDim.x * blockDim.x) {
    float4 p = param[i], g = grad[i], m = exp_avg[i], v = exp_avg_sq[i];
    adam_one(p.x, g.x, m.x, v.x, c);
    adam_one(p.y, g.y, m.y, v.y, c);
    adam_one(p.z, g.z, m.z, v.z, c);
    adam_one(p.w, g.w, m.w, v.w, c);
    param[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if constexpr (!std::is_same_v<S, float>) {
      copy[i] = make_float4(round_as<S>(p.x), round_as<S>(p.y), round_as<S>(p.z), round_as<S>(p.w));
      if (copy16) {
        struct alignas(8) Four {
          S v[4];
        };
        reinterpret_cast<Four *>(copy16)[i] =
            Four{{from_f32<S>(p.x), from_f32<S>(p.y), from_f32<S>(p.z), from_f32<S>(p.w)}};
      }
    }
  }
}

template <class S>
__global__ void adamw_scalar(float *param, const float *grad, float *exp_avg, float *exp_avg_sq,
                             float *copy, S *copy16, size_t begin, size_t n, AdamConsts c) {
  for (size_t i = begin + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    adam_one(param[i], grad[i], exp_avg[i], exp_avg_sq[i], c);
    if constexpr (!std::is_same_v<S, float>) {
      copy[i] = round_as<S>(param[i]);
      if (copy16) copy16[i] = from_f32<S>(param[i]);
    }
  }
}

template <class S>
void launch(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, float *copy,
            S *copy16, size_t n, const AdamConsts &c, cudaStream_t stream) {
  const int threads = 256;
  auto aligned = [](const void *p, int bytes = 16) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; };
  size_t done = 0;
  if (aligned(param) && aligned(grad) && aligned(exp_avg) && aligned(exp_avg_sq) &&
      (std::is_same_v<S, float> || aligned(copy)) && aligned(copy16, 8)) {
    const size_t n4 = n / 4;
    if (n4 > 0) {
      const int blocks = (int)std::min<size_t>((n4 + threads - 1) / threads, 65535);
      adamw_vec4<S><<<blocks, threads, 0, stream>>>(
          reinterpret_cast<float4 *>(param), reinterpret_cast<const float4 *>(grad),
          reinterpret_cast<float4 *>(exp_avg), reinterpret_cast<float4 *>(exp_avg_sq),
          reinterpret_cast<float4 *>(copy), copy16, n4, c);
    }
    done = n4 * 4;
  }
  if (done < n) {
    const int blocks = (int)std::min<size_t>((n - done + threads - 1) / threads, 65535);
    adamw_scalar<S><<<blocks, threads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, copy,
                                                        copy16, done, n, c);
  }
  check_launch("adamw_update");
}

}  // namespace

void adamw_update(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, size_t n,
                  double lr, double beta1, double beta2, double eps, double weight_decay,
                  int64_t step, double grad_scale, float *model_copy, DType model_type,
                  cudaStream_t stream, void *storage_copy) {
  if ((model_type != DType::f32) != (model_copy != nullptr))
    fail(Status::invalid_argument, "adamw_update: a model copy needs both its array and a 16-bit ",
         "model type (bf16 or f16); got type ", dtype_name(model_type),
         model_copy ? " with an array" : " without one");
  if (storage_copy && !model_copy)
    fail(Status::invalid_argument, "adamw_update: a 16-bit storage copy needs a model copy ",
         "(a 16-bit model type)");
  if (n == 0) return;
  // Bias corrections on the host, rounded as the CPU kernel rounds them.
  // 1 - beta in double before the cast, as the CPU kernel.
  const AdamConsts c{(float)beta1,
                     (float)beta2,
                     (float)(1.0 - beta1),
                     (float)(1.0 - beta2),
                     1.f / (float)(1.0 - std::pow(beta1, (double)step)),
                     1.f / (float)(1.0 - std::pow(beta2, (double)step)),
                     (float)lr,
                     (float)eps,
                     (float)weight_decay,
                     (float)grad_scale};
  switch (model_type) {
    case DType::f32:
      return launch<float>(param, grad, exp_avg, exp_avg_sq, nullptr, nullptr, n, c, stream);
    case DType::bf16:
      return launch<__nv_bfloat16>(param, grad, exp_avg, exp_avg_sq, model_copy,
                                   static_cast<__nv_bfloat16 *>(storage_copy), n, c, stream);
    case DType::f16:
      return launch<__half>(param, grad, exp_avg, exp_avg_sq, model_copy,
                            static_cast<__half *>(storage_copy), n, c, stream);
    default:
      fail(Status::invalid_argument, "adamw_update: model copy of type ", dtype_name(model_type),
           " (allowed: f32 = none, bf16, f16)");
  }
}

}  // namespace ptdp::cuda
