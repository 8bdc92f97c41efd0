// Fused causal self-attention on the CPU, the twin of kernels/cuda/flash_attention.cu:
// query row by query row, never an [s, s] matrix in memory. The forward keeps
// each row's log-sum-exp; the backward recomputes the probabilities from it
// and draws the dropout mask again (the bits of dropout_attention).
// Layout as the model's (kernels/qkv_layout.h): qkv [s, b, groups, r + 2, hd]
// with r = heads / groups queries per key/value group; ctx [s, b, heads * hd].
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/qkv_layout.h"

namespace ptdp::cpu {

namespace {

// Query i's scores over keys 0..i (x[j] = scale * q_i . k_j) and the dropout
// keep scale of each (0 when dropped).
template <class T>
void row_scores(T *x, T *z, std::vector<uint8_t> &keep, const T *q, const T *k0, size_t ld, int i,
                int hd, T scale, const DropoutSpec &d, uint32_t sample, uint64_t row_element) {
  for (int j = 0; j <= i; j++) {
    const T *k = k0 + (size_t)j * ld;
    T dot = 0;
    for (int c = 0; c < hd; c++) dot += q[c] * k[c];
    x[j] = scale * dot;
  }
  if (d.p > 0) {
    attention_keep_mask(d, sample, row_element, i + 1, keep.data());
    const T kept = T(1) / T(1 - attention_dropout_rate(d.p));
    for (int j = 0; j <= i; j++) z[j] = keep[j] ? kept : T(0);
  } else {
    for (int j = 0; j <= i; j++) z[j] = T(1);
  }
}

}  // namespace

template <class T>
void flash_attention_forward(T *ctx, T *lse, const T *qkv, int s, int b, int heads, int groups,
                             int hd, T scale, int head_offset, const DropoutSpec &d) {
  const QkvLayout L{b, heads, groups, hd};
  const size_t ld = L.qkv_ld(), ld_ctx = L.ctx_ld();
#pragma omp parallel for schedule(dynamic)
  for (int bh = 0; bh < b * heads; bh++) {
    const int bi = bh / heads, head = bh % heads, unit = bi * groups + head / L.per_group();
    const T *Q = qkv + L.q_col(bi, head), *K = qkv + L.k_col(unit), *V = qkv + L.v_col(unit);
    std::vector<T> x((size_t)s), z((size_t)s);
    std::vector<uint8_t> keep((size_t)s);
    for (int i = 0; i < s; i++) {
      row_scores(x.data(), z.data(), keep, Q + (size_t)i * ld, K, ld, i, hd, scale, d,
                 d.sample_offset + (uint32_t)bi,
                 ((uint64_t)(head_offset + head) * s + i) * (uint64_t)s);
      const T m = *std::max_element(x.begin(), x.begin() + i + 1);
      T l = 0;
      for (int j = 0; j <= i; j++) l += (x[j] = std::exp(x[j] - m));
      T *out = ctx + (size_t)i * ld_ctx + L.ctx_col(bi, head);
      std::fill(out, out + hd, T(0));
      for (int j = 0; j <= i; j++) {
        const T w = x[j] / l * z[j];
        if (w == T(0)) continue;
        const T *v = V + (size_t)j * ld;
        for (int c = 0; c < hd; c++) out[c] += w * v[c];
      }
      lse[(size_t)bh * s + i] = m + std::log(l);
    }
  }
}

// With P_ij = exp(x_ij - lse_i) and Z the keep scales: dV_j = sum_i P Z dO_i,
// dP_ij = Z (dO_i . v_j), dS_ij = P (dP_ij - D_i) with D_i = dO_i . O_i,
// dQ_i = scale sum_j dS k_j, dK_j = scale sum_i dS q_i. One task per key/value
// group (its heads write its dK, dV), the group's heads in order.
template <class T>
void flash_attention_backward(T *dqkv, const T *dctx, const T *ctx, const T *qkv, const T *lse,
                              int s, int b, int heads, int groups, int hd, T scale, int head_offset,
                              const DropoutSpec &d) {
  const QkvLayout L{b, heads, groups, hd};
  const size_t ld = L.qkv_ld(), ld_ctx = L.ctx_ld();
  const int r = L.per_group();
#pragma omp parallel for schedule(dynamic)
  for (int unit = 0; unit < b * groups; unit++) {
    const int bi = unit / groups, g = unit % groups;
    const T *K = qkv + L.k_col(unit), *V = qkv + L.v_col(unit);
    T *dK = dqkv + L.k_col(unit), *dV = dqkv + L.v_col(unit);
    for (int i = 0; i < s; i++) {
      T *row = dqkv + (size_t)i * ld + L.group_col(unit);
      std::fill(row, row + (size_t)(r + 2) * hd, T(0));
    }
    std::vector<T> x((size_t)s), z((size_t)s);
    std::vector<uint8_t> keep((size_t)s);
    for (int head = g * r; head < (g + 1) * r; head++) {
      const int bh = bi * heads + head;
      const T *Q = qkv + L.q_col(bi, head);
      T *dQ = dqkv + L.q_col(bi, head);
      for (int i = 0; i < s; i++) {
        const T *q = Q + (size_t)i * ld;
        const T *dout = dctx + (size_t)i * ld_ctx + L.ctx_col(bi, head);
        const T *out = ctx + (size_t)i * ld_ctx + L.ctx_col(bi, head);
        row_scores(x.data(), z.data(), keep, q, K, ld, i, hd, scale, d,
                   d.sample_offset + (uint32_t)bi,
                   ((uint64_t)(head_offset + head) * s + i) * (uint64_t)s);
        T D = 0;
        for (int c = 0; c < hd; c++) D += dout[c] * out[c];
        const T Li = lse[(size_t)bh * s + i];
        T *dq = dQ + (size_t)i * ld;
        for (int j = 0; j <= i; j++) {
          const T p = std::exp(x[j] - Li);
          const T *k = K + (size_t)j * ld, *v = V + (size_t)j * ld;
          T *dk = dK + (size_t)j * ld, *dv = dV + (size_t)j * ld;
          T dp = 0;
          for (int c = 0; c < hd; c++) dp += dout[c] * v[c];
          const T pz = p * z[j], ds = p * (z[j] * dp - D) * scale;
          for (int c = 0; c < hd; c++) {
            dv[c] += pz * dout[c];
            dq[c] += ds * k[c];
            dk[c] += ds * q[c];
          }
        }
      }
    }
  }
}

#define PTDP_INSTANTIATE(T)                                                                       \
  template void flash_attention_forward<T>(T *, T *, const T *, int, int, int, int, int, T, int,  \
                                           const DropoutSpec &);                                  \
  template void flash_attention_backward<T>(T *, const T *, const T *, const T *, const T *, int, \
                                            int, int, int, int, T, int, const DropoutSpec &);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cpu
