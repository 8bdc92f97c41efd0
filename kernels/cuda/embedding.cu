#include <algorithm>
#include <cstdint>

#include "kernels/cuda/ops_cuda.h"

namespace ptdp::cuda {

namespace {

// One block per token row; threads stride over h (float4 when aligned).
__global__ void embedding_rows(float *x, const int32_t *tokens, const float *wte, int vocab_start,
                               int vocab_rows, const float *wpe, int b, int h) {
  const int r = blockIdx.x;
  const int64_t row = (int64_t)tokens[r] - vocab_start;
  const bool local = row >= 0 && row < vocab_rows;
  const float *te = wte + (size_t)(local ? row : 0) * h;
  const float *pe = wpe ? wpe + (size_t)(r / b) * h : nullptr;
  float *xr = x + (size_t)r * h;
  for (int j = threadIdx.x; j < h; j += blockDim.x)
    xr[j] = (local ? te[j] : 0.f) + (pe ? pe[j] : 0.f);
}

__global__ void embedding_rows_vec4(float4 *x, const int32_t *tokens, const float4 *wte,
                                    int vocab_start, int vocab_rows, const float4 *wpe, int b,
                                    int h4) {
  const int r = blockIdx.x;
  const int64_t row = (int64_t)tokens[r] - vocab_start;
  const bool local = row >= 0 && row < vocab_rows;
  const float4 *te = wte + (size_t)(local ? row : 0) * h4;
  const float4 *pe = wpe ? wpe + (size_t)(r / b) * h4 : nullptr;
  float4 *xr = x + (size_t)r * h4;
  for (int j = threadIdx.x; j < h4; j += blockDim.x) {
    float4 v = local ? te[j] : make_float4(0.f, 0.f, 0.f, 0.f);
    if (pe) {
      const float4 p = pe[j];
      v.x += p.x;
      v.y += p.y;
      v.z += p.z;
      v.w += p.w;
    }
    xr[j] = v;
  }
}

}  // namespace

void embedding_forward(float *x, const int32_t *tokens, const float *wte, int vocab_start,
                       int vocab_rows, const float *wpe, int s, int b, int h,
                       cudaStream_t stream) {
  const int rows = s * b;
  if (rows == 0 || h == 0) return;
  auto aligned = [](const void *p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (h % 4 == 0 && aligned(x) && aligned(wte) && aligned(wpe)) {
    const int h4 = h / 4, threads = std::min(256, ((h4 + 31) / 32) * 32);
    embedding_rows_vec4<<<rows, threads, 0, stream>>>(
        reinterpret_cast<float4 *>(x), tokens, reinterpret_cast<const float4 *>(wte), vocab_start,
        vocab_rows, reinterpret_cast<const float4 *>(wpe), b, h4);
  } else {
    const int threads = std::min(256, ((h + 31) / 32) * 32);
    embedding_rows<<<rows, threads, 0, stream>>>(x, tokens, wte, vocab_start, vocab_rows, wpe, b, h);
  }
}

}  // namespace ptdp::cuda
