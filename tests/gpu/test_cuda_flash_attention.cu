// Fused causal attention (kernels/cuda/flash_attention.cu) against a naive
// double-precision host reference of the same math: S = scale Q K^T (causal),
// P = softmax(S), ctx = dropout(P) V with dropout_attention's mask, lse, and the
// backward dQ, dK, dV. Both sides read the same rounded inputs, so the only
// differences are the kernels' fp32 arithmetic and the rounding of the stored T.
//
// Tolerances are first-order error bounds built from the magnitudes of the
// terms (compare_bound), with kTol for fp32: a dot product or sum of n terms in
// fp32 is off by at most ~n * 2^-24 of the sum of |terms| (7.6e-6 for hd = 128),
// typically ~sqrt(n) * 2^-24; expf and logf add a few ulp. Errors in a score
// S_ij are absolute, ~kTol * A_i with A_i = scale * max_j sum_d |Q_id K_jd|, and
// become relative errors of P_ij = exp(S_ij - lse_i). 16-bit outputs add one
// rounding: storage_eps<T>() relative plus storage_tiny<T>() absolute.
//
// Grouped-query shapes (groups < heads: a key/value group's heads share its K
// and V, whose gradients sum theirs) run through both kernels too.
//
// The tensor-core kernels (flash_attention_mma.cu) read 16-bit arrays (or float
// arrays of 16-bit values: the same bits out, checked) and round the operands
// P Z and dS to the 16-bit type: one more
// relative error of storage_eps per term of those sums (op_eps). Their fp32
// sums run inside the MMA units, whose rounding NVIDIA does not document
// (measurements found truncation rather than rounding to nearest, so up to
// twice the error per add); they are held to 4 * kTol.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "engine/core/philox.h"
#include "engine/core/status.h"
#include "kernels/cuda/gemm.h"
#include "kernels/qkv_layout.h"
#include "tests/gpu/gpu_test_util.h"

using namespace gpu_test;

namespace {

constexpr double kTol = 1e-5;        // fp32 error per unit of sum |terms|, see above
constexpr double kTolMma = 4 * kTol;  // the same inside the tensor cores

struct Shape {
  int s, b, heads, hd, groups = 0;  // groups 0: one per head (no grouping)
  int kv() const { return groups ? groups : heads; }
  ptdp::QkvLayout layout() const { return {b, heads, kv(), hd}; }
  size_t n_qkv() const { return (size_t)s * layout().qkv_ld(); }
  size_t n_ctx() const { return (size_t)s * layout().ctx_ld(); }
};

// Reference values and the allowed |gpu - ref| of each output element.
struct Ref {
  std::vector<float> ctx, ctx_bound;    // [s, b*heads*hd]
  std::vector<float> lse, lse_bound;    // [b*heads, s]
  std::vector<float> dqkv, dqkv_bound;  // qkv's layout
};

// Forward and backward of every (bi, head) in double, naive loops, with the
// error bounds of kernels summing with error kTol per unit, rounding P Z and dS
// as operands with op_eps and storing T (eps, tiny: storage_eps, _tiny).
Ref reference(const std::vector<float> &qkv, const std::vector<float> &dctx, const Shape &sh,
              float scale, int head_offset, const ptdp::DropoutSpec &d, double eps, double tiny,
              double kTol = ::kTol, double op_eps = 0) {
  const int s = sh.s, hd = sh.hd, bh_n = sh.b * sh.heads, r_n = sh.heads / sh.kv();
  const ptdp::QkvLayout L = sh.layout();
  const size_t ld = L.qkv_ld(), ldc = L.ctx_ld();
  const double keep_scale =  // in float, as the kernels
      d.p > 0 ? (double)(1.f / (1.f - ptdp::attention_dropout_rate(d.p))) : 1.0;
  Ref R;
  R.ctx.assign((size_t)s * ldc, 0.f);
  R.ctx_bound = R.ctx;
  R.lse.assign((size_t)bh_n * s, 0.f);
  R.lse_bound = R.lse;
  R.dqkv.assign((size_t)s * ld, 0.f);
  R.dqkv_bound = R.dqkv;
  using Mat = std::vector<std::vector<double>>;
  auto mat = [&](int rows, int cols) { return Mat(rows, std::vector<double>(cols, 0.0)); };
  // A group's dK, dV (and bounds) sum over its heads, then are stored once.
  Mat dKg = mat(s, hd), dVg = mat(s, hd), dKgb = mat(s, hd), dVgb = mat(s, hd);
  for (int bh = 0; bh < bh_n; bh++) {
    const int bi = bh / sh.heads, head = bh % sh.heads, unit = bi * sh.kv() + head / r_n;
    Mat Q = mat(s, hd), K = mat(s, hd), V = mat(s, hd), dO = mat(s, hd);
    for (int i = 0; i < s; i++)
      for (int c = 0; c < hd; c++) {
        Q[i][c] = qkv[i * ld + L.q_col(bi, head) + c];
        K[i][c] = qkv[i * ld + L.k_col(unit) + c];
        V[i][c] = qkv[i * ld + L.v_col(unit) + c];
        dO[i][c] = dctx[i * ldc + L.ctx_col(bi, head) + c];
      }
    // Forward: S, A (score magnitudes), P, Z, lse, O and its bound.
    Mat S = mat(s, s), P = mat(s, s), Z = mat(s, s);
    std::vector<double> A(s, 0.0), lse(s), r(s);  // r: relative error of P_ij
    Mat O = mat(s, hd), Ob = mat(s, hd);
    for (int i = 0; i < s; i++) {
      double mx = -INFINITY;
      for (int j = 0; j <= i; j++) {
        double dot = 0, mag = 0;
        for (int c = 0; c < hd; c++) dot += Q[i][c] * K[j][c], mag += std::fabs(Q[i][c] * K[j][c]);
        S[i][j] = scale * dot;
        A[i] = std::max(A[i], scale * mag);
        mx = std::max(mx, S[i][j]);
      }
      double l = 0;
      for (int j = 0; j <= i; j++) l += std::exp(S[i][j] - mx);
      lse[i] = mx + std::log(l);
      // lse: the max's score error plus log of a sum of relative errors kTol*A.
      const double lse_err = kTol * (1 + 2 * A[i] + std::fabs(lse[i]));
      // P = exp(S - lse) in the backward (exp(S - m) / l forward): S's and lse's errors.
      r[i] = kTol * (1 + A[i]) + lse_err;
      R.lse[(size_t)bh * s + i] = (float)lse[i];
      R.lse_bound[(size_t)bh * s + i] = (float)lse_err;
      for (int j = 0; j <= i; j++) {
        P[i][j] = std::exp(S[i][j] - lse[i]);
        const uint64_t e = (uint64_t)(head_offset + head) * s * s + (uint64_t)i * s + j;
        Z[i][j] = d.p > 0 ? (ptdp::attention_keep(d, d.sample_offset + (uint32_t)bi, e) ? keep_scale : 0.0)
                          : 1.0;
        for (int c = 0; c < hd; c++) {
          O[i][c] += P[i][j] * Z[i][j] * V[j][c];
          Ob[i][c] += P[i][j] * Z[i][j] * std::fabs(V[j][c]);  // sum of |terms|
        }
      }
      for (int c = 0; c < hd; c++) {
        // fp32: P's relative error and the sum's; then one rounding to T.
        const double fp32 = (r[i] + kTol + op_eps) * Ob[i][c];
        Ob[i][c] = fp32 + eps * (std::fabs(O[i][c]) + fp32) + tiny;
        R.ctx[i * ldc + L.ctx_col(bi, head) + c] = (float)O[i][c];
        R.ctx_bound[i * ldc + L.ctx_col(bi, head) + c] = (float)Ob[i][c];
      }
    }
    // Backward. D_i = dO_i . O_i; the kernel reads the stored O, off by Ob.
    std::vector<double> D(s, 0.0), Db(s, 0.0);
    for (int i = 0; i < s; i++)
      for (int c = 0; c < hd; c++) {
        D[i] += dO[i][c] * O[i][c];
        Db[i] += std::fabs(dO[i][c]) * (Ob[i][c] + kTol * std::fabs(O[i][c]));
      }
    Mat dS = mat(s, s), dSb = mat(s, s);  // dS / scale and its bound
    Mat dQ = mat(s, hd), dK = mat(s, hd), dV = mat(s, hd);
    Mat dQb = mat(s, hd), dKb = mat(s, hd), dVb = mat(s, hd);
    for (int i = 0; i < s; i++)
      for (int j = 0; j <= i; j++) {
        double dp = 0, dp_mag = 0;
        for (int c = 0; c < hd; c++) dp += dO[i][c] * V[j][c], dp_mag += std::fabs(dO[i][c] * V[j][c]);
        dp *= Z[i][j];
        dp_mag *= Z[i][j];
        dS[i][j] = P[i][j] * (dp - D[i]);
        dSb[i][j] = P[i][j] * (r[i] * std::fabs(dp - D[i]) + kTol * dp_mag + Db[i]) +
                    kTol * std::fabs(dS[i][j]);
        for (int c = 0; c < hd; c++) {
          const double pz = P[i][j] * Z[i][j];
          dV[j][c] += pz * dO[i][c];
          dVb[j][c] += pz * std::fabs(dO[i][c]) * (r[i] + kTol + op_eps);
          dQ[i][c] += dS[i][j] * K[j][c];
          dQb[i][c] += dSb[i][j] * std::fabs(K[j][c]) + (kTol + op_eps) * std::fabs(dS[i][j] * K[j][c]);
          dK[j][c] += dS[i][j] * Q[i][c];
          dKb[j][c] += dSb[i][j] * std::fabs(Q[i][c]) + (kTol + op_eps) * std::fabs(dS[i][j] * Q[i][c]);
        }
      }
    auto put = [&](size_t col, int i, int c, double v, double fp32) {
      const size_t k = i * ld + col + c;
      R.dqkv[k] = (float)v;
      R.dqkv_bound[k] = (float)(fp32 + eps * (std::fabs(v) + fp32) + tiny);
    };
    for (int i = 0; i < s; i++)
      for (int c = 0; c < hd; c++) {
        put(L.q_col(bi, head), i, c, scale * dQ[i][c], scale * dQb[i][c]);
        dKg[i][c] += dK[i][c], dKgb[i][c] += dKb[i][c];
        dVg[i][c] += dV[i][c], dVgb[i][c] += dVb[i][c];
      }
    if (head % r_n == r_n - 1) {  // the group's last head
      for (int i = 0; i < s; i++)
        for (int c = 0; c < hd; c++) {
          put(L.k_col(unit), i, c, scale * dKg[i][c], scale * dKgb[i][c]);
          put(L.v_col(unit), i, c, dVg[i][c], dVgb[i][c]);
        }
      dKg = mat(s, hd), dVg = mat(s, hd), dKgb = mat(s, hd), dVgb = mat(s, hd);
    }
  }
  return R;
}

// The queries (part 0), keys (1) or values (2) of an array in qkv's layout:
// each group's width holds r query heads, then a key and a value.
std::vector<float> part_of(const std::vector<float> &x, const Shape &sh, int part) {
  const int r = sh.heads / sh.kv(), width = (r + 2) * sh.hd;
  std::vector<float> out;
  for (size_t k = 0; k < x.size(); k++) {
    const int slot = (int)(k % width) / sh.hd;
    if ((slot < r ? 0 : slot - r + 1) == part) out.push_back(x[k]);
  }
  return out;
}

// Bit for bit (== would take -0 for +0).
bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ctx, lse and dQ, dK, dV against the reference; the second backward's bits
// equal the first's (no atomics).
void compare_outputs(const char *type, const Shape &sh, float p, const Ref &R,
                     const std::vector<float> &ctx, const std::vector<float> &lse,
                     const std::vector<float> &dqkv, const std::vector<float> &dqkv2) {
  char what[112];
  auto label = [&](const char *name) {
    std::snprintf(what, sizeof what, "%s %s s=%d b=%d h=%d g=%d hd=%d p=%g", name, type, sh.s,
                  sh.b, sh.heads, sh.kv(), sh.hd, p);
    return what;
  };
  compare_bound(label("ctx"), ctx, R.ctx, R.ctx_bound);
  compare_bound(label("lse"), lse, R.lse, R.lse_bound);
  const char *names[3] = {"dQ", "dK", "dV"};
  for (int part = 0; part < 3; part++)
    compare_bound(label(names[part]), part_of(dqkv, sh, part), part_of(R.dqkv, sh, part),
                  part_of(R.dqkv_bound, sh, part));
  const bool same = same_bits(dqkv, dqkv2);
  std::printf("%-48s %s\n", label("backward deterministic"), same ? "ok" : "FAIL");
  if (!same) failures++;
}

template <class T>
void check_case(const Shape &sh, float p, unsigned seed) {
  const int s = sh.s, b = sh.b, heads = sh.heads, groups = sh.kv(), hd = sh.hd;
  const size_t n_qkv = sh.n_qkv(), n_ctx = sh.n_ctx();
  const float scale = 1.f / std::sqrt((float)hd);
  const int head_offset = 2;  // as tensor rank 1 of 2 with 2 local heads
  const ptdp::DropoutSpec d{{0x0123456789abcdefull, 0x5eedf00du, 7}, p, 3};

  std::vector<float> qkv_f = randn(n_qkv, seed), dctx_f = randn(n_ctx, seed + 1);
  DevArray<T> qkv = upload_rounded<T>(qkv_f), dctx = upload_rounded<T>(dctx_f);
  DevArray<T> ctx(n_ctx), dqkv(n_qkv), dqkv2(n_qkv);  // poisoned with NaN
  DevArray<float> lse((size_t)b * heads * s);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  ptdp::cuda::flash_attention_forward<T>(ctx.p, lse.p, qkv.p, s, b, heads, groups, hd, scale,
                                         head_offset, d, stream);
  ptdp::cuda::flash_attention_backward<T>(dqkv.p, dctx.p, ctx.p, qkv.p, lse.p, s, b, heads, groups,
                                          hd, scale, head_offset, d, stream);
  ptdp::cuda::flash_attention_backward<T>(dqkv2.p, dctx.p, ctx.p, qkv.p, lse.p, s, b, heads, groups,
                                          hd, scale, head_offset, d, stream);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));

  const Ref R = reference(qkv_f, dctx_f, sh, scale, head_offset, d, storage_eps<T>(),
                          storage_tiny<T>());
  compare_outputs(type_name<T>(), sh, p, R, download(ctx), lse.get(), download(dqkv),
                  download(dqkv2));
}

// The tensor-core kernels on float arrays of M values, and on arrays of M.
template <class M>
void check_mma_case(const Shape &sh, float p, unsigned seed) {
  const int s = sh.s, b = sh.b, heads = sh.heads, groups = sh.kv(), hd = sh.hd;
  const size_t n_qkv = sh.n_qkv(), n_ctx = sh.n_ctx();
  const float scale = 1.f / std::sqrt((float)hd);
  const int head_offset = 2;
  const ptdp::DropoutSpec d{{0x0123456789abcdefull, 0x5eedf00du, 7}, p, 3};
  const ptdp::DType mma = dtype_of<M>();

  std::vector<float> qkv_f = randn(n_qkv, seed), dctx_f = randn(n_ctx, seed + 1);
  DevArray<M> qkv16 = upload_rounded<M>(qkv_f), dctx16 = upload_rounded<M>(dctx_f);
  DevArray<float> qkv(qkv_f), dctx(dctx_f);  // the same values of M, held in float
  DevArray<float> ctx(n_ctx), dqkv(n_qkv), dqkv2(n_qkv);  // poisoned with NaN
  DevArray<float> lse((size_t)b * heads * s);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  ptdp::cuda::flash_attention_forward_mma(ctx.p, lse.p, qkv.p, s, b, heads, groups, hd, scale,
                                          head_offset, d, mma, stream);
  ptdp::cuda::flash_attention_backward_mma(dqkv.p, dctx.p, ctx.p, qkv.p, lse.p, s, b, heads, groups,
                                           hd, scale, head_offset, d, mma, stream);
  ptdp::cuda::flash_attention_backward_mma(dqkv2.p, dctx.p, ctx.p, qkv.p, lse.p, s, b, heads, groups,
                                           hd, scale, head_offset, d, mma, stream);
  // On arrays of M (a 16-bit run's activations): the kernels load the same
  // operand values, do the same arithmetic (D and lse included) and round each
  // output once to M, stored as M or as its float value: the same bits.
  DevArray<M> ctx16(n_ctx), dqkv16(n_qkv);
  DevArray<float> lse16((size_t)b * heads * s);
  ptdp::cuda::flash_attention_forward_mma<M>(ctx16.p, lse16.p, qkv16.p, s, b, heads, groups, hd,
                                             scale, head_offset, d, mma, stream);
  ptdp::cuda::flash_attention_backward_mma<M>(dqkv16.p, dctx16.p, ctx16.p, qkv16.p, lse16.p, s, b,
                                              heads, groups, hd, scale, head_offset, d, mma, stream);
  // dQ by a GEMM over dS in scratch (a 16-bit run's path), twice; and with a
  // scratch of one key/value group's heads, so that the groups go in chunks.
  ptdp::cuda::Gemm gemm;
  const size_t one_head = sizeof(M) * (size_t)s * ((s + 7) / 8 * 8) * (heads / groups);
  DevArray<M> dqkv_g(n_qkv), dqkv_g2(n_qkv), dqkv_g1(n_qkv);
  for (auto [out, limit] : {std::pair{&dqkv_g, size_t(1) << 30}, std::pair{&dqkv_g2, size_t(1) << 30},
                            std::pair{&dqkv_g1, one_head}})
    ptdp::cuda::flash_attention_backward_mma<M>(out->p, dctx16.p, ctx16.p, qkv16.p, lse16.p, s, b,
                                                heads, groups, hd, scale, head_offset, d, mma, stream,
                                                &gemm, limit);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  const bool same16 = same_bits(download(ctx16), ctx.get()) && same_bits(lse16.get(), lse.get()) &&
                      same_bits(download(dqkv16), dqkv.get());
  std::printf("%-48s %s\n", "  16-bit arrays give the float arrays' bits", same16 ? "ok" : "FAIL");
  if (!same16) failures++;
  const std::vector<float> by_gemm = download(dqkv_g), again = download(dqkv_g2),
                           chunked = download(dqkv_g1), by_kernel = dqkv.get();
  // dK, dV: the same kernel, the same bits, in chunks too; dQ: the same bits
  // run to run, checked against the reference below. In chunks the dQ GEMMs
  // have another batch count, for which cuBLASLt may pick another algorithm
  // (measured on an H100: up to a third of dQ's bits differ): held to the
  // reference's bound, not to the unchunked bits.
  const bool same_kv = same_bits(part_of(by_gemm, sh, 1), part_of(by_kernel, sh, 1)) &&
                       same_bits(part_of(by_gemm, sh, 2), part_of(by_kernel, sh, 2)) &&
                       same_bits(part_of(chunked, sh, 1), part_of(by_kernel, sh, 1)) &&
                       same_bits(part_of(chunked, sh, 2), part_of(by_kernel, sh, 2));
  const bool same_g = same_bits(by_gemm, again);
  std::printf("%-48s %s\n", "  dQ by GEMM: dK dV bits kept, deterministic", same_kv && same_g ? "ok" : "FAIL");
  if (!same_kv || !same_g) {
    failures++;
    auto differ = [&](const std::vector<float> &x, int part) {  // elements whose bits differ
      const std::vector<float> a = part_of(by_gemm, sh, part), b = part_of(x, sh, part);
      size_t n = 0;
      for (size_t k = 0; k < a.size(); k++) n += std::memcmp(&a[k], &b[k], sizeof(float)) != 0;
      return n;
    };
    for (int part = 0; part < 3; part++)
      std::printf("    %s of %zu: differ from the GEMM path again %zu, chunked %zu, the dQ kernel's %zu\n",
                  part == 0 ? "dQ" : part == 1 ? "dK" : "dV", part_of(by_gemm, sh, part).size(),
                  differ(again, part), differ(chunked, part), differ(by_kernel, part));
  }

  const Ref R = reference(qkv_f, dctx_f, sh, scale, head_offset, d, storage_eps<M>(),
                          storage_tiny<M>(), kTolMma, storage_eps<M>());
  char name[32];
  std::snprintf(name, sizeof name, "mma %s", type_name<M>());
  compare_outputs(name, sh, p, R, ctx.get(), lse.get(), dqkv.get(), dqkv2.get());
  std::snprintf(name, sizeof name, "mma %s dQ by GEMM", type_name<M>());
  compare_bound(name, part_of(by_gemm, sh, 0), part_of(R.dqkv, sh, 0), part_of(R.dqkv_bound, sh, 0));
  std::snprintf(name, sizeof name, "mma %s dQ by GEMM, chunked", type_name<M>());
  compare_bound(name, part_of(chunked, sh, 0), part_of(R.dqkv, sh, 0), part_of(R.dqkv_bound, sh, 0));
  // Every output is a value of M, as a 16-bit run stores it.
  std::vector<float> all = ctx.get(), g = dqkv.get();
  all.insert(all.end(), g.begin(), g.end());
  size_t off = 0;
  for (float v : all) off += from_storage(to_storage<M>(v)) != v;
  std::printf("%-48s %s\n", "  outputs are values of the operand type", off ? "FAIL" : "ok");
  if (off) failures++;
}

template <class T>
void check_type() {
  const Shape shapes[] = {{1, 1, 1, 8},     {5, 2, 3, 16},      {64, 2, 2, 64},
                          {130, 1, 2, 128}, {257, 2, 1, 32},    {40, 1, 1, 72},  // hd = 72: a partial last group of 32 dims
                          {37, 2, 4, 16, 2}, {70, 1, 3, 64, 1}};  // grouped; multi-query
  unsigned seed = 100;
  for (const Shape &sh : shapes)
    for (float p : {0.f, 0.1f}) check_case<T>(sh, p, seed += 2);
}

// The tensor-core kernels: head dims padded to each tile (32 .. 128), rows
// across several 64-row and 32-row tiles.
template <class M>
void check_mma_type() {
  const Shape shapes[] = {{1, 1, 1, 8},    {5, 2, 3, 16},   {64, 2, 2, 64}, {130, 1, 2, 128},
                          {257, 2, 1, 32}, {200, 1, 2, 80}, {40, 1, 1, 72}, {96, 1, 1, 96},
                          {512, 1, 2, 128},  // 512: many double-buffered tiles at hd = 128
                          {600, 1, 2, 64},   // dQ GEMMs in three query chunks, the last partial
                          {130, 2, 4, 64, 2}, {200, 1, 4, 128, 1},  // grouped; multi-query
                          {300, 2, 4, 64, 2},  // grouped, two query chunks
                          {37, 1, 6, 32, 3}};
  unsigned seed = 300;
  for (const Shape &sh : shapes)
    for (float p : {0.f, 0.1f}) check_mma_case<M>(sh, p, seed += 2);
}

// hd above the kernels' limit of 128 is refused before any launch.
void check_head_dim_limit() {
  const ptdp::DropoutSpec d{};
  int threw = 0;
  try {
    ptdp::cuda::flash_attention_forward<float>(nullptr, nullptr, nullptr, 4, 1, 1, 1, 129, 1.f, 0,
                                               d, nullptr);
  } catch (const ptdp::Error &e) {
    threw += e.code() == ptdp::Status::invalid_argument;
    std::printf("  forward hd=129: %s\n", e.what());
  }
  try {
    ptdp::cuda::flash_attention_backward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 4, 1,
                                                1, 1, 129, 1.f, 0, d, nullptr);
  } catch (const ptdp::Error &e) {
    threw += e.code() == ptdp::Status::invalid_argument;
    std::printf("  backward hd=129: %s\n", e.what());
  }
  try {
    ptdp::cuda::flash_attention_forward_mma<float>(nullptr, nullptr, nullptr, 4, 1, 1, 1, 129, 1.f,
                                                   0, d, ptdp::DType::bf16, nullptr);
  } catch (const ptdp::Error &e) {
    threw += e.code() == ptdp::Status::invalid_argument;
    std::printf("  mma forward hd=129: %s\n", e.what());
  }
  try {  // tensor cores take 16-bit operands only
    ptdp::cuda::flash_attention_backward_mma<float>(nullptr, nullptr, nullptr, nullptr, nullptr, 4,
                                                    1, 1, 1, 64, 1.f, 0, d, ptdp::DType::f32,
                                                    nullptr);
  } catch (const ptdp::Error &e) {
    threw += e.code() == ptdp::Status::invalid_argument;
    std::printf("  mma backward f32: %s\n", e.what());
  }
  try {  // bf16 arrays read as f16 operands
    ptdp::cuda::flash_attention_forward_mma<__nv_bfloat16>(nullptr, nullptr, nullptr, 4, 1, 1, 1,
                                                           64, 1.f, 0, d, ptdp::DType::f16, nullptr);
  } catch (const ptdp::Error &e) {
    threw += e.code() == ptdp::Status::invalid_argument;
    std::printf("  mma forward bf16 arrays, f16 operands: %s\n", e.what());
  }
  try {  // 4 heads cannot share 3 key/value groups
    ptdp::cuda::flash_attention_backward_mma<__nv_bfloat16>(nullptr, nullptr, nullptr, nullptr,
                                                            nullptr, 4, 1, 4, 3, 64, 1.f, 0, d,
                                                            ptdp::DType::bf16, nullptr);
  } catch (const ptdp::Error &e) {
    threw += e.code() == ptdp::Status::invalid_argument;
    std::printf("  mma backward 4 heads, 3 groups: %s\n", e.what());
  }
  std::printf("%-48s %s\n", "hd=129, f32 operands, mismatched arrays, groups refused",
              threw == 6 ? "ok" : "FAIL");
  if (threw != 6) failures++;
}

}  // namespace

int main() {
  require_device();
  check_type<float>();
  check_type<__nv_bfloat16>();
  check_type<__half>();
  check_mma_type<__nv_bfloat16>();
  check_mma_type<__half>();
  check_head_dim_limit();
  std::printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
