// Rotary position embeddings (Su et al. 2021) in the rotate-half form of
// Hugging Face's LLaMA and Megatron: the pair (v[j], v[j + hd/2]) of a head's
// vector at position p turns by p * theta_j, theta_j = base^(-2j/hd).
#include <cmath>

#include "kernels/kernels.h"

namespace ptdp::cpu {

void rope_table(float *cos_t, float *sin_t, int s, int hd, double base) {
  // As transformers computes them, in fp32: inv_freq = 1 / base^(2j / hd),
  // angle = p * inv_freq rounded to fp32, then its cosine and sine.
  const int half = hd / 2;
  for (int j = 0; j < half; j++) {
    const float inv = 1.f / std::pow((float)base, (float)(2 * j) / (float)hd);
    for (int p = 0; p < s; p++) {
      const float angle = (float)p * inv;
      cos_t[(size_t)p * half + j] = (float)std::cos((double)angle);
      sin_t[(size_t)p * half + j] = (float)std::sin((double)angle);
    }
  }
}

template <class T>
void rope_rotate(T *x, const float *cos_t, const float *sin_t, int s, int b, int ld, int vecs,
                 int stride, int hd, bool inverse) {
  const int half = hd / 2;
  const T sign = inverse ? T(-1) : T(1);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < s * b; r++) {
    const int p = r / b;
    const float *c = cos_t + (size_t)p * half, *sn = sin_t + (size_t)p * half;
    for (int k = 0; k < vecs; k++) {
      T *v = x + (size_t)r * ld + (size_t)k * stride;
      for (int j = 0; j < half; j++) {
        const T a = v[j], e = v[j + half], cj = T(c[j]), sj = sign * T(sn[j]);
        v[j] = a * cj - e * sj;
        v[j + half] = a * sj + e * cj;
      }
    }
  }
}

#define PTDP_INSTANTIATE(T) \
  template void rope_rotate<T>(T *, const float *, const float *, int, int, int, int, int, int, bool);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)

}  // namespace ptdp::cpu
