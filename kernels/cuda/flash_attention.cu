// Fused causal self-attention ("flash attention", Dao et al. 2022; FlashAttention-2's
// backward): ctx = dropout(softmax(scale * Q K^T, causal)) V, never holding an
// [s, s] matrix in memory. The forward keeps a running row max and sum (online
// softmax) over key tiles and saves each row's log-sum-exp; the backward
// recomputes P = exp(S - lse) tile by tile, the dropout mask from Philox.
//
// Plain CUDA cores, fp32 arithmetic, each stored T rounded once. The layout of
// the work, in all three main kernels: a warp handles a few rows; in the
// "score" phase lane l owns one row or key of the tile (a full dot product over
// hd, reading a padded shared-memory row), in the "accumulate" phase lane l owns
// dims l, l + 32, .. of the output and the per-pair weights come by shuffle.
// Future work: tensor-core MMAs (mma.sync / wgmma) for the two GEMMs of each
// tile, vectorized 16-byte tile loads, and one Philox call per 16 keys.
//
// Backward, deterministic (no atomics): dot_rows computes D_i = dO_i . O_i,
// one block per (bi, head, key block) sums dK, dV over all its query rows, and a
// separate kernel sums dQ per (bi, head, query block); each output element is
// written once by one thread, summed in a fixed order.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/kernels.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/qkv_layout.h"

namespace ptdp::cuda {

namespace {

using namespace flash;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 4;   // forward, dQ: query rows per warp
constexpr int kRows = kWarps * kRowsPerWarp;  // forward, dQ: query rows per block (16)
constexpr int kKeys = 32;                     // forward, dQ: key tile, lane j scores key j
constexpr int kKeysPerWarp = 4;               // dK dV: keys per warp
constexpr int kBlockKeys = kWarps * kKeysPerWarp;  // dK dV: keys per block (16)
constexpr int kQueries = 32;                  // dK dV: query tile, lane i scores query i

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Rows [r0, r0 + n) of a head's [s, hd] matrix (row stride ld) into shared
// dst[n][stride] as fp32, rows past s as zeros (masked later; zeros keep the
// masked products finite). All threads of the block take part.
template <class T>
__device__ void load_rows(float *dst, int stride, const T *src, size_t ld, int r0, int n, int s,
                          int hd) {
  for (int t = threadIdx.x; t < n * hd; t += blockDim.x) {
    const int r = t / hd, d = t % hd;
    dst[r * stride + d] = r0 + r < s ? to_f32(src[(size_t)(r0 + r) * ld + d]) : 0.f;
  }
}

// Forward. Block: kRows query rows [i0, i0 + kRows) of (bi, head) = bh; warp w
// rows i0 + w*kRowsPerWarp + r. Grid: ntiles blocks per head, the tiles with
// the most causal work first. Shared: K, V tiles [kKeys][hd + 1] (padded: lane j
// reading K[j][d] hits bank (j*(hd+1) + d) % 32, all different), Q [kRows][hd].
template <class T, int kD>
__global__ void __launch_bounds__(kThreads)
    flash_fwd(T *ctx, float *lse, const T *qkv, int s, QkvLayout L, float scale, Drop dr) {
  extern __shared__ float smem[];
  const int hd = L.hd, heads = L.heads, ks = hd + 1;
  float *sK = smem, *sV = sK + kKeys * ks, *sQ = sV + kKeys * ks;
  const int ntiles = (s + kRows - 1) / kRows;
  const int bh = blockIdx.x / ntiles, i0 = (ntiles - 1 - blockIdx.x % ntiles) * kRows;
  const int bi = bh / heads, head = bh % heads, unit = bi * L.groups + head / L.per_group();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t ld = L.qkv_ld();
  const T *Q = qkv + L.q_col(bi, head), *K = qkv + L.k_col(unit), *V = qkv + L.v_col(unit);

  load_rows(sQ, hd, Q, ld, i0, kRows, s, hd);
  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kD];  // running max, sum, P V
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int k = 0; k < kD; k++) acc[r][k] = 0.f;
  }
  const int iend = min(s, i0 + kRows);
  for (int j0 = 0; j0 < iend; j0 += kKeys) {  // key tiles not fully above the diagonal
    __syncthreads();                          // the previous tile is consumed
    load_rows(sK, ks, K, ld, j0, kKeys, s, hd);
    load_rows(sV, ks, V, ld, j0, kKeys, s, hd);
    __syncthreads();
    // Score phase: lane owns key j = j0 + lane; sc[r] = Q_i . K_j for the warp's rows.
    const int j = j0 + lane;
    float sc[kRowsPerWarp] = {};
    const float *qw = sQ + warp * kRowsPerWarp * hd;
    for (int d = 0; d < hd; d++) {
      const float kd = sK[lane * ks + d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) sc[r] += qw[r * hd + d] * kd;
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; r++) {
      const int i = i0 + warp * kRowsPerWarp + r;
      if (i >= s || j0 > i) continue;  // warp-uniform: no row, or no visible key here
      const bool vis = j <= i;         // causal (and so j < s)
      const float x = vis ? sc[r] * scale : -INFINITY;
      const float mnew = fmaxf(m[r], warp_max(x));  // finite: key j0 is visible
      const float alpha = expf(m[r] - mnew);        // rescales the old terms; 0 at first
      const float p = vis ? expf(x - mnew) : 0.f;
      l[r] = l[r] * alpha + warp_sum(p);  // the softmax sum excludes dropout
      m[r] = mnew;
      const float pz = vis ? p * keep_scale(dr, bi, head, s, i, j) : 0.f;
      // Accumulate phase: lane owns dims lane + 32k; acc += sum_j pz_j V_j.
#pragma unroll
      for (int k = 0; k < kD; k++) acc[r][k] *= alpha;
      const int jn = min(kKeys, i - j0 + 1);  // visible keys of the tile
      for (int jj = 0; jj < jn; jj++) {
        const float w = __shfl_sync(0xffffffffu, pz, jj);
#pragma unroll
        for (int k = 0; k < kD; k++) {
          const int d = lane + 32 * k;
          if (d < hd) acc[r][k] += w * sV[jj * ks + d];
        }
      }
    }
  }
  // ctx = acc / l; lse = m + log(l) (l >= 1: the row max contributes exp(0)).
  const size_t ldc = L.ctx_ld();
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int i = i0 + warp * kRowsPerWarp + r;
    if (i >= s) continue;
    const float inv = 1.f / l[r];
#pragma unroll
    for (int k = 0; k < kD; k++) {
      const int d = lane + 32 * k;
      if (d < hd) ctx[i * ldc + L.ctx_col(bi, head) + d] = from_f32<T>(acc[r][k] * inv);
    }
    if (lane == 0) lse[(size_t)bh * s + i] = m[r] + logf(l[r]);
  }
}

// dK, dV. Block: kBlockKeys keys [j0, j0 + kBlockKeys) of key/value group
// `unit` = bi * groups + g, warp w keys j0 + w*kKeysPerWarp + kk, summed over
// the group's heads in order and, for each, all query rows i >= j0 in tiles of
// kQueries. Shared: K, V of the block [kBlockKeys][hd] (read as broadcasts),
// Q, dO tiles [kQueries][hd + 1] (padded: lane i reads row i).
template <class T, int kD>
__global__ void __launch_bounds__(kThreads)
    flash_bwd_dkdv(T *dqkv, const T *dctx, const T *qkv, const float *lse, const float *D, int s,
                   QkvLayout L, float scale, Drop dr) {
  extern __shared__ float smem[];
  const int hd = L.hd, heads = L.heads, r = L.per_group(), ks = hd + 1;
  float *sK = smem, *sV = sK + kBlockKeys * hd, *sQ = sV + kBlockKeys * hd,
        *sO = sQ + kQueries * ks;  // sO: dO
  const int ntiles = (s + kBlockKeys - 1) / kBlockKeys;
  const int unit = blockIdx.x / ntiles, j0 = (blockIdx.x % ntiles) * kBlockKeys;  // first: most work
  const int bi = unit / L.groups, g = unit % L.groups;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t ld = L.qkv_ld(), ldc = L.ctx_ld();
  const T *K = qkv + L.k_col(unit), *V = qkv + L.v_col(unit);

  load_rows(sK, hd, K, ld, j0, kBlockKeys, s, hd);
  load_rows(sV, hd, V, ld, j0, kBlockKeys, s, hd);
  const float *kw = sK + warp * kKeysPerWarp * hd, *vw = sV + warp * kKeysPerWarp * hd;
  float dK[kKeysPerWarp][kD], dV[kKeysPerWarp][kD];
#pragma unroll
  for (int kk = 0; kk < kKeysPerWarp; kk++)
#pragma unroll
    for (int k = 0; k < kD; k++) dK[kk][k] = dV[kk][k] = 0.f;

  for (int head = g * r; head < (g + 1) * r; head++) {
    const int bh = bi * heads + head;
    const T *Q = qkv + L.q_col(bi, head), *dO = dctx + L.ctx_col(bi, head);
    for (int q0 = j0; q0 < s; q0 += kQueries) {  // causal: rows i < j0 see none of these keys
      __syncthreads();                           // the previous tile is consumed
      load_rows(sQ, ks, Q, ld, q0, kQueries, s, hd);
      load_rows(sO, ks, dO, ldc, q0, kQueries, s, hd);
      __syncthreads();
      // Score phase: lane owns query i = q0 + lane.
      const int i = q0 + lane;
      const float Li = i < s ? lse[(size_t)bh * s + i] : 0.f,
                  Di = i < s ? D[(size_t)bh * s + i] : 0.f;
      float sc[kKeysPerWarp] = {}, dp[kKeysPerWarp] = {};  // Q_i . K_j, dO_i . V_j
      for (int d = 0; d < hd; d++) {
        const float qd = sQ[lane * ks + d], od = sO[lane * ks + d];
#pragma unroll
        for (int kk = 0; kk < kKeysPerWarp; kk++) {
          sc[kk] += qd * kw[kk * hd + d];
          dp[kk] += od * vw[kk * hd + d];
        }
      }
      float pz[kKeysPerWarp], ds[kKeysPerWarp];  // P_ij Z_ij, dS_ij / scale
#pragma unroll
      for (int kk = 0; kk < kKeysPerWarp; kk++) {
        const int j = j0 + warp * kKeysPerWarp + kk;
        const bool vis = j <= i && i < s;
        const float p = vis ? expf(sc[kk] * scale - Li) : 0.f;
        const float z = vis ? keep_scale(dr, bi, head, s, i, j) : 0.f;
        pz[kk] = p * z;
        ds[kk] = p * (z * dp[kk] - Di);
      }
      // Accumulate phase: lane owns dims; dV_j += pz_ij dO_i, dK_j += ds_ij Q_i.
      const int tn = min(kQueries, s - q0);
      for (int t = 0; t < tn; t++) {
        float od[kD], qd[kD];
#pragma unroll
        for (int k = 0; k < kD; k++) {
          const int d = lane + 32 * k;
          od[k] = d < hd ? sO[t * ks + d] : 0.f;
          qd[k] = d < hd ? sQ[t * ks + d] : 0.f;
        }
#pragma unroll
        for (int kk = 0; kk < kKeysPerWarp; kk++) {
          const float wv = __shfl_sync(0xffffffffu, pz[kk], t);
          const float wk = __shfl_sync(0xffffffffu, ds[kk], t);
#pragma unroll
          for (int k = 0; k < kD; k++) {
            dV[kk][k] += wv * od[k];
            dK[kk][k] += wk * qd[k];
          }
        }
      }
    }
  }  // heads of the group
  T *dK_out = dqkv + L.k_col(unit), *dV_out = dqkv + L.v_col(unit);
#pragma unroll
  for (int kk = 0; kk < kKeysPerWarp; kk++) {
    const int j = j0 + warp * kKeysPerWarp + kk;
    if (j >= s) continue;
#pragma unroll
    for (int k = 0; k < kD; k++) {
      const int d = lane + 32 * k;
      if (d >= hd) continue;
      dK_out[j * ld + d] = from_f32<T>(scale * dK[kk][k]);
      dV_out[j * ld + d] = from_f32<T>(dV[kk][k]);
    }
  }
}

// dQ. Block and warps as flash_fwd: rows [i0, i0 + kRows), key tiles of kKeys
// up to the diagonal. Shared: K, V tiles [kKeys][hd + 1], Q, dO [kRows][hd].
template <class T, int kD>
__global__ void __launch_bounds__(kThreads)
    flash_bwd_dq(T *dqkv, const T *dctx, const T *qkv, const float *lse, const float *D, int s,
                 QkvLayout L, float scale, Drop dr) {
  extern __shared__ float smem[];
  const int hd = L.hd, heads = L.heads, ks = hd + 1;
  float *sK = smem, *sV = sK + kKeys * ks, *sQ = sV + kKeys * ks, *sO = sQ + kRows * hd;
  const int ntiles = (s + kRows - 1) / kRows;
  const int bh = blockIdx.x / ntiles, i0 = (ntiles - 1 - blockIdx.x % ntiles) * kRows;
  const int bi = bh / heads, head = bh % heads, unit = bi * L.groups + head / L.per_group();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t ld = L.qkv_ld(), ldc = L.ctx_ld();
  const T *Q = qkv + L.q_col(bi, head), *K = qkv + L.k_col(unit), *V = qkv + L.v_col(unit);

  load_rows(sQ, hd, Q, ld, i0, kRows, s, hd);
  load_rows(sO, hd, dctx + L.ctx_col(bi, head), ldc, i0, kRows, s, hd);
  float acc[kRowsPerWarp][kD] = {};  // dQ_i / scale
  const int iend = min(s, i0 + kRows);
  for (int j0 = 0; j0 < iend; j0 += kKeys) {
    __syncthreads();
    load_rows(sK, ks, K, ld, j0, kKeys, s, hd);
    load_rows(sV, ks, V, ld, j0, kKeys, s, hd);
    __syncthreads();
    // Score phase: lane owns key j; sc[r] = Q_i . K_j, dp[r] = dO_i . V_j.
    const int j = j0 + lane;
    float sc[kRowsPerWarp] = {}, dp[kRowsPerWarp] = {};
    const float *qw = sQ + warp * kRowsPerWarp * hd, *ow = sO + warp * kRowsPerWarp * hd;
    for (int d = 0; d < hd; d++) {
      const float kd = sK[lane * ks + d], vd = sV[lane * ks + d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; r++) {
        sc[r] += qw[r * hd + d] * kd;
        dp[r] += ow[r * hd + d] * vd;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; r++) {
      const int i = i0 + warp * kRowsPerWarp + r;
      if (i >= s || j0 > i) continue;  // warp-uniform
      const bool vis = j <= i;
      const float Li = lse[(size_t)bh * s + i], Di = D[(size_t)bh * s + i];  // warp-uniform
      const float p = vis ? expf(sc[r] * scale - Li) : 0.f;
      const float z = vis ? keep_scale(dr, bi, head, s, i, j) : 0.f;
      const float ds = p * (z * dp[r] - Di);
      // Accumulate phase: lane owns dims; dQ_i += ds_ij K_j.
      const int jn = min(kKeys, i - j0 + 1);
      for (int jj = 0; jj < jn; jj++) {
        const float w = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
        for (int k = 0; k < kD; k++) {
          const int d = lane + 32 * k;
          if (d < hd) acc[r][k] += w * sK[jj * ks + d];
        }
      }
    }
  }
  T *dQ_out = dqkv + L.q_col(bi, head);
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; r++) {
    const int i = i0 + warp * kRowsPerWarp + r;
    if (i >= s) continue;
#pragma unroll
    for (int k = 0; k < kD; k++) {
      const int d = lane + 32 * k;
      if (d < hd) dQ_out[i * ld + d] = from_f32<T>(scale * acc[r][k]);
    }
  }
}

// Calls f(integral_constant<kD>) with kD = ceil(hd / 32) dims per lane.
template <class F>
void with_dims(int hd, F f) {
  switch ((hd + 31) / 32) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    default: return f(std::integral_constant<int, 4>{});
  }
}

}  // namespace

template <class T>
void flash_attention_forward(T *ctx, float *lse, const T *qkv, int s, int b, int heads,
                             int groups, int hd, float scale, int head_offset,
                             const DropoutSpec &d, cudaStream_t stream) {
  check_head_dim(hd, "flash_attention_forward");
  check_attention_groups("flash_attention_forward", heads, groups);
  if (s <= 0 || b <= 0 || heads <= 0) return;
  const Drop dr = make_attention_drop(d, head_offset);
  const int blocks = grid_blocks(s, kRows, b * heads, "flash_attention_forward");
  const size_t smem = sizeof(float) * (2 * kKeys * (hd + 1) + kRows * hd);
  with_dims(hd, [&](auto kd) {
    auto kernel = flash_fwd<T, decltype(kd)::value>;
    allow_smem(kernel, smem);
    kernel<<<blocks, kThreads, smem, stream>>>(ctx, lse, qkv, s, QkvLayout{b, heads, groups, hd},
                                               scale, dr);
  });
  check_launch("flash_attention_forward");
}

template <class T>
void flash_attention_backward(T *dqkv, const T *dctx, const T *ctx, const T *qkv,
                              const float *lse, int s, int b, int heads, int groups, int hd,
                              float scale, int head_offset, const DropoutSpec &d,
                              cudaStream_t stream) {
  check_head_dim(hd, "flash_attention_backward");
  check_attention_groups("flash_attention_backward", heads, groups);
  if (s <= 0 || b <= 0 || heads <= 0) return;
  const Drop dr = make_attention_drop(d, head_offset);
  const int bh = b * heads;
  const RowDots dots(dctx, ctx, s, bh, hd, stream);  // [b * heads, s]: dO_i . O_i
  const float *D = dots.D;

  const QkvLayout L{b, heads, groups, hd};
  const int kv_blocks = grid_blocks(s, kBlockKeys, b * groups, "flash_attention_backward");
  const int q_blocks = grid_blocks(s, kRows, bh, "flash_attention_backward");
  const size_t kv_smem = sizeof(float) * (2 * kBlockKeys * hd + 2 * kQueries * (hd + 1));
  const size_t q_smem = sizeof(float) * (2 * kKeys * (hd + 1) + 2 * kRows * hd);
  with_dims(hd, [&](auto kd) {
    auto dkdv = flash_bwd_dkdv<T, decltype(kd)::value>;
    allow_smem(dkdv, kv_smem);
    dkdv<<<kv_blocks, kThreads, kv_smem, stream>>>(dqkv, dctx, qkv, lse, D, s, L, scale, dr);
    check_launch("flash_attention_backward (dK, dV)");
    auto dq = flash_bwd_dq<T, decltype(kd)::value>;
    allow_smem(dq, q_smem);
    dq<<<q_blocks, kThreads, q_smem, stream>>>(dqkv, dctx, qkv, lse, D, s, L, scale, dr);
    check_launch("flash_attention_backward (dQ)");
  });
}

#define PTDP_INSTANTIATE(T)                                                                    \
  template void flash_attention_forward<T>(T *, float *, const T *, int, int, int, int, int,   \
                                           float, int, const DropoutSpec &, cudaStream_t);     \
  template void flash_attention_backward<T>(T *, const T *, const T *, const T *,             \
                                            const float *, int, int, int, int, int, float,     \
                                            int, const DropoutSpec &, cudaStream_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
