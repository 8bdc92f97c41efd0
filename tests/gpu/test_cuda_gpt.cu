// The whole model on the CUDA device against the same model on the CPU device:
// one GPT<float> written over the op table (engine/device/ops.h), run by both
// backends with the same seed, tokens and dropout keys. Initial parameters are
// equal bit for bit (both are drawn on the host); the loss, the logits and every
// parameter's gradient agree up to summation order (fp32) or up to where a
// differently summed value rounds to another 16-bit neighbour (bf16).
// Exits 77 (skipped) without a device.
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "engine/core/status.h"
#include "engine/model/gpt.h"
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
  // fp32: the backends differ only in summation order (cuBLASLt's split of K,
  // the kernels' reduction trees, the embedding gradient's atomics), ~1e-7
  // relative per op; 1e-5 leaves two orders of margin over two layers.
  // bf16: a value summed differently may round to the neighbouring bf16 number
  // (2^-8 relative) and that difference propagates: a few 1e-3.
  double loss_tol, tensor_tol;
};

void run_case(Device &cuda, const Case &c) {
  GptConfig cfg;
  cfg.num_layers = 2;
  cfg.hidden_size = 64;
  cfg.num_attention_heads = 4;
  cfg.vocab_size = 300;  // padded to 384: the padding columns are masked
  cfg.seq_length = 32;
  cfg.hidden_dropout = 0.1f;  // masks must be equal for the losses to agree
  cfg.attention_dropout = 0.1f;
  const int s = cfg.seq_length, b = 3, N = s * b;
  const uint64_t seed = 1234;
  GPT<float> cpu(cfg, seed, {}, {}, c.rc, c.prec);
  GPT<float> gpu(cfg, seed, {}, {}, c.rc, c.prec, &cuda);
  std::printf("-- %s\n", c.name);

  const std::vector<float> p_cpu = cpu.params_to_host(), p_gpu = gpu.params_to_host();
  check("initial parameters (max abs difference)",
        rel_l2(p_gpu.data(), p_cpu.data(), p_cpu.size()) == 0 ? 0.0 : 1.0, 0.0);

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
  std::vector<float> lg(nl), lc(cpu.logits(), cpu.logits() + nl);
  gpu.device().copy_to_host(lg.data(), gpu.logits(), nl * sizeof(float));
  check("logits (relative L2)", rel_l2(lg.data(), lc.data(), nl), c.tensor_tol);
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
      {"fp32", {}, {}, 1e-5, 1e-5},
      {"fp32, full recompute", full, {}, 1e-5, 1e-5},
      {"bf16 (fp32 arrays rounded to bf16), fp32 gradients", {}, bf16, 1e-2, 3e-2},
  };
  for (const Case &c : cases) {
    try {
      run_case(*cuda, c);
    } catch (const std::exception &e) {
      std::printf("%s: FAIL, threw: %s\n", c.name, e.what());
      gpu_test::failures++;
    }
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
