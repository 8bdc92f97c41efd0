// Fused causal self-attention on tensor cores for 16-bit runs: the math of
// flash_attention.cu (same layout, dropout bits, lse and deterministic
// backward) with the five products of each tile on mma.sync.m16n8k16: bf16 or
// f16 operands, fp32 accumulation, sm_80 and later. FlashAttention-2's split of
// the work: a warp owns 16 rows of every product of its block and keeps them in
// registers. Operand fragments come from shared memory by ldmatrix (the
// right-hand sides of P V, dS K, (P Z)^T dO and dS^T Q transposed on the way); the tiles reach shared memory by
// cp.async into two buffers, the next tile's copy running behind this tile's
// products. Dropout draws one Philox call per sixteen elements (8-bit draws,
// attention_keep) and passes the keep bits round a quad (flash_common).
// Measured figures: docs/gpu.md.
//
// Numerics (ARCHITECTURE §3, a 16-bit run): Q, K, V and dO hold values of the
// 16-bit type M already, so their products are exact and summed in fp32. The
// probabilities P Z and dS enter their products rounded to M, as FlashAttention
// does and as the unfused path stores them; the softmax sums, lse and D stay
// fp32. Each output is rounded once to M. The global arrays (G) are M itself
// (a 16-bit run's activations) or float arrays of M's values (tests); a head
// dim below the tile (32, 64, 96 or 128) is padded with zeros in shared memory.
//
// Fragments of mma.m16n8k16 (PTX ISA), lane = 4g + t, (row, column):
//   A 16x16: a[0] = (g, 2t..2t+1)  a[1] = (g+8, 2t..)  a[2] = (g, 2t+8..)  a[3] = (g+8, 2t+8..)
//   B 16x8:  b0 = (2t..2t+1, g)    b1 = (2t+8..2t+9, g)
//   C 16x8:  c[0..1] = (g, 2t..2t+1)  c[2..3] = (g+8, 2t..2t+1)
// Two 16-bit values of one register: the lower index in the low half. The C
// tiles of two adjacent 8-column blocks are, element for element, the A
// fragment of their 16 columns, so P and dS pass from one product to the next
// in registers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "engine/core/status.h"
#include "kernels/cuda/flash_common.cuh"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/storage.cuh"
#include "kernels/qkv_layout.h"

namespace ptdp::cuda {

namespace {

using namespace flash;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kRowTile = 16 * kWarps;  // forward, dQ: query rows per block; dK dV: keys per block
constexpr int kFwdKeys = 64;           // forward: the key tile
constexpr int kBwdTile = 32;           // backward: the other side's tile (queries, or keys for dQ)
// Softmax in base 2 (exp2f is one MUFU.EX2; expf is a longer sequence): lse
// stays natural, converted on the way out and in.
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// Shared-memory row stride in elements: + 8 makes the fragment loads of a warp
// hit 32 different banks.
template <int kD>
constexpr int kStride = kD + 8;

template <class M>
__device__ __forceinline__ uint32_t bits(M x) {
  if constexpr (std::is_same_v<M, __nv_bfloat16>)
    return __bfloat16_as_ushort(x);
  else
    return __half_as_ushort(x);
}
// Two fp32 values rounded to M, packed (lo in the low half).
template <class M>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  return bits(from_f32<M>(lo)) | bits(from_f32<M>(hi)) << 16;
}

// c += a b on the tensor cores. Not volatile: a pure function of its
// registers, so the compiler may interleave independent products (volatile
// asm keeps program order, which made each accumulator's chain of products
// wait for the one before).
template <class M>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<M, __nv_bfloat16>)
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the launchers refuse devices below sm_80
#endif
}

// Four 8x8 matrices of 16-bit values from shared memory in one instruction
// (ldmatrix): lanes 8i .. 8i + 7 give the addresses of matrix i's 8 rows (16
// bytes each, 16-byte aligned), and r[i] is this lane's part of matrix i:
// (row g, columns 2t, 2t + 1), or with kTrans (rows 2t, 2t + 1, column g).
template <bool kTrans>
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void *row_address) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
  __trap();  // the launchers refuse devices below sm_80
#endif
}

// The A fragment of rows row0.., columns k0.. of a [rows][stride] tile: the
// four 8x8 quarters (rows +0/+8) x (columns +0/+8) are a[0..3].
template <class M>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const M *tile, int stride, int row0,
                                       int k0, int lane) {
  ldsm4<false>(a, tile + (row0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * stride + k0 + 8 * (lane >> 4));
}
// B fragments (b0, b1) of two 8-row blocks: rows row0.. and row0 + 8.. of a
// tile are B's columns, columns k0..k0 + 15 its k (K in Q K^T, Q in K Q^T).
// b[0], b[1]: rows row0..; b[2], b[3]: rows row0 + 8...
template <class M, int kD>
__device__ __forceinline__ void load_b_rows(uint32_t (&b)[4], const M *X, int row0, int k0, int lane) {
  ldsm4<false>(b, X + (row0 + (lane & 7) + 8 * (lane >> 4)) * kStride<kD> + k0 + 8 * ((lane >> 3) & 1));
}
// A fragment of C tiles lo (columns 0..7) and hi (8..15), rounded to M.
template <class M>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack<M>(lo[0], lo[1]);
  a[1] = pack<M>(lo[2], lo[3]);
  a[2] = pack<M>(hi[0], hi[1]);
  a[3] = pack<M>(hi[2], hi[3]);
}
// c[nt] += A X^T over k = 0..kD for the kN 8-row blocks nt of X (K in Q K^T:
// X's rows are B's columns). The k-steps outside, the blocks inside: the kN
// accumulators are independent, so their products overlap on the tensor
// cores; one ldmatrix gives the B fragments of two blocks.
template <class M, int kD, int kN>
__device__ __forceinline__ void mma_rows(float (&c)[kN][4], const uint32_t (&a)[kD / 16][4],
                                         const M *X, int lane) {
  static_assert(kN % 2 == 0, "blocks come in pairs");
#pragma unroll
  for (int kk = 0; kk < kD / 16; kk++)
#pragma unroll
    for (int nt = 0; nt < kN; nt += 2) {
      uint32_t b[4];
      load_b_rows<M, kD>(b, X, 8 * nt, 16 * kk, lane);
      mma<M>(c[nt], a[kk], b[0], b[1]);
      mma<M>(c[nt + 1], a[kk], b[2], b[3]);
    }
}
// mma_rows with A's fragments read from the shared [.][kStride] tile A (rows
// a_row0..a_row0 + 15) at each k-step instead of held in registers: at kD 128
// the eight held fragments spill the forward's registers; this costs one
// ldmatrix per k-step and gives the same products in the same order.
template <class M, int kD, int kN>
__device__ __forceinline__ void mma_rows_shared_a(float (&c)[kN][4], const M *A, int a_row0,
                                                  const M *X, int lane) {
  static_assert(kN % 2 == 0, "blocks come in pairs");
#pragma unroll
  for (int kk = 0; kk < kD / 16; kk++) {
    uint32_t a[4];
    load_a(a, A, kStride<kD>, a_row0, 16 * kk, lane);
#pragma unroll
    for (int nt = 0; nt < kN; nt += 2) {
      uint32_t b[4];
      load_b_rows<M, kD>(b, X, 8 * nt, 16 * kk, lane);
      mma<M>(c[nt], a, b[0], b[1]);
      mma<M>(c[nt + 1], a, b[2], b[3]);
    }
  }
}
// c[nd] += a X[k0..k0+15][8nd..8nd+7] for every 8-column block nd of X (V in
// P V): X's rows are k, read transposed; one ldmatrix serves two blocks.
template <class M, int kD>
__device__ __forceinline__ void mma_cols(float (&c)[kD / 8][4], const uint32_t (&a)[4], const M *X,
                                         int k0, int lane) {
  const M *p = X + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * kStride<kD> + 8 * (lane >> 4);
#pragma unroll
  for (int nd = 0; nd < kD / 8; nd += 2) {
    uint32_t b[4];  // block nd: b[0], b[1]; nd + 1: b[2], b[3]
    ldsm4<true>(b, p + 8 * nd);
    mma<M>(c[nd], a, b[0], b[1]);
    mma<M>(c[nd + 1], a, b[2], b[3]);
  }
}

// Copies from global to shared memory that run behind the compute (cp.async,
// sm_80): a kernel issues the next tile's copies, then computes on the
// current tile, and waits for the copies only when it needs them.
__device__ __forceinline__ void copy16_async(void *dst, const void *src, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(valid ? 16 : 0));  // source size 0: the 16 bytes are zeros
#else
  __trap();  // the launchers refuse devices below sm_80
#endif
}
__device__ __forceinline__ void copies_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most `pending` committed groups of this thread are in flight.
template <int pending>
__device__ __forceinline__ void copies_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
#endif
}

// Rows [r0, r0 + n) of a head's [s, hd] matrix of G (row stride ld) into the
// shared [n][kStride] tile as M; rows past s and columns past hd as zeros.
// When the rows are 16-byte runs of M itself (a 16-bit run's arrays with hd
// the tile's width) the copy is asynchronous, 16 bytes a thread at a time, and
// lands after copies_wait; otherwise it converts element by element and is
// done when it returns. Either way a __syncthreads must follow before use.
template <class M, int kD, int n, class G>
__device__ __forceinline__ void load_tile(M *dst, const G *src, size_t ld, int r0, int s, int hd) {
  if constexpr (std::is_same_v<G, M>) {
    if (hd == kD && ld % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0) {
      constexpr int kChunks = kD / 8;  // 16-byte chunks of a row
#pragma unroll
      for (int c = threadIdx.x; c < n * kChunks; c += kThreads) {
        const int r = c / kChunks, d = 8 * (c % kChunks);
        const bool valid = r0 + r < s;
        copy16_async(dst + r * kStride<kD> + d, src + (valid ? (size_t)(r0 + r) * ld + d : 0), valid);
      }
      return;
    }
  }
  for (int e = threadIdx.x; e < n * kD; e += kThreads) {
    const int r = e / kD, d = e % kD;
    dst[r * kStride<kD> + d] =
        from_f32<M>(r0 + r < s && d < hd ? to_f32(src[(size_t)(r0 + r) * ld + d]) : 0.f);
  }
}

// The two buffers of K and V tiles of kRows rows (the forward, dQ): queues
// the copy of tile it + 1, if there is one, into the buffer that tile it - 1
// left (the block finished with it at its last __syncthreads), then waits
// until tile it is in for the whole block. Returns tile it's buffer.
template <class M, int kD, int kRows, class G>
__device__ __forceinline__ int key_tile_in(M *sK, M *sV, const G *K, const G *V, size_t ld, int it,
                                           int tiles, int s, int hd) {
  constexpr int kTile = kRows * kStride<kD>;
  const int buf = it & 1;
  if (it + 1 < tiles) {
    load_tile<M, kD, kRows>(sK + (buf ^ 1) * kTile, K, ld, (it + 1) * kRows, s, hd);
    load_tile<M, kD, kRows>(sV + (buf ^ 1) * kTile, V, ld, (it + 1) * kRows, s, hd);
    copies_commit();
    copies_wait<1>();
  } else {
    copies_wait<0>();
  }
  __syncthreads();
  return buf;
}

// Writes the 16 x kD result c (rows row[0], row[1] of this lane, times `mul`)
// to out + row * ld, columns below hd, rows below s.
// Rounded once to M: stored as M (G = M) or as M's value in float.
template <class M, int kD, class G>
__device__ void store_rows(G *out, size_t ld, const float (&c)[kD / 8][4], const int (&row)[2],
                           float mul0, float mul1, int s, int hd, int t) {
#pragma unroll
  for (int r = 0; r < 2; r++) {
    if (row[r] >= s) continue;
    G *o = out + (size_t)row[r] * ld;
    const float mul = r ? mul1 : mul0;
#pragma unroll
    for (int nd = 0; nd < kD / 8; nd++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        const int d = 8 * nd + 2 * t + e;
        if (d >= hd) continue;
        if constexpr (std::is_same_v<G, float>)
          o[d] = round_as<M>(c[nd][2 * r + e] * mul);
        else
          o[d] = from_f32<G>(c[nd][2 * r + e] * mul);
      }
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Forward. Block: query rows [i0, i0 + 64) of (bi, head) = bh, warp w rows
// i0 + 16w.. (lane: rows g and g + 8). Key tiles of 64 up to the diagonal,
// two buffers: tile it + 1 is copied in while tile it is computed.
// Shared: Q [64], K, V [2][64] rows of kStride.
template <class M, int kD, class G>
__global__ void __launch_bounds__(kThreads)
    fwd(G *ctx, float *lse, const G *qkv, int s, QkvLayout L, float scale, Drop dr) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  constexpr int S = kStride<kD>, kTile = kFwdKeys * S;
  M *sQ = reinterpret_cast<M *>(smem_bytes), *sK = sQ + kRowTile * S, *sV = sK + 2 * kTile;
  const int ntiles = (s + kRowTile - 1) / kRowTile;
  const int bh = blockIdx.x / ntiles, i0 = (ntiles - 1 - blockIdx.x % ntiles) * kRowTile;
  const int hd = L.hd, heads = L.heads, bi = bh / heads, head = bh % heads;
  const int unit = bi * L.groups + head / L.per_group();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float scale2 = scale * kLog2e;  // scores in base 2: exp(x scale) = 2^(x scale2)
  const size_t ld = L.qkv_ld();
  const G *Q = qkv + L.q_col(bi, head), *K = qkv + L.k_col(unit), *V = qkv + L.v_col(unit);
  const int w0 = i0 + 16 * warp;
  const int row[2] = {w0 + g, w0 + g + 8};
  const int key_tiles = (min(s, i0 + kRowTile) + kFwdKeys - 1) / kFwdKeys;

  load_tile<M, kD, kRowTile>(sQ, Q, ld, i0, s, hd);
  copies_commit();
  load_tile<M, kD, kFwdKeys>(sK, K, ld, 0, s, hd);
  load_tile<M, kD, kFwdKeys>(sV, V, ld, 0, s, hd);
  copies_commit();
  copies_wait<1>();  // Q is in
  __syncthreads();
  // Q's A fragments: held in registers up to kD 96; read from sQ at every k-step
  // at kD 128, where holding them spills (nvcc -Xptxas -v: 255 registers).
  constexpr bool kQShared = kD >= 128;
  uint32_t qa[kQShared ? 1 : kD / 16][4];
  if constexpr (!kQShared)
#pragma unroll
    for (int kk = 0; kk < kD / 16; kk++) load_a(qa[kk], sQ, S, 16 * warp, 16 * kk, lane);
  float o[kD / 8][4] = {};                                   // sum_j P~ Z V of rows g, g + 8
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // running max; this lane's part of the sum

  for (int it = 0; it < key_tiles; it++) {
    const int j0 = it * kFwdKeys, buf = key_tile_in<M, kD, kFwdKeys>(sK, sV, K, V, ld, it, key_tiles, s, hd);
    const M *tK = sK + buf * kTile, *tV = sV + buf * kTile;
    if (w0 < s && j0 <= w0 + 15) {  // warp-uniform: rows, and a visible key
      // Every block's product, also the hidden ones of the diagonal tile: a
      // run-time bound inside the unrolled loop would split it into chains.
      float sc[kFwdKeys / 8][4] = {};
      if constexpr (kQShared)
        mma_rows_shared_a<M, kD>(sc, sQ, 16 * warp, tK, lane);
      else
        mma_rows<M, kD>(sc, qa, tK, lane);
      // Scale and mask (only the diagonal tile and rows near s hide keys); the
      // row max over the tile (the 4 lanes of a quad share a row).
      const bool edge = j0 + kFwdKeys - 1 > w0 || w0 + 15 >= s;  // warp-uniform
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < kFwdKeys / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int r = e / 2, j = j0 + 8 * nt + 2 * t + (e & 1);
          const bool vis = !edge || (j <= row[r] && row[r] < s);  // causal (and so j < s)
          sc[nt][e] = vis ? sc[nt][e] * scale2 : -INFINITY;
          mx[r] = fmaxf(mx[r], sc[nt][e]);
        }
      float base[2];
#pragma unroll
      for (int r = 0; r < 2; r++) {
        const float mnew = fmaxf(m[r], quad_max(mx[r]));
        base[r] = mnew == -INFINITY ? 0.f : mnew;  // a row past s sees no key: keep it finite
        const float alpha = exp2f(m[r] - base[r]);  // rescales the old terms; 0 at first
        m[r] = mnew;
        l[r] *= alpha;
#pragma unroll
        for (int nd = 0; nd < kD / 8; nd++) o[nd][2 * r] *= alpha, o[nd][2 * r + 1] *= alpha;
      }
      // P~ = exp(x - m) (the sum excludes dropout), then P~ Z for the product.
      const uint32_t keep = dr.on ? keep_rows_mask<kFwdKeys / 8>(dr, bi, head, s, w0, j0, w0 + 15, lane) : 0u;
#pragma unroll
      for (int nt = 0; nt < kFwdKeys / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const float p = exp2f(sc[nt][e] - base[e / 2]);
          l[e / 2] += p;
          sc[nt][e] = dr.on ? p * keep_of(dr, keep, 4 * nt + e) : p;
        }
#pragma unroll
      for (int kk = 0; kk < kFwdKeys / 16; kk++) {  // hidden keys: P = 0
        uint32_t pa[4];
        c_to_a<M>(pa, sc[2 * kk], sc[2 * kk + 1]);
        mma_cols<M, kD>(o, pa, tV, 16 * kk, lane);
      }
    }
    __syncthreads();  // tile it is consumed before its buffer is refilled
  }
  // ctx = o / l; lse = (m + log2(l)) ln 2 (l >= 1: the row max contributes 2^0).
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    l[r] = quad_sum(l[r]);
    inv[r] = 1.f / l[r];
    if (t == 0 && row[r] < s) lse[(size_t)bh * s + row[r]] = (m[r] + log2f(l[r])) * kLn2;
  }
  store_rows<M, kD>(ctx + L.ctx_col(bi, head), L.ctx_ld(), o, row, inv[0], inv[1], s, hd, t);
}

// dK, dV. Block: keys [j0, j0 + 64) of key/value group unit = bi * groups + g,
// warp w keys j0 + 16w.. (lane: keys g and g + 8), summed over the group's r
// heads in order and, for each, the query tiles of 32 from j0 on (causal:
// earlier queries see none of them): r * query_tiles tiles in one stream, two
// buffers as in the forward. Products transposed: S^T = K Q^T, dP^T = V dO^T,
// dV += (P Z)^T dO, dK += dS^T Q.
// Shared: K, V [64], Q, dO [2][32] rows of kStride; lse and D [2][32].
// Groups unit0 .. of the grid. With dsT, also the operand dS / scale rounded to
// M as dS^T, the group's head slot j at dsT + ((unit - unit0) r + j) s ds_ld,
// row k (key) of ds_ld columns (queries), zeros where hidden, for the dQ GEMMs
// (dQ = scale dS K) in query chunks of ds_chunk (dq_query_chunk): row k is
// written from its chunk's first query on, every column up to ds_ld.
template <class M, int kD, class G>
__global__ void __launch_bounds__(kThreads)
    bwd_dkdv(G *dqkv, const G *dctx, const G *qkv, const float *lse, const float *D,
             int s, QkvLayout L, float scale, Drop dr, int unit0, M *dsT, int ds_ld, int ds_chunk) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  constexpr int S = kStride<kD>, kTile = kBwdTile * S;
  M *sK = reinterpret_cast<M *>(smem_bytes), *sV = sK + kRowTile * S, *sQ = sV + kRowTile * S,
    *sO = sQ + 2 * kTile;  // sO: dO
  float *sL = reinterpret_cast<float *>(sO + 2 * kTile), *sD = sL + 2 * kBwdTile;
  const int ntiles = (s + kRowTile - 1) / kRowTile;
  const int unit = unit0 + blockIdx.x / ntiles, j0 = (blockIdx.x % ntiles) * kRowTile;  // first: most work
  const int hd = L.hd, heads = L.heads, r = L.per_group(), bi = unit / L.groups, gr = unit % L.groups;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float scale2 = scale * kLog2e;  // scores in base 2: exp(x scale) = 2^(x scale2)
  const size_t ld = L.qkv_ld(), ldc = L.ctx_ld();
  const G *K = qkv + L.k_col(unit), *V = qkv + L.v_col(unit);
  const int w0 = j0 + 16 * warp;
  const int key[2] = {w0 + g, w0 + g + 8};
  const int query_tiles = (s - j0 + kBwdTile - 1) / kBwdTile, tiles = r * query_tiles;
  // dS^T of head slot j of the group (null without dsT).
  auto ds_of = [&](int j) -> M * {
    return dsT ? dsT + ((size_t)(unit - unit0) * r + j) * s * ds_ld : nullptr;
  };
  // dS^T of this lane's keys for queries q .. q + 1 (q even). Columns s ..
  // ds_ld - 1 get the zeros of hidden queries: the GEMM's 16-byte loads read
  // them (into output rows it drops), so they are never uninitialized memory.
  auto store_ds = [&](M *ds_rows, int q, const float (&c)[4]) {
#pragma unroll
    for (int e = 0; e < 2; e++)
      if (key[e] < s && q < ds_ld)
        *reinterpret_cast<uint32_t *>(ds_rows + (size_t)key[e] * ds_ld + q) = pack<M>(c[2 * e], c[2 * e + 1]);
  };
  if (dsT) {  // queries z0 .. j0 - 1 of this chunk see none of these keys: zeros, 16 bytes a store
    const int z0 = j0 / ds_chunk * ds_chunk, rows = min(kRowTile, s - j0), chunks = (j0 - z0) / 8;
    for (int j = 0; j < r; j++)
      for (int e = threadIdx.x; e < rows * chunks; e += kThreads)
        reinterpret_cast<uint4 *>(ds_of(j) + (size_t)(j0 + e / chunks) * ds_ld + z0)[e % chunks] = uint4{0, 0, 0, 0};
  }
  auto load_queries = [&](int it) {  // tile it (head slot it / query_tiles) into buffer it & 1
    const int head = gr * r + it / query_tiles, q0 = j0 + (it % query_tiles) * kBwdTile, buf = it & 1;
    const size_t bh = (size_t)bi * heads + head;
    load_tile<M, kD, kBwdTile>(sQ + buf * kTile, qkv + L.q_col(bi, head), ld, q0, s, hd);
    load_tile<M, kD, kBwdTile>(sO + buf * kTile, dctx + L.ctx_col(bi, head), ldc, q0, s, hd);
    for (int e = threadIdx.x; e < kBwdTile; e += kThreads) {
      const int i = q0 + e;
      sL[buf * kBwdTile + e] = i < s ? lse[bh * s + i] * kLog2e : 0.f;
      sD[buf * kBwdTile + e] = i < s ? D[bh * s + i] : 0.f;
    }
    copies_commit();
  };

  load_tile<M, kD, kRowTile>(sK, K, ld, j0, s, hd);
  load_tile<M, kD, kRowTile>(sV, V, ld, j0, s, hd);
  copies_commit();
  load_queries(0);
  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  for (int it = 0; it < tiles; it++) {
    const int slot = it / query_tiles, head = gr * r + slot;
    const int q0 = j0 + (it % query_tiles) * kBwdTile, buf = it & 1;
    M *ds_rows = ds_of(slot);
    if (it + 1 < tiles) {
      load_queries(it + 1);
      copies_wait<1>();
    } else {
      copies_wait<0>();
    }
    __syncthreads();  // tile it (and K, V) is in
    const M *tQ = sQ + buf * kTile, *tO = sO + buf * kTile;
    const float *tL = sL + buf * kBwdTile, *tD = sD + buf * kBwdTile;
    if (w0 < s && w0 <= q0 + kBwdTile - 1) {  // warp-uniform: keys, and a visible query
      float st[kBwdTile / 8][4] = {}, dpt[kBwdTile / 8][4] = {};  // S^T, dP^T: keys x queries
#pragma unroll
      for (int kk = 0; kk < kD / 16; kk++) {
        uint32_t ka[4], va[4];  // one k-step of the warp's K and V rows
        load_a(ka, sK, S, 16 * warp, 16 * kk, lane);
        load_a(va, sV, S, 16 * warp, 16 * kk, lane);
#pragma unroll
        for (int nt = 0; nt < kBwdTile / 8; nt += 2) {  // query blocks nt, nt + 1
          uint32_t bq[4], bo[4];
          load_b_rows<M, kD>(bq, tQ, 8 * nt, 16 * kk, lane);
          load_b_rows<M, kD>(bo, tO, 8 * nt, 16 * kk, lane);
          mma<M>(st[nt], ka, bq[0], bq[1]);
          mma<M>(st[nt + 1], ka, bq[2], bq[3]);
          mma<M>(dpt[nt], va, bo[0], bo[1]);
          mma<M>(dpt[nt + 1], va, bo[2], bo[3]);
        }
      }
      // P Z into st, dS / scale into dpt.
      const bool edge = w0 + 15 > q0 || q0 + kBwdTile > s;  // some query hidden (warp-uniform)
      static_assert(kBwdTile == 32, "keep_cols_mask draws one query per lane");
      const uint32_t keep = dr.on ? keep_cols_mask(dr, bi, head, s, w0, q0, lane) : 0u;
#pragma unroll
      for (int nt = 0; nt < kBwdTile / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int j = key[e / 2], qi = 8 * nt + 2 * t + (e & 1), i = q0 + qi;
          // Selects, not branches: a hidden element's values are computed and dropped.
          const bool vis = !edge || (j <= i && i < s);  // causal (and so j < s)
          const float p = exp2f(fmaf(st[nt][e], scale2, -tL[qi]));
          const float z = dr.on ? keep_of(dr, keep, 4 * nt + e) : 1.f;
          st[nt][e] = vis ? p * z : 0.f;
          dpt[nt][e] = vis ? p * (z * dpt[nt][e] - tD[qi]) : 0.f;
        }
      if (ds_rows)
#pragma unroll
        for (int nt = 0; nt < kBwdTile / 8; nt++) store_ds(ds_rows, q0 + 8 * nt + 2 * t, dpt[nt]);
#pragma unroll
      for (int kq = 0; kq < kBwdTile / 16; kq++) {
        uint32_t pa[4], da[4];
        c_to_a<M>(pa, st[2 * kq], st[2 * kq + 1]);
        c_to_a<M>(da, dpt[2 * kq], dpt[2 * kq + 1]);
        mma_cols<M, kD>(dv, pa, tO, 16 * kq, lane);
        mma_cols<M, kD>(dk, da, tQ, 16 * kq, lane);
      }
    } else if (ds_rows) {  // every query of the tile before these keys: hidden
      const float zero[4] = {};
#pragma unroll
      for (int nt = 0; nt < kBwdTile / 8; nt++) store_ds(ds_rows, q0 + 8 * nt + 2 * t, zero);
    }
    __syncthreads();  // tile it is consumed before its buffer is refilled
  }
  G *dK = dqkv + L.k_col(unit), *dV = dqkv + L.v_col(unit);
  store_rows<M, kD>(dK, ld, dk, key, scale, scale, s, hd, t);
  store_rows<M, kD>(dV, ld, dv, key, 1.f, 1.f, s, hd, t);
}

// dQ. Block and warps as the forward: rows [i0, i0 + 64), key tiles of 32 up
// to the diagonal, two buffers; dS = P (Z dP - D) from S = Q K^T and dP = dO
// V^T, then dQ += dS K. Shared: Q, dO [64] (read once into registers), K, V
// [2][32].
template <class M, int kD, class G>
__global__ void __launch_bounds__(kThreads)
    bwd_dq(G *dqkv, const G *dctx, const G *qkv, const float *lse, const float *D,
           int s, QkvLayout L, float scale, Drop dr) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  constexpr int S = kStride<kD>, kTile = kBwdTile * S;
  M *sQ = reinterpret_cast<M *>(smem_bytes), *sO = sQ + kRowTile * S, *sK = sO + kRowTile * S,
    *sV = sK + 2 * kTile;
  const int ntiles = (s + kRowTile - 1) / kRowTile;
  const int bh = blockIdx.x / ntiles, i0 = (ntiles - 1 - blockIdx.x % ntiles) * kRowTile;
  const int hd = L.hd, heads = L.heads, bi = bh / heads, head = bh % heads;
  const int unit = bi * L.groups + head / L.per_group();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const float scale2 = scale * kLog2e;  // scores in base 2: exp(x scale) = 2^(x scale2)
  const size_t ld = L.qkv_ld(), ldc = L.ctx_ld();
  const G *Q = qkv + L.q_col(bi, head), *K = qkv + L.k_col(unit), *V = qkv + L.v_col(unit);
  const int w0 = i0 + 16 * warp;
  const int row[2] = {w0 + g, w0 + g + 8};
  const int key_tiles = (min(s, i0 + kRowTile) + kBwdTile - 1) / kBwdTile;

  load_tile<M, kD, kRowTile>(sQ, Q, ld, i0, s, hd);
  load_tile<M, kD, kRowTile>(sO, dctx + L.ctx_col(bi, head), ldc, i0, s, hd);
  copies_commit();
  load_tile<M, kD, kBwdTile>(sK, K, ld, 0, s, hd);
  load_tile<M, kD, kBwdTile>(sV, V, ld, 0, s, hd);
  copies_commit();
  copies_wait<1>();  // Q, dO are in
  __syncthreads();
  uint32_t qa[kD / 16][4], oa[kD / 16][4];
#pragma unroll
  for (int kk = 0; kk < kD / 16; kk++) {
    load_a(qa[kk], sQ, S, 16 * warp, 16 * kk, lane);
    load_a(oa[kk], sO, S, 16 * warp, 16 * kk, lane);
  }
  float Lr[2], Dr[2];
#pragma unroll
  for (int r = 0; r < 2; r++) {
    Lr[r] = row[r] < s ? lse[(size_t)bh * s + row[r]] * kLog2e : 0.f;
    Dr[r] = row[r] < s ? D[(size_t)bh * s + row[r]] : 0.f;
  }
  float dq[kD / 8][4] = {};  // dQ / scale
  for (int it = 0; it < key_tiles; it++) {
    const int k0 = it * kBwdTile, buf = key_tile_in<M, kD, kBwdTile>(sK, sV, K, V, ld, it, key_tiles, s, hd);
    const M *tK = sK + buf * kTile, *tV = sV + buf * kTile;
    if (w0 < s && k0 <= w0 + 15) {  // warp-uniform
      float sc[kBwdTile / 8][4] = {}, dp[kBwdTile / 8][4] = {};
      mma_rows<M, kD>(sc, qa, tK, lane);
      mma_rows<M, kD>(dp, oa, tV, lane);
      const bool edge = k0 + kBwdTile - 1 > w0 || w0 + 15 >= s;  // some key hidden (warp-uniform)
      const uint32_t keep = dr.on ? keep_rows_mask<kBwdTile / 8>(dr, bi, head, s, w0, k0, w0 + 15, lane) : 0u;
#pragma unroll
      for (int nt = 0; nt < kBwdTile / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int r = e / 2, i = row[r], j = k0 + 8 * nt + 2 * t + (e & 1);
          const bool vis = !edge || (j <= i && i < s);  // a select, as in bwd_dkdv
          const float p = exp2f(fmaf(sc[nt][e], scale2, -Lr[r]));
          const float z = dr.on ? keep_of(dr, keep, 4 * nt + e) : 1.f;
          sc[nt][e] = vis ? p * (z * dp[nt][e] - Dr[r]) : 0.f;
        }
#pragma unroll
      for (int kk = 0; kk < kBwdTile / 16; kk++) {
        uint32_t da[4];
        c_to_a<M>(da, sc[2 * kk], sc[2 * kk + 1]);
        mma_cols<M, kD>(dq, da, tK, 16 * kk, lane);
      }
    }
    __syncthreads();  // tile it is consumed before its buffer is refilled
  }
  store_rows<M, kD>(dqkv + L.q_col(bi, head), ld, dq, row, scale, scale, s, hd, t);
}

// Queries per dQ GEMM. Causal: dQ's rows [q0, q0 + c) need dS's columns of
// keys below q0 + c only, so GEMMs over query chunks skip most of dS's hidden
// half (8 chunks: 36/64 of the products and reads of one GEMM over all keys)
// and the dK dV kernel writes zeros in the diagonal chunks only. At least 256
// rows a GEMM; a multiple of the kernel's key block, so that a block's keys
// lie in one chunk and every chunk starts 16-byte aligned.
int dq_query_chunk(int s) {
  return std::max(4 * kRowTile, (s + 8 * kRowTile - 1) / (8 * kRowTile) * kRowTile);
}

// Calls f(integral_constant<kD>) with the smallest tile of 32, 64, 96, 128 >= hd.
template <class F>
void with_head_tile(int hd, F f) {
  if (hd <= 32) return f(std::integral_constant<int, 32>{});
  if (hd <= 64) return f(std::integral_constant<int, 64>{});
  if (hd <= 96) return f(std::integral_constant<int, 96>{});
  return f(std::integral_constant<int, 128>{});
}

// Calls f(M{}) for the operand type; checks that 16-bit arrays (G) hold that
// type, then that the device can run mma.sync (argument errors come first, the
// same on every device).
template <class G, class F>
void with_operand_type(DType mma, const char *what, F f) {
  if (mma != DType::bf16 && mma != DType::f16)
    fail(Status::invalid_argument, what, ": operand type ", dtype_name(mma),
         " is not a 16-bit type (bf16 or f16)");
  if constexpr (!std::is_same_v<G, float>) {
    const DType g = std::is_same_v<G, __half> ? DType::f16 : DType::bf16;
    if (g != mma)
      fail(Status::invalid_argument, what, ": arrays of ", dtype_name(g), " with operand type ",
           dtype_name(mma), " (16-bit arrays must hold the operand type)");
  }
  int dev = 0, major = 0;
  check(cudaGetDevice(&dev), what);
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), what);
  if (major < 8)
    fail(Status::invalid_config, what, ": tensor-core attention needs compute capability 8.0 or ",
         "newer; this GPU has ", major, ".x");
  // 16-bit G: only the matching M is instantiated.
  if constexpr (!std::is_same_v<G, float>) {
    f(G{});
  } else if (mma == DType::bf16) {
    f(__nv_bfloat16{});
  } else {
    f(__half{});
  }
}

// The shared memory of a kernel with `rows` rows of the tile and `floats` floats.
template <class M, int kD>
constexpr size_t smem_bytes(int rows, int floats = 0) {
  return sizeof(M) * rows * kStride<kD> + sizeof(float) * floats;
}

}  // namespace

template <class G>
void flash_attention_forward_mma(G *ctx, float *lse, const G *qkv, int s, int b, int heads,
                                 int groups, int hd, float scale, int head_offset,
                                 const DropoutSpec &d, DType mma, cudaStream_t stream) {
  const char *what = "flash_attention_forward_mma";
  check_head_dim(hd, what);
  check_attention_groups(what, heads, groups);
  if (s <= 0 || b <= 0 || heads <= 0) return;
  const Drop dr = make_attention_drop(d, head_offset);
  const int blocks = grid_blocks(s, kRowTile, b * heads, what);
  const QkvLayout L{b, heads, groups, hd};
  with_operand_type<G>(mma, what, [&](auto m) {
    using M = decltype(m);
    with_head_tile(hd, [&](auto kd) {
      constexpr int kD = decltype(kd)::value;
      const size_t smem = smem_bytes<M, kD>(kRowTile + 4 * kFwdKeys);
      auto kernel = fwd<M, kD, G>;
      allow_smem(kernel, smem);
      kernel<<<blocks, kThreads, smem, stream>>>(ctx, lse, qkv, s, L, scale, dr);
    });
  });
  check_launch(what);
}

template <class G>
void flash_attention_backward_mma(G *dqkv, const G *dctx, const G *ctx, const G *qkv,
                                  const float *lse, int s, int b, int heads, int groups, int hd,
                                  float scale, int head_offset, const DropoutSpec &d, DType mma,
                                  cudaStream_t stream, Gemm *dq_gemm, size_t dq_scratch_bytes) {
  const char *what = "flash_attention_backward_mma";
  check_head_dim(hd, what);
  check_attention_groups(what, heads, groups);
  if (s <= 0 || b <= 0 || heads <= 0) return;
  const Drop dr = make_attention_drop(d, head_offset);
  const QkvLayout L{b, heads, groups, hd};
  const int bh = b * heads, units = b * groups, r = L.per_group();
  with_operand_type<G>(mma, what, [&](auto m) {
    using M = decltype(m);
    with_head_tile(hd, [&](auto kd) {
      constexpr int kD = decltype(kd)::value;
      const RowDots dots(dctx, ctx, s, bh, hd, stream);  // [b * heads, s]: dO_i . O_i
      const float *D = dots.D;
      const size_t kv_smem = smem_bytes<M, kD>(2 * kRowTile + 4 * kBwdTile, 4 * kBwdTile);
      auto dkdv = bwd_dkdv<M, kD, G>;
      allow_smem(dkdv, kv_smem);
      // dQ = scale dS K as a GEMM over the dS^T that the dK dV kernel leaves in
      // scratch (rows of 16 bytes), key/value groups in chunks that fit
      // dq_scratch_bytes: no second pass over S, dP and the dropout draws.
      // Needs arrays of M and hd % 8 == 0 (aligned rows); else, or when one
      // group's dS exceeds the scratch, the dQ kernel.
      const int ds_ld = (s + 7) / 8 * 8;
      const size_t unit_bytes = sizeof(M) * (size_t)s * ds_ld * r;  // a group's heads' dS
      std::unique_ptr<StreamScratch> scratch;
      int chunk = 0;
      if (std::is_same_v<G, M> && dq_gemm && hd % 8 == 0 && unit_bytes <= dq_scratch_bytes) {
        chunk = (int)std::min<size_t>(units, dq_scratch_bytes / unit_bytes);
        try {
          scratch = std::make_unique<StreamScratch>(unit_bytes * chunk, stream,
                                                    "flash_attention_backward_mma scratch (dS)");
        } catch (const Error &e) {  // no room for dS: the dQ kernel needs none
          if (e.code() != Status::out_of_memory) throw;
          (void)cudaGetLastError();
        }
      }
      if (scratch) {
        M *dsT = scratch->as<M>();
        const int ld = (int)L.qkv_ld(), stride = (r + 2) * hd;  // a group's width in qkv
        const int qc = dq_query_chunk(s);
        for (int u0 = 0; u0 < units; u0 += chunk) {
          const int n = std::min(chunk, units - u0);
          dkdv<<<grid_blocks(s, kRowTile, n, what), kThreads, kv_smem, stream>>>(
              dqkv, dctx, qkv, lse, D, s, L, scale, dr, u0, dsT, ds_ld, qc);
          check_launch("flash_attention_backward_mma (dK, dV, dS)");
          // Head slot j of groups u0 .., queries q0 .. q0 + m - 1: dQ [m, hd] =
          // scale (dS^T)^T [m, q0 + m] K [q0 + m, hd] (later keys are hidden),
          // one strided batch over the chunk's groups (the stream orders the
          // next chunk's dS after this read).
          const size_t at = L.group_col(u0);
          for (int j = 0; j < r; j++)
            for (int q0 = 0; q0 < s; q0 += qc) {
              const int m = std::min(qc, s - q0);
              dq_gemm->run(mma, true, false, m, hd, q0 + m, scale, dsT + (size_t)j * s * ds_ld + q0,
                           ds_ld, (int64_t)r * s * ds_ld, qkv + L.k_col(u0), ld, stride, 0.f,
                           dqkv + at + (size_t)j * hd + (size_t)q0 * ld, ld, stride, n, stream);
            }
        }
        return;
      }
      dkdv<<<grid_blocks(s, kRowTile, units, what), kThreads, kv_smem, stream>>>(
          dqkv, dctx, qkv, lse, D, s, L, scale, dr, 0, nullptr, 0, 1);
      check_launch("flash_attention_backward_mma (dK, dV)");
      const size_t q_smem = smem_bytes<M, kD>(2 * kRowTile + 4 * kBwdTile);
      auto dq = bwd_dq<M, kD, G>;
      allow_smem(dq, q_smem);
      dq<<<grid_blocks(s, kRowTile, bh, what), kThreads, q_smem, stream>>>(dqkv, dctx, qkv, lse, D,
                                                                          s, L, scale, dr);
      check_launch("flash_attention_backward_mma (dQ)");
    });
  });
}

#define PTDP_INSTANTIATE(G)                                                                     \
  template void flash_attention_forward_mma<G>(G *, float *, const G *, int, int, int, int, int, \
                                               float, int, const DropoutSpec &, DType,          \
                                               cudaStream_t);                                   \
  template void flash_attention_backward_mma<G>(G *, const G *, const G *, const G *,           \
                                                const float *, int, int, int, int, int, float,  \
                                                int, const DropoutSpec &, DType, cudaStream_t,  \
                                                Gemm *, size_t);
PTDP_CUDA_STORAGE_TYPES(PTDP_INSTANTIATE)
#undef PTDP_INSTANTIATE

}  // namespace ptdp::cuda
