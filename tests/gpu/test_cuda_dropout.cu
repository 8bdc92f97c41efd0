// Dropout (bias+dropout+add, attention dropout, its backward) and the
// vocab-parallel embedding in CUDA against the CPU kernels, for fp32, bf16 and
// fp16 storage: the masks must be the CPU's bit for bit. Inputs are rounded to
// the storage type first, so the fp32 CPU reference sees exactly what the
// kernel reads. Outputs are poisoned with NaN first. Exits 77 (skipped)
// without a device.
#include "kernels/kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace {

using namespace gpu_test;

// Normal values pushed away from 0 (|x| >= 1/64, exact in every storage type),
// so an exact 0 in an output can only be a dropped element.
std::vector<float> randn_nz(size_t n, unsigned seed, float scale = 1.f) {
  auto v = randn(n, seed, scale);
  for (auto &x : v) x += std::copysign(1.f / 64, x);
  return v;
}

// v rounded to T in place, uploaded `off` elements into its buffer: off = 1
// misaligns every access and forces the kernels' scalar paths.
template <class T>
DevArray<T> upload_at(std::vector<float> &v, size_t off) {
  for (auto &x : v) x = from_storage(to_storage<T>(x));
  std::vector<float> w(off, 1.f);
  w.insert(w.end(), v.begin(), v.end());
  return upload_rounded<T>(w);
}
template <class T>
std::vector<float> download_at(const DevArray<T> &d, size_t off) {
  auto v = download(d);
  v.erase(v.begin(), v.begin() + (std::ptrdiff_t)off);
  return v;
}

// A site with a 64-bit seed, a nonzero iteration and a nonzero sample offset
// (and, for a sequence-parallel slice, the position of its first row).
ptdp::DropoutSpec spec(float p, uint32_t position_offset = 0) {
  ptdp::DropoutSpec d;
  d.key = {0xfedcba9876543210ull, (uint32_t)ptdp::fnv1a64("layer 3 attn"), 123457u};
  d.p = p;
  d.sample_offset = 37;
  d.position_offset = position_offset;
  return d;
}

// The kept/dropped pattern: an output is exactly 0 on the GPU iff it is on the
// CPU (every input is nonzero, so a kept element is too). Prints the dropped share.
void check_mask(const std::string &what, const std::vector<float> &gpu,
                const std::vector<float> &ref) {
  size_t differ = 0, dropped = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    differ += (gpu[i] == 0.f) != (ref[i] == 0.f);
    dropped += ref[i] == 0.f;
  }
  std::printf("%-48s %zu of %zu zero, %zu differ %s\n", what.c_str(), dropped, ref.size(), differ,
              differ ? "FAIL" : "ok");
  if (differ) failures++;
}

template <class T>
std::string tag(const char *op, const std::string &rest) {
  return std::string(op) + " " + type_name<T>() + " " + rest;
}

// out = residual + dropout(y + bias) over [s, b, h].
template <class T>
void test_bda_forward(int s, int b, int h, float p, bool with_residual, bool with_bias,
                      size_t off, uint32_t position_offset = 0) {
  const size_t n = (size_t)s * b * h;
  auto y = randn_nz(n, 11), res = randn_nz(n, 12), bias = randn_nz(h, 13);
  auto dy = upload_at<T>(y, off), dres = upload_at<T>(res, off), dbias = upload_at<T>(bias, off);
  const auto d = spec(p, position_offset);
  std::vector<float> ref(n);
  ptdp::cpu::bias_dropout_add_forward(ref.data(), with_residual ? res.data() : nullptr, y.data(),
                                      with_bias ? bias.data() : nullptr, s, b, h, d);
  DevArray<T> out(n + off);
  ptdp::cuda::bias_dropout_add_forward<T>(out.p + off, with_residual ? dres.p + off : nullptr,
                                          dy.p + off, with_bias ? dbias.p + off : nullptr, s, b,
                                          h, d, 0);
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = download_at(out, off);
  // The same fp32 operations (add, multiply by the same float scale, add), the
  // result rounded once to T: storage_eps * |ref|. Plus 2^-22 of the terms: the
  // CPU compiler may contract the multiply-add to an FMA (the kernel does not),
  // which moves the fp32 result by up to 3 roundings of 2^-24 |terms|.
  const float scale = p > 0 ? 1.f / (1.f - p) : 1.f;
  std::vector<float> bound(n);
  for (size_t i = 0; i < n; i++) {
    const float v = std::fabs(y[i] + (with_bias ? bias[i % h] : 0.f)) * scale;
    const float terms = (with_residual ? std::fabs(res[i]) : 0.f) + v;
    bound[i] = storage_eps<T>() * std::fabs(ref[i]) + 0x1p-22f * terms + storage_tiny<T>();
  }
  const std::string t =
      tag<T>("bias_dropout_add", "s=" + std::to_string(s) + " b=" + std::to_string(b) + " h=" +
                                     std::to_string(h) + " p=" + std::to_string(p).substr(0, 3) +
                                     (with_residual ? " +res" : "") + (with_bias ? " +bias" : "") +
                                     (off ? " unaligned" : "") +
                                     (position_offset ? " from position " +
                                                            std::to_string(position_offset)
                                                      : ""));
  compare_bound(t.c_str(), got, ref, bound);
  if (!with_residual) check_mask(t + " mask", got, ref);
}

// dy = dropout(dout) in place (dy aliases dout); dbias += colsum(dy).
template <class T>
void test_bda_backward(int s, int b, int h, float p, bool with_dbias,
                       uint32_t position_offset = 0) {
  const int N = s * b;
  const size_t n = (size_t)N * h;
  auto dout = randn_nz(n, 21), dbias0 = randn(h, 22);
  auto ddout = upload_rounded<T>(dout);
  const auto d = spec(p, position_offset);
  std::vector<float> ref(n), ref_db = dbias0;
  ptdp::cpu::bias_dropout_add_backward(ref.data(), with_dbias ? ref_db.data() : nullptr,
                                       dout.data(), s, b, h, d);
  Dev ddb(dbias0);
  ptdp::cuda::bias_dropout_add_backward<T>(ddout.p, with_dbias ? ddb.p : nullptr, ddout.p, s, b, h,
                                           d, 0);
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = download(ddout);
  // One fp32 multiply by the same scale, rounded once to T.
  std::vector<float> bound(n);
  for (size_t i = 0; i < n; i++)
    bound[i] = storage_eps<T>() * std::fabs(ref[i]) + storage_tiny<T>();
  const std::string t = tag<T>("bias_dropout_add bwd", "s=" + std::to_string(s) + " b=" +
                                                           std::to_string(b) + " h=" +
                                                           std::to_string(h) + " p=" +
                                                           std::to_string(p).substr(0, 3));
  compare_bound((t + " dy").c_str(), got, ref, bound);
  check_mask(t + " mask", got, ref);
  if (!with_dbias) return;
  // The GPU sums the T-rounded dy (storage_eps each) in its own order; two fp32
  // summation orders of N + 1 terms differ by at most 2 (N + 1) 2^-24 sum |terms|.
  std::vector<float> db_bound(h);
  for (int j = 0; j < h; j++) {
    double abs_sum = std::fabs(dbias0[j]);
    for (int i = 0; i < N; i++) abs_sum += std::fabs(ref[(size_t)i * h + j]);
    db_bound[j] = (storage_eps<T>() + (N + 1) * 0x1p-23f) * (float)abs_sum +
                  N * storage_tiny<T>();
  }
  compare_bound((t + " dbias").c_str(), ddb.get(), ref_db, db_bound);
}

// Attention probabilities [b, a, s_q, s_k] (positive), heads from head_offset.
// causal: the upper triangle j > i is 0, and one row of the first matrix is all
// 0 (a fully masked row), as the softmax leaves them.
template <class T>
void test_attention(int b, int a, int s_q, int s_k, int head_offset, float p, bool causal,
                    bool in_place) {
  const size_t n = (size_t)b * a * s_q * s_k;
  auto in = randn_nz(n, 41);
  for (auto &x : in) x = std::fabs(x);
  if (causal) {
    for (size_t m = 0; m < (size_t)b * a; m++)
      for (int i = 0; i < s_q; i++)
        for (int j = i + 1; j < s_k; j++) in[(m * s_q + i) * s_k + j] = 0.f;
    for (int j = 0; j < s_k; j++) in[(size_t)(s_q / 2) * s_k + j] = 0.f;
  }
  auto din = upload_rounded<T>(in);
  const auto d = spec(p);
  std::vector<float> ref(n);
  ptdp::cpu::dropout_attention(ref.data(), in.data(), b, a, s_q, s_k, head_offset, d);
  DevArray<T> dout(n);
  ptdp::cuda::dropout_attention<T>(in_place ? din.p : dout.p, din.p, b, a, s_q, s_k, head_offset,
                                   d, 0);
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = download(in_place ? din : dout);
  // One fp32 multiply by the same scale, rounded once to T.
  std::vector<float> bound(n);
  for (size_t i = 0; i < n; i++)
    bound[i] = storage_eps<T>() * std::fabs(ref[i]) + storage_tiny<T>();
  const std::string t = tag<T>(
      "dropout_attention", "b=" + std::to_string(b) + " a=" + std::to_string(a) + " s=" +
                               std::to_string(s_q) + "x" + std::to_string(s_k) + " heads " +
                               std::to_string(head_offset) + "+ p=" +
                               std::to_string(p).substr(0, 3) + (causal ? " causal" : "") +
                               (in_place ? " in place" : ""));
  compare_bound(t.c_str(), got, ref, bound);
  check_mask(t + " mask", got, ref);
}

// dx = y != 0 ? dy / (1 - p) : 0, dx aliasing dy; n not a multiple of 8 (tail).
template <class T>
void test_dropout_backward(size_t n, float p, size_t off) {
  auto y = randn_nz(n, 51), dy = randn_nz(n, 52);
  for (size_t i = 0; i < n; i++)
    if ((i * 2654435761u >> 8) % 10 < 3) y[i] = 0.f;  // ~30% dropped
  auto dyv = upload_at<T>(y, off), ddy = upload_at<T>(dy, off);
  std::vector<float> ref(n);
  ptdp::cpu::dropout_backward_from_output(ref.data(), dy.data(), y.data(), n, p);
  ptdp::cuda::dropout_backward_from_output<T>(ddy.p + off, ddy.p + off, dyv.p + off, n, p, 0);
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = download_at(ddy, off);
  // One fp32 multiply by the same scale, rounded once to T.
  std::vector<float> bound(n);
  for (size_t i = 0; i < n; i++)
    bound[i] = storage_eps<T>() * std::fabs(ref[i]) + storage_tiny<T>();
  const std::string t =
      tag<T>("dropout_backward_from_output", "n=" + std::to_string(n) + " p=" +
                                                 std::to_string(p).substr(0, 3) +
                                                 (off ? " unaligned" : ""));
  compare_bound(t.c_str(), got, ref, bound);
  check_mask(t + " zeros", got, ref);
}

// A vocab-parallel shard (rows [start, start + rows)) with and without positions.
template <class T>
void test_embedding(int s, int b, int h, int vocab, int start, int rows, bool positions) {
  auto wte = randn_nz((size_t)rows * h, 7), wpe = randn_nz((size_t)s * h, 8);
  auto tokens = random_ids((size_t)s * b, vocab, 9);
  auto dwte = upload_rounded<T>(wte), dwpe = upload_rounded<T>(wpe);
  std::vector<float> x((size_t)s * b * h);
  ptdp::cpu::embedding_forward(x.data(), tokens.data(), wte.data(), start, rows,
                               positions ? wpe.data() : nullptr, s, b, h);
  DevArray<T> dx(x.size());
  DevI dt(tokens);
  ptdp::cuda::embedding_forward<T>(dx.p, dt.p, dwte.p, start, rows, positions ? dwpe.p : nullptr, s,
                                   b, h, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // One fp32 addition (exact without wpe), rounded once to T: fp32 is exact.
  std::vector<float> bound(x.size());
  for (size_t i = 0; i < x.size(); i++)
    bound[i] = storage_eps<T>() * std::fabs(x[i]) + storage_tiny<T>();
  const std::string t = tag<T>("embedding", "h=" + std::to_string(h) + " rows " +
                                                std::to_string(start) + "+" +
                                                std::to_string(rows) + (positions ? " +wpe" : ""));
  compare_bound(t.c_str(), download(dx), x, bound);
}

// Accumulates into nonzero dwte, dwpe; a small vocabulary repeats tokens, and
// the shard leaves tokens on both sides to other ranks.
template <class T>
void test_embedding_backward(int s, int b, int h, int vocab, int start, int rows, bool positions) {
  const int N = s * b;
  auto dx = randn_nz((size_t)N * h, 31);
  auto tokens = random_ids(N, vocab, 32);
  const auto dwte0 = randn((size_t)rows * h, 33), dwpe0 = randn((size_t)s * h, 34);
  auto ddx = upload_rounded<T>(dx);
  std::vector<float> ref_wte = dwte0, ref_wpe = dwpe0;
  ptdp::cpu::embedding_backward(ref_wte.data(), positions ? ref_wpe.data() : nullptr, dx.data(),
                                tokens.data(), s, b, h, start, rows);
  Dev gwte(dwte0), gwpe(dwpe0);
  DevI dt(tokens);
  ptdp::cuda::embedding_backward<T>(gwte.p, positions ? gwpe.p : nullptr, ddx.p, dt.p, s, b, h,
                                    start, rows, 0);
  CUDA_OK(cudaDeviceSynchronize());
  // dwte: each token's rows added in row order, as the CPU does: exact.
  const std::string t = tag<T>("embedding bwd", "h=" + std::to_string(h) + " rows " +
                                                    std::to_string(start) + "+" +
                                                    std::to_string(rows));
  compare((t + " dwte").c_str(), gwte.get(), ref_wte, 0.f, 0.f);
  // dwpe: the CPU's additions in the CPU's order: exact (untouched without wpe).
  compare((t + (positions ? " dwpe" : " dwpe untouched")).c_str(), gwpe.get(), ref_wpe, 0.f, 0.f);
}

template <class T>
void test_all() {
  for (float p : {0.f, 0.1f, 0.5f}) {
    // h = 1, 5, 7: quads straddle rows (scalar path); 12: vector path for fp32
    // only; 1000: vector path for every type.
    for (int h : {1, 5, 7, 12, 1000}) {
      test_bda_forward<T>(9, 3, h, p, true, true, 0);
      test_bda_forward<T>(9, 3, h, p, false, true, 0);
      test_bda_backward<T>(9, 3, h, p, true);
    }
    test_bda_forward<T>(9, 3, 1000, p, true, true, 1);
    test_bda_forward<T>(9, 3, 1000, p, false, false, 1);
    test_bda_backward<T>(5, 2, 7, p, false);
    // A sequence-parallel slice from position 3 (h 1000: vector path; 7:
    // quads straddling rows from an element base not a multiple of 4).
    test_bda_forward<T>(4, 3, 1000, p, true, true, 0, 3);
    test_bda_forward<T>(4, 3, 7, p, false, true, 0, 3);
    test_bda_backward<T>(4, 3, 7, p, true, 3);
    // The one-pass backward with its bias gradient (h % 8 == 0), several chunks
    // of rows, from position 3.
    test_bda_backward<T>(40, 3, 1000, p, true, 3);
    // head_offset * s_q * s_k % 4 != 0: scalar path; 8x13 with 3 heads before:
    // vector path over rows of 13 (quads straddle rows); 64x64: the usual case.
    test_attention<T>(2, 3, 5, 7, 5, p, true, false);
    test_attention<T>(2, 2, 8, 13, 3, p, true, true);
    test_attention<T>(2, 4, 64, 64, 4, p, true, false);
    test_attention<T>(1, 3, 17, 17, 1, p, false, true);
    test_attention<T>(3, 2, 31, 40, 2, p, false, false);
    test_dropout_backward<T>(1001, p, 0);
    test_dropout_backward<T>(1001, p, 1);
  }
  for (int h : {5, 64, 768, 1000}) {
    test_embedding<T>(17, 3, h, 1000, 0, 1000, true);
    // Tensor rank 1 of 2: half the ids are others'; a middle shard: others' on both sides.
    test_embedding<T>(17, 3, h, 1000, 500, 500, false);
    test_embedding<T>(17, 3, h, 1000, 300, 400, true);
  }
  for (int h : {5, 64, 1000}) {
    test_embedding_backward<T>(17, 3, h, 60, 20, 25, true);
    test_embedding_backward<T>(17, 3, h, 60, 0, 60, false);
  }
  // 4096 rows over 300 ids: long runs of one token for the sort and the sums.
  test_embedding_backward<T>(512, 8, 64, 300, 100, 150, true);
}

}  // namespace

int main() {
  require_device();
  test_all<float>();
  test_all<__nv_bfloat16>();
  test_all<__half>();
  return gpu_test::finish();
}
