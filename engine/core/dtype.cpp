#include "engine/core/dtype.h"

namespace ptdp {

bool parse_dtype(const std::string &s, DType *out) {
  if (s == "f32" || s == "fp32" || s == "float32") *out = DType::f32;
  else if (s == "bf16" || s == "bfloat16") *out = DType::bf16;
  else if (s == "f16" || s == "fp16" || s == "float16") *out = DType::f16;
  else if (s == "f64" || s == "fp64" || s == "float64") *out = DType::f64;
  else return false;
  return true;
}

void round_to(DType t, float *x, size_t n) {
  if (t == DType::bf16) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] = bf16_to_float(float_to_bf16(x[i]));
  } else if (t == DType::f16) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] = f16_to_float(float_to_f16(x[i]));
  }
}

void to_16bit(DType t, const float *in, uint16_t *out, size_t n) {
  if (t == DType::bf16)
    for (size_t i = 0; i < n; i++) out[i] = float_to_bf16(in[i]);
  else
    for (size_t i = 0; i < n; i++) out[i] = float_to_f16(in[i]);
}

void from_16bit(DType t, const uint16_t *in, float *out, size_t n) {
  if (t == DType::bf16)
    for (size_t i = 0; i < n; i++) out[i] = bf16_to_float(in[i]);
  else
    for (size_t i = 0; i < n; i++) out[i] = f16_to_float(in[i]);
}

}  // namespace ptdp
