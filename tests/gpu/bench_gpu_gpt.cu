// ptdp's training step on one GPU: the whole GPT and AdamW on the CUDA device,
// tokens/s, model TFLOP/s and MFU (HFU: with the recomputed forward) against
// the card's dense bf16 peak (H100 SXM and H200: 989 TFLOP/s) and against its
// fp32 peak. Random tokens: the figure is the step's speed, not learning.
// --bf16 1: a bf16 run (16-bit activations, tensor-core GEMMs and attention,
// fp32 master weights); fp32 otherwise (no TF32). A step is --microbatches
// forward/backward passes accumulating gradients, then the gradient norm,
// clipping at 1.0 and AdamW in one pass (1: as scripts/bench_torch_gpu.py).
//   bench_gpu_gpt [--layers 24] [--hidden 2048] [--heads 16] [--seq 2048]
//                 [--vocab 50304] [--batch 2] [--microbatches 1] [--steps 3]
//                 [--recompute 1] [--flash 0] [--bf16 0] [--bf16-peak 989]
//                 [--fp32-peak 67] [--profile 0] [--fused-epilogues 1]
// --fused-epilogues 0: the linear layers' bias, GeLU and GeLU gradient as
// their own kernels after the GEMM, not fused into it (Ops::linear_*).
// Prints "bench name=ptdp_train ..." for scripts/gpu_summary.py; --profile 1
// then times every op of one more step (Ops::set_profiling) and prints the table.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/core/status.h"
#include "engine/model/gpt.h"
#include "engine/train/optimizer.h"
#include "tests/gpu/gpu_test_util.h"

using namespace ptdp;

int main(int argc, char **argv) {
  gpu_test::require_device();
  GptConfig cfg;
  cfg.num_layers = 24;
  cfg.hidden_size = 2048;
  cfg.num_attention_heads = 16;
  cfg.seq_length = 2048;
  cfg.vocab_size = 50304;
  int batch = 2, microbatches = 1, steps = 3, recompute = 1, flash = 0, bf16 = 0, profile = 0,
      fused = 1;
  double bf16_peak = 989, fp32_peak = 67;  // H100 SXM dense, TFLOP/s
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (k == "--layers")
      cfg.num_layers = (int)v;
    else if (k == "--hidden")
      cfg.hidden_size = (int)v;
    else if (k == "--heads")
      cfg.num_attention_heads = (int)v;
    else if (k == "--seq")
      cfg.seq_length = (int)v;
    else if (k == "--vocab")
      cfg.vocab_size = (int)v;
    else if (k == "--batch")
      batch = (int)v;
    else if (k == "--microbatches")
      microbatches = (int)v;
    else if (k == "--steps")
      steps = (int)v;
    else if (k == "--recompute")
      recompute = (int)v;
    else if (k == "--flash")
      flash = (int)v;
    else if (k == "--bf16")
      bf16 = (int)v;
    else if (k == "--profile")
      profile = (int)v;
    else if (k == "--fused-epilogues")
      fused = (int)v;
    else if (k == "--bf16-peak")
      bf16_peak = v;
    else if (k == "--fp32-peak")
      fp32_peak = v;
    else {
      std::fprintf(stderr,
                   "unknown option %s (see the comment at the top of "
                   "bench_gpu_gpt.cu)\n",
                   argv[i]);
      return 2;
    }
  }
  if (batch < 1 || microbatches < 1 || steps < 1) {
    std::fprintf(stderr, "--batch, --microbatches and --steps must be >= 1\n");
    return 2;
  }
  try {
    auto dev = make_device("cuda", 0);
    Recompute rc;
    rc.enabled = recompute != 0;
    const auto t_init = std::chrono::steady_clock::now();
    Precision prec;
    if (bf16) prec.dtype = DType::bf16;
    GPT<float> model(cfg, 1234, {}, {}, rc, prec, dev.get());
    model.set_flash_attention(flash != 0);
    model.ops().set_fused_epilogues(fused != 0);
    AdamW opt(model, {});
    std::printf("model: %.2fB parameters, init %.1f s\n", model.num_real_params() * 1e-9,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t_init).count());
    const int s = cfg.seq_length, N = s * batch;
    const std::vector<int32_t> tokens = gpu_test::random_ids(N, cfg.vocab_size, 1),
                               targets = gpu_test::random_ids(N, cfg.vocab_size, 2);
    double seconds = 0, loss = 0;
    auto train_step = [&](int step) {  // seconds
      dev->synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      dev->zero(model.grads(), model.num_params() * sizeof(float));
      StepContext ctx;
      ctx.iteration = (uint32_t)step;
      loss = 0;
      for (int mb = 0; mb < microbatches; mb++) {  // gradients accumulate
        ctx.sample_offset = (uint32_t)(mb * batch);
        loss += model.forward(tokens.data(), targets.data(), s, batch, ctx) / microbatches;
        model.backward(1.f / ((float)N * microbatches));
      }
      const double norm = std::sqrt(grad_sum_squares(model));
      opt.update(model, 1e-4, step + 1, clip_factor(norm, 1.0));  // clipping folded into AdamW
      dev->synchronize();
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("step %d: %.3f s, loss %.4f, grad norm %.3f\n", step, dt, loss, norm);
      return dt;
    };
    for (int step = 0; step <= steps; step++) {  // step 0 warms up (plans, pool)
      const double dt = train_step(step);
      if (step > 0) seconds += dt;
    }
    if (profile) {  // one more step, every op timed on the GPU's clock
      model.set_op_profiling(true);
      const double dt = train_step(steps + 1);
      std::printf("op profile of one step (%.3f s with the op timers):\n%s", dt,
                  format_op_profile(model.take_op_profile()).c_str());
      model.set_op_profiling(false);
    }
    const double per_step = seconds / steps;
    // Model FLOPs (MFU, as PyTorch's figure counts them) leave the recomputed
    // forward out; hardware FLOPs (HFU) count it.
    const double tflops = microbatches * cfg.flops_per_batch(batch, false) / per_step * 1e-12;
    const double hw_tflops = microbatches * cfg.flops_per_batch(batch, rc.enabled) / per_step * 1e-12;
    const double gib = dev->memory().peak / 1073741824.0;
    std::printf(
        "bench name=ptdp_train variant=%s%s%s%s%s%s tokens_per_s=%.0f "
        "tflops=%.1f mfu=%.4f hfu=%.4f "
        "of_fp32_peak=%.4f mem_gib=%.2f step_s=%.3f micro_batch=%d microbatches=%d\n",
        bf16 ? "bf16" : "fp32", rc.enabled ? "+recompute" : "", flash ? "+flash" : "",
        batch != 2 ? ("+b" + std::to_string(batch)).c_str() : "",
        microbatches > 1 ? ("+" + std::to_string(microbatches) + "mb").c_str() : "",
        fused ? "" : "+unfused_epilogues",
        (double)N * microbatches / per_step, tflops, tflops / bf16_peak, hw_tflops / bf16_peak,
        tflops / fp32_peak, gib, per_step, batch, microbatches);
    return std::isfinite(loss) ? 0 : 1;
  } catch (const std::exception &e) {
    std::printf("bench_gpu_gpt failed: %s\n", e.what());
    return 1;
  }
}
