#include <cmath>
#include <type_traits>

#include "engine/core/dtype.h"
#include "engine/core/status.h"
#include "kernels/kernels.h"

namespace ptdp::cpu {

template <class T>
void adamw_update(T *param, const T *grad, T *exp_avg, T *exp_avg_sq, size_t n,
                  const AdamWParams &a) {
  // 1 - beta in double before the cast: with beta2 = 0.999, 1 - (float)beta2
  // is 1.3e-5 off and every update would come out 6.4e-6 too large.
  const T b1 = (T)a.beta1, b2 = (T)a.beta2, omb1 = (T)(1.0 - a.beta1), omb2 = (T)(1.0 - a.beta2);
  const T bc1 = T(1) / (T)(1.0 - std::pow(a.beta1, (double)a.step));
  const T bc2 = T(1) / (T)(1.0 - std::pow(a.beta2, (double)a.step));
  const T lr = (T)a.lr, eps = (T)a.eps, wd = (T)a.weight_decay, gs = (T)a.grad_scale;
  if (a.model_copy && (!std::is_same_v<T, float> || a.model_type == DType::f32))
    fail(Status::invalid_argument, "adamw_update: a rounded model copy needs float weights and a ",
         "16-bit model type (bf16 or f16), got ", dtype_name(a.model_type));
  float *copy = a.model_copy;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    // g * gs: the bits of the separate scaling pass it replaces (1 is exact).
    T g = grad[i] * gs;
    T m = b1 * exp_avg[i] + omb1 * g;
    T v = b2 * exp_avg_sq[i] + omb2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] -= lr * ((m * bc1) / (std::sqrt(v * bc2) + eps) + wd * param[i]);
    if constexpr (std::is_same_v<T, float>)
      if (copy) copy[i] = round_to(a.model_type, param[i]);
  }
}

template void adamw_update<float>(float *, const float *, float *, float *, size_t,
                                  const AdamWParams &);
template void adamw_update<double>(double *, const double *, double *, double *, size_t,
                                   const AdamWParams &);

}  // namespace ptdp::cpu
