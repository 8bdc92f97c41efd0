// The whole model on the CUDA device against the same model on the CPU device:
// one GPT<float> written over the op table (engine/device/ops.h), run by both
// backends with the same seed, tokens and dropout keys. Initial parameters are
// equal bit for bit (both are drawn on the host); the loss, the logits and
// every parameter's gradient agree up to summation order (fp32) or up to where
// a differently summed value rounds to another 16-bit neighbour (bf16). Then
// three training steps (gradient norm, clipping, AdamW on the device) leave
// the same parameters.
// Exits 77 (skipped) without a device.
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "engine/core/status.h"
#include "engine/model/gpt.h"
#include "engine/train/optimizer.h"
#include "tests/gpu/gpu_test_util.h"

using namespace ptdp;

namespace {

// ||a - b|| / ||b|| over one tensor: summation-order noise is relative to the
// tensor as a whole, not to its individual (possibly tiny) elements.
double rel_l2(const float *a, const float *b, size_t n) {
  double d = 0, r = 0;
  for (size_t i = 0; i < n; i++) {
    d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    r += (double)b[i] * b[i];
  }
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

void check(const char *what, double err, double tol) {
  const bool ok = err <= tol;  // NaN fails
  std::printf("%-56s %.3g (tolerance %.1g) %s\n", what, err, tol, ok ? "ok" : "FAIL");
  gpu_test::failures += !ok;
}

struct Case {
  const char *name;
  Recompute rc;
  Precision prec;
  bool flash;
  // fp32: the backends differ only in summation order (cuBLASLt's split of K,
  // the kernels' reduction trees, the embedding gradient's atomics), ~1e-7
  // relative per op; 1e-5 leaves two orders of margin over two layers.
  // bf16: a value summed differently may round to the neighbouring bf16 number
  // (2^-8 relative) and that difference propagates: a few 1e-3.
  // Adam divides by sqrt(v): where a gradient is near zero the update's
  // direction is decided by noise, so updates agree less than gradients do.
  double loss_tol, tensor_tol, update_tol;
  void (*shape)(GptConfig &) = nullptr;  // the model's options (null: GPT-2's block)
};

// The LLaMA family's block: RMSNorm, rope (base 500000), 4 query heads over 2
// key/value heads, SwiGLU, untied head, no linear biases but QKV's.
void llama_block(GptConfig &c) {
  c.normalization = GptConfig::RMSNorm;
  c.position_embedding_type = GptConfig::Rope;
  c.rotary_base = 500000.f;
  c.num_query_groups = 2;
  c.swiglu = 1;
  c.ffn_hidden_size = 176;
  c.untie_embeddings_and_output_weights = 1;
  c.disable_bias_linear = 1;
  c.add_qkv_bias = 1;
}
// The same without grouping (the fused attention kernels take one K, V per head).
void llama_block_mha(GptConfig &c) {
  llama_block(c);
  c.num_query_groups = 0;
}
// GPT-2's GeLU MLP without biases (bias_gelu with no bias).
void no_biases(GptConfig &c) { c.disable_bias_linear = 1; }

// The model of these checks: 2 layers, h 64, 4 heads, V 300 (padded to 384:
// the padding columns are masked), s 32.
GptConfig small_config() {
  GptConfig cfg;
  cfg.num_layers = 2;
  cfg.hidden_size = 64;
  cfg.num_attention_heads = 4;
  cfg.vocab_size = 300;
  cfg.seq_length = 32;
  return cfg;
}

void run_case(Device &cuda, const Case &c) {
  GptConfig cfg = small_config();
  if (c.shape) c.shape(cfg);
  cfg.hidden_dropout = 0.1f;  // masks must be equal for the losses to agree
  cfg.attention_dropout = 0.1f;
  const int s = cfg.seq_length, b = 3, N = s * b;
  const uint64_t seed = 1234;
  GPT<float> cpu(cfg, seed, {}, {}, c.rc, c.prec);
  GPT<float> gpu(cfg, seed, {}, {}, c.rc, c.prec, &cuda);
  cpu.set_flash_attention(c.flash);
  gpu.set_flash_attention(c.flash);
  std::printf("-- %s\n", c.name);

  const std::vector<float> p_cpu = cpu.params_to_host(), p_gpu = gpu.params_to_host();
  check("initial parameters (relative L2; both drawn on the host)",
        rel_l2(p_gpu.data(), p_cpu.data(), p_cpu.size()), 0.0);

  const std::vector<int32_t> tokens = gpu_test::random_ids(N, cfg.vocab_size, 7),
                             targets = gpu_test::random_ids(N, cfg.vocab_size, 8);
  StepContext ctx;
  ctx.iteration = 5;
  ctx.sample_offset = 12;
  for (int step = 0; step < 2; step++) {  // the second step reuses the pooled activations
    const double l_cpu = cpu.forward(tokens.data(), targets.data(), s, b, ctx);
    const double l_gpu = gpu.forward(tokens.data(), targets.data(), s, b, ctx);
    std::printf("loss cpu %.7f gpu %.7f\n", l_cpu, l_gpu);
    check("loss (relative difference)", std::fabs(l_gpu - l_cpu) / l_cpu, c.loss_tol);
    cpu.backward(1.f / N);
    gpu.backward(1.f / N);
  }
  // Gradients of two accumulated steps, tensor by tensor.
  const std::vector<float> g_cpu = cpu.grads_to_host(), g_gpu = gpu.grads_to_host();
  double worst = 0;
  const char *worst_name = "";
  for (const ParamInfo &p : cpu.param_table()) {
    const double e = rel_l2(g_gpu.data() + p.offset, g_cpu.data() + p.offset, p.numel);
    if (!(e <= worst)) worst = e, worst_name = p.name.c_str();
  }
  std::printf("worst gradient: %s\n", worst_name);
  check("gradients (worst tensor, relative L2)", worst, c.tensor_tol);

  // Evaluation forward (no dropout, no targets): the logits.
  StepContext eval = ctx;
  eval.training = false;
  cpu.forward(tokens.data(), nullptr, s, b, eval);
  gpu.forward(tokens.data(), nullptr, s, b, eval);
  const size_t nl = (size_t)N * cpu.local_vocab();
  const std::vector<float> lg = gpu.logits_to_host(0, N), lc = cpu.logits_to_host(0, N);
  check("logits (relative L2)", rel_l2(lg.data(), lc.data(), nl), c.tensor_tol);

  // Three training steps as the trainer takes them: zero, forward, backward,
  // norm, clip, AdamW (with fp32 master weights in the 16-bit case).
  AdamW opt_cpu(cpu, {}), opt_gpu(gpu, {});
  for (int step = 1; step <= 3; step++) {
    double norm[2];
    GPT<float> *models[2] = {&cpu, &gpu};
    AdamW *opts[2] = {&opt_cpu, &opt_gpu};
    for (int k = 0; k < 2; k++) {
      GPT<float> &m = *models[k];
      m.device().zero(m.grads(), m.num_params() * sizeof(float));
      ctx.iteration = 10 + step;
      m.forward(tokens.data(), targets.data(), s, b, ctx);
      m.backward(1.f / N);
      norm[k] = std::sqrt(grad_sum_squares(m));
      opts[k]->update(m, 1e-3, step, clip_factor(norm[k], 0.05));  // small enough to clip
    }
    check("gradient norm (relative difference)", std::fabs(norm[1] - norm[0]) / norm[0],
          c.tensor_tol);
  }
  // The weights the optimizer holds: the fp32 master weights of a 16-bit model
  // (its parameters are them rounded), else the parameters.
  auto weights = [](GPT<float> &m, AdamW &o) {
    if (!o.master()) return m.params_to_host();
    std::vector<float> w(m.num_params());
    m.device().copy_to_host(w.data(), o.master(), w.size() * sizeof(float));
    return w;
  };
  const std::vector<float> q_cpu = weights(cpu, opt_cpu), q_gpu = weights(gpu, opt_gpu);
  // Adam's first steps move every weight by about lr whatever the gradient's
  // size, so compare the updates, not the weights (which hide them).
  std::vector<float> d_cpu(q_cpu.size()), d_gpu(q_gpu.size());
  for (size_t i = 0; i < q_cpu.size(); i++) {
    d_cpu[i] = q_cpu[i] - p_cpu[i];
    d_gpu[i] = q_gpu[i] - p_gpu[i];
  }
  check("parameter updates after 3 AdamW steps (relative L2)",
        rel_l2(d_gpu.data(), d_cpu.data(), d_cpu.size()), c.update_tol);
}

// A bf16 model's GEMMs read one 16-bit copy of the weights made at each
// forward: after the weights change (here: set from the host, as a checkpoint
// load does), the next forward must see the new ones. Its loss must be a fresh
// model's with those weights, bit for bit, and differ from the old loss.
// Generation's cached decoding on the device: a prompt, then one token at a
// time against the cached keys and values (the strided-batched GEMMs, the
// softmax with s_q < s_k), gives at every position the logits of the whole
// sequence's forward on the CPU (same seed, so the same weights). b = 3
// sequences; fp32 to summation order (1e-5 relative L2, as the logits above),
// bf16 to rounding (3e-2). A stale or misplaced cache entry moves logits by O(1).
void check_cached_decoding(Device &dev, const char *name, void (*shape)(GptConfig &),
                           Precision prec, bool flash, double tol) {
  GptConfig cfg = small_config();
  if (shape) shape(cfg);
  GPT<float> cpu(cfg, 77, {}, {}, {}, prec), gpu(cfg, 77, {}, {}, {}, prec, &dev);
  const int n = cfg.max_positions(), b = 3, prompt = 5, Vl = cpu.local_vocab();
  cpu.set_flash_attention(flash);
  gpu.set_flash_attention(flash);
  const std::vector<int32_t> tokens = gpu_test::random_ids((size_t)n * b, cfg.vocab_size, 9);
  StepContext eval;
  eval.training = false;
  cpu.forward(tokens.data(), nullptr, n, b, eval);
  const std::vector<float> want = cpu.logits_to_host(0, n * b);  // [n, b, Vl]
  StepContext ctx = eval;
  ctx.kv_cache = true;
  std::vector<float> got;  // the decoded rows in the same [n, b, Vl] order
  gpu.forward(tokens.data(), nullptr, prompt, b, ctx);
  got = gpu.logits_to_host(0, prompt * b);
  for (int pos = prompt; pos < n; pos++) {
    ctx.first_position = pos;
    gpu.forward(tokens.data() + (size_t)pos * b, nullptr, 1, b, ctx);
    const std::vector<float> row = gpu.logits_to_host(0, b);
    got.insert(got.end(), row.begin(), row.end());
  }
  std::printf("-- cached decoding, %s: %d positions, prompt %d\n", name, n, prompt);
  const size_t m = (size_t)n * b * Vl;
  check("decoded logits against the CPU's whole forward (relative L2)",
        rel_l2(got.data(), want.data(), m), tol);
  // The last position alone: the longest cache, where a wrong offset shows most.
  const size_t last = (size_t)(n - 1) * b * Vl;
  check("the last position's logits (relative L2)",
        rel_l2(got.data() + last, want.data() + last, (size_t)b * Vl), tol);
}

void check_weights_copy_follows_the_weights(Device &cuda) {
  const GptConfig cfg = small_config();
  const int s = cfg.seq_length, b = 2, N = s * b;
  Precision bf16;
  bf16.dtype = DType::bf16;
  GPT<float> a(cfg, 5, {}, {}, {}, bf16, &cuda), fresh(cfg, 6, {}, {}, {}, bf16, &cuda);
  const std::vector<int32_t> tokens = gpu_test::random_ids(N, cfg.vocab_size, 3),
                             targets = gpu_test::random_ids(N, cfg.vocab_size, 4);
  StepContext eval;
  eval.training = false;
  const double before = a.forward(tokens.data(), targets.data(), s, b, eval);
  // Seed 6's weights into model a (both hold bf16 values), then both forward.
  const std::vector<float> w = fresh.params_to_host();
  cuda.copy_from_host(a.params(), w.data(), w.size() * sizeof(float));
  const double after = a.forward(tokens.data(), targets.data(), s, b, eval);
  const double want = fresh.forward(tokens.data(), targets.data(), s, b, eval);
  std::printf("-- 16-bit weight copy: loss %.7f, then %.7f with new weights (fresh model %.7f)\n",
              before, after, want);
  check("the next forward reads the new weights (loss difference to a fresh model)",
        std::fabs(after - want), 0.0);
  check("and the loss moved (1 if it did not)", after != before ? 0.0 : 1.0, 0.0);
}

// AdamW's pass writes the 16-bit copy too, so the forward after an update
// makes none: that forward must equal one whose copy is made from the updated
// parameters (a second model given them), bit for bit. A write between the
// update and the next forward (a checkpoint load there) must still be seen.
void check_weights_copy_after_an_update(Device &cuda) {
  const GptConfig cfg = small_config();
  const int s = cfg.seq_length, b = 2, N = s * b;
  Precision bf16;
  bf16.dtype = DType::bf16;
  GPT<float> a(cfg, 5, {}, {}, {}, bf16, &cuda), copy(cfg, 5, {}, {}, {}, bf16, &cuda),
      fresh(cfg, 6, {}, {}, {}, bf16, &cuda);
  const std::vector<int32_t> tokens = gpu_test::random_ids(N, cfg.vocab_size, 3),
                             targets = gpu_test::random_ids(N, cfg.vocab_size, 4);
  StepContext train, eval;
  eval.training = false;
  AdamW opt(a, {});
  auto step = [&](int64_t k) {
    a.device().zero(a.grads(), a.num_params() * sizeof(float));
    a.forward(tokens.data(), targets.data(), s, b, train);
    a.backward(1.f / N);
    opt.update(a, 1e-2, k, 1.0);
  };
  step(1);
  const double updated = a.forward(tokens.data(), targets.data(), s, b, eval);
  const std::vector<float> w = a.params_to_host();
  cuda.copy_from_host(copy.params(), w.data(), w.size() * sizeof(float));
  const double want = copy.forward(tokens.data(), targets.data(), s, b, eval);
  std::printf("-- after an update: loss %.7f, a model given its weights %.7f\n", updated, want);
  check("the forward after an update reads the updated weights (loss difference)",
        std::fabs(updated - want), 0.0);
  step(2);
  const std::vector<float> w6 = fresh.params_to_host();
  cuda.copy_from_host(a.params(), w6.data(), w6.size() * sizeof(float));
  const double loaded = a.forward(tokens.data(), targets.data(), s, b, eval);
  const double want6 = fresh.forward(tokens.data(), targets.data(), s, b, eval);
  check("a write after an update is read by the next forward (loss difference)",
        std::fabs(loaded - want6), 0.0);
}

// The op profile on CUDA: CUDA-event times for every op of a step, and the
// step itself unchanged (the same loss and gradients as without it).
void check_op_profile(Device &cuda) {
  const GptConfig cfg = small_config();
  const int s = cfg.seq_length, b = 2, N = s * b;
  GPT<float> plain(cfg, 5, {}, {}, {}, {}, &cuda), profiled(cfg, 5, {}, {}, {}, {}, &cuda);
  profiled.set_op_profiling(true);
  const std::vector<int32_t> tokens = gpu_test::random_ids(N, cfg.vocab_size, 3),
                             targets = gpu_test::random_ids(N, cfg.vocab_size, 4);
  StepContext ctx;
  const double l0 = plain.forward(tokens.data(), targets.data(), s, b, ctx);
  const double l1 = profiled.forward(tokens.data(), targets.data(), s, b, ctx);
  plain.backward(1.f / N);
  profiled.backward(1.f / N);
  check("op profile: loss difference to the unprofiled model", std::fabs(l1 - l0), 0.0);
  const std::vector<float> g0 = plain.grads_to_host(), g1 = profiled.grads_to_host();
  check("op profile: gradient difference (relative L2)", rel_l2(g1.data(), g0.data(), g0.size()), 0.0);
  const std::vector<OpTime> rows = profiled.take_op_profile();
  double total = 0, bad = 0;
  for (const OpTime &r : rows) {
    total += r.ms;
    bad += !(r.ms >= 0) || r.calls <= 0;
  }
  std::printf("%s", format_op_profile(rows).c_str());
  check("op profile: ops with no calls or a negative time", bad, 0.0);
  check("op profile: device time in ops > 0 (1 if not)", total > 0 ? 0.0 : 1.0, 0.0);
}

}  // namespace

int main() {
  gpu_test::require_device();
  std::unique_ptr<Device> cuda = make_device("cuda", 0);
  Recompute full;
  full.enabled = true;
  Precision bf16;
  bf16.dtype = DType::bf16;
  const Case cases[] = {
      {"fp32", {}, {}, false, 1e-5, 1e-5, 1e-3},
      {"fp32, full recompute", full, {}, false, 1e-5, 1e-5, 1e-3},
      {"fp32, flash attention (CUDA kernel against the CPU's fused twin)",
       {},
       {},
       true,
       1e-5,
       1e-5,
       1e-3},
      // bf16: gradients differ by ~1e-2 (above), and Adam turns the noise of
      // near-zero gradients into lr-sized updates; skipping or mis-applying
      // the update would give >= 1.
      {"bf16 (fp32 arrays rounded to bf16; CUDA: bf16 GEMMs), fp32 gradients",
       {},
       bf16,
       false,
       1e-2,
       3e-2,
       0.3},
      {"bf16, flash attention", {}, bf16, true, 1e-2, 3e-2, 0.3},
      {"fp32, LLaMA block (RMSNorm, rope, GQA 4/2, SwiGLU, untied, QKV bias)", {}, {}, false,
       1e-5, 1e-5, 1e-3, llama_block},
      {"fp32, LLaMA block, full recompute", full, {}, false, 1e-5, 1e-5, 1e-3, llama_block},
      {"bf16, LLaMA block", {}, bf16, false, 1e-2, 3e-2, 0.3, llama_block},
      {"bf16, LLaMA block without grouping, flash attention", {}, bf16, true, 1e-2, 3e-2, 0.3,
       llama_block_mha},
      {"fp32, GPT-2 without linear biases", {}, {}, false, 1e-5, 1e-5, 1e-3, no_biases},
  };
  for (const Case &c : cases) {
    try {
      run_case(*cuda, c);
    } catch (const std::exception &e) {
      std::printf("%s: FAIL, threw: %s\n", c.name, e.what());
      gpu_test::failures++;
    }
  }
  try {
    check_op_profile(*cuda);
    check_cached_decoding(*cuda, "fp32", nullptr, {}, false, 1e-5);
    check_cached_decoding(*cuda, "fp32, flash attention for the prompt", nullptr, {}, true, 1e-5);
    check_cached_decoding(*cuda, "fp32, LLaMA block (rope, GQA 4/2)", llama_block, {}, false, 1e-5);
    check_cached_decoding(*cuda, "bf16", nullptr, bf16, false, 3e-2);
    check_weights_copy_follows_the_weights(*cuda);
    check_weights_copy_after_an_update(*cuda);
  } catch (const std::exception &e) {
    std::printf("decoding or weights copy: FAIL, threw: %s\n", e.what());
    gpu_test::failures++;
  }
  // Every activation and parameter went back to the device's pool.
  check("device memory in use after the models (bytes)", (double)cuda->memory().in_use, 0.0);
  // double is the CPU's finite-difference type: a clear error, not a crash.
  try {
    GPT<double> bad(GptConfig{}, 1, {}, {}, {}, {}, cuda.get());
    check("GPT<double> on cuda is refused", 1.0, 0.0);
  } catch (const Error &e) {
    std::printf("GPT<double> on cuda refused: %s\n", e.what());
  }
  return gpu_test::finish();
}
