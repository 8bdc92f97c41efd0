// The paper's performance and memory model of PTD-P training (its §3), from
// first principles: each layer's GEMMs and memory-bound element-wise ops on
// one device, the collectives of each parallel group over a two-level machine,
// and the pipeline schedules of engine/parallel/schedule replayed with those
// times. It knows nothing of the training code: it predicts, it does not run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/parallel/schedule.h"
#include "engine/plan/machine.h"

namespace ptdp::plan {

// GPT of l layers, hidden h, a heads, vocabulary V, sequence S (learned
// positions, tied embedding, ffn = 4h unless given); or the LLaMA family's
// pieces, as the engine's GptConfig options name them.
struct ModelSpec {
  int64_t layers = 0, hidden = 0, heads = 0, vocab = 51200, seq = 2048, ffn = 0;
  int64_t kv_heads = 0;      // num_query_groups: key/value heads (0 = heads)
  bool swiglu = false;       // three MLP matrices: gate, up, down
  bool rms_norm = false;     // norms without bias
  bool rope = false;         // no learned positions
  bool untied = false;       // the LM head has its own [V, h] weight
  bool linear_bias = true;   // !disable_bias_linear
  bool qkv_bias = false;     // add_qkv_bias (with disable_bias_linear)
  int64_t ffn_size() const { return ffn > 0 ? ffn : 4 * hidden; }
  int64_t groups() const { return kv_heads > 0 ? kv_heads : heads; }
  // QKV's outputs: the queries, and a key and a value per group.
  int64_t qkv_width() const { return hidden + 2 * groups() * (hidden / heads); }
  int64_t mlp_matrices() const { return swiglu ? 3 : 2; }
};

enum class Recompute { none, selective, full };
const char *recompute_name(Recompute r);

// Everything that is not the layout.
struct TrainSpec {
  int64_t global_batch = 0;
  int64_t num_gpus = 0;
  DType dtype = DType::fp16;
  bool grads_fp32 = false;  // gradients accumulated and all-reduced in fp32
  bool distributed_optimizer = false;
  double train_tokens = 300e9;
};

struct Layout {
  int t = 1, p = 1, d = 1, b = 1, v = 1;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  bool scatter_gather = true;
  bool sequence_parallel = false;  // with t > 1 (Korthikanti et al.)
  Recompute recompute = Recompute::full;
  int64_t microbatches(int64_t B) const { return B / ((int64_t)b * d); }
  // "t=8,p=2,d=32,b=4,v=2,interleaved,full" (parse_layout reads it back).
  std::string label() const;
};

// ---- closed forms (the paper's equations) ---------------------------------
// Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V+S)/(12 l h)) = 12lh^2 + 13lh + (V+S)h.
double params_eq2(const ModelSpec &m);
// Eq. 3 and its siblings: FLOPs per iteration of batch B: 4 (full) or 3 (none)
// passes of the layers (24 B S l h^2 (1 + S/(6h)) each) plus 3 of the logits
// (2 B S h V each); selective adds the attention core's forward (4 B S^2 h l).
double flops_per_iteration(const ModelSpec &m, int64_t B, Recompute r);
// One model chunk's forward, backward and weight-gradient times: the
// zero-bubble formulas need them (b is then the input gradient alone).
struct PassTimes {
  double f = 1, b = 2, w = 0;
};
// (p-1)/m for GPipe and 1F1B, (p-1)/(v m) interleaved (the paper's); with a
// chunk's times t, (p-1)(F+B-W) / (m(F+B+W)) for zbh1 and
// (p-1) max(B, 2(B-W)) / (2m(F+B+W)) for zbv (docs/pipeline.md).
double bubble_closed_form(ScheduleKind k, int p, int v, int64_t m, PassTimes t = {});
// The paper's estimate 8 T P / (n X) in days (T tokens, X FLOP/s per device).
double training_days_eq(double tokens, double params, int64_t n, double flops_per_device);

// Parameters held by one device of pipeline stage `stage` (first stage: the
// embedding and positions; last: the final norm and, with p > 1, its copy
// of the tied embedding, or the untied head). Exact, vocabulary padded to 128 t.
double params_on_stage(const ModelSpec &m, const Layout &L, int stage);
// The whole model's parameters (t = p = 1): LLaMA 2 7B's 6,738,415,616 say.
double params_total(const ModelSpec &m);
int64_t padded_vocab(const ModelSpec &m, int t);

// ---- one device's work ------------------------------------------------------
struct Gemm {
  const char *name;
  int64_t m, n, k, batch;
  double flops() const { return 2.0 * m * n * k * batch; }
};
// Time of one GEMM on `mach` (wave quantization over units, setup per tile
// amortized over K, roofline on memory, a launch overhead). `ranks_per_node`
// splits a shared node (CPU thread ranks).
double gemm_seconds(const Machine &mach, DType dt, const Gemm &g, int ranks_per_node = 1);
// The forward GEMMs of one transformer layer for a micro-batch on one tensor rank.
std::vector<Gemm> layer_forward_gemms(const ModelSpec &m, int t, int64_t b);

// The memory-bound (element-wise) ops of one transformer layer for a
// micro-batch on one tensor rank, forward and backward without recomputation:
// bytes each streams and its kernels. Calibration times ptdp's own kernels
// against these bytes, so the list is the one the prediction sums.
struct StreamOp {
  const char *name;
  double bytes;
  int kernels;
  bool forward, attention_core;  // attention_core: recomputed by selective recomputation
};
std::vector<StreamOp> layer_elementwise_ops(const ModelSpec &m, int t, int64_t b, DType dt);

// Where the time of an iteration goes, seconds.
struct TimeBreakdown {
  double gemm = 0, elementwise = 0;                  // compute on the busiest stage
  double tp = 0, pp = 0, dp = 0, embedding = 0;      // communication not hidden
  double bubble = 0, optimizer = 0;
  double total() const { return gemm + elementwise + tp + pp + dp + embedding + bubble + optimizer; }
};

struct MemoryBreakdown {  // bytes on the fullest device
  double params = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0, reserved = 0;
  int in_flight = 0;  // micro-batch chunks stashed at the peak (first stage)
  double total() const { return params + grads + optimizer + activations + workspace + reserved; }
};

struct Prediction {
  Layout layout;
  double iteration_s = 0;
  double flops = 0;            // per iteration, counted as the paper does (with recomputation)
  double tflops_per_gpu = 0;   // flops / (n iteration_s) / 1e12
  double percent_of_peak = 0;
  double bubble_fraction = 0;  // replayed: makespan / busiest stage's work - 1
  double bubble_formula = 0;   // bubble_closed_form with this layout's pass times
  PassTimes pass;              // those times: a chunk's forward, backward (B) and W, seconds
  bool replayed = false;       // the schedule was replayed (else the closed form)
  TimeBreakdown time;
  MemoryBreakdown memory;
  double activation_bytes_per_layer = 0;  // one micro-batch, stashed
  double days = 0, gpu_hours = 0, cost_usd = 0;
  bool fits = true;
};

// Why (t, p, d, b, v, schedule) cannot run this model and batch on n devices,
// or "" when it can.
std::string layout_problem(const ModelSpec &m, const TrainSpec &tr, const Layout &L);

// Predicts one valid layout. replay: replay the real schedules (else the
// closed-form bubble with the busiest stage's op times).
Prediction predict(const ModelSpec &m, const TrainSpec &tr, const Machine &mach, const Layout &L,
                   bool replay = true);

// Activation bytes stashed for backward by one layer and one micro-batch on a
// tensor rank (the list of tensors in model.cpp), and its closed form
// s b h (10 + 24/t + 5 a s / (h t)) for 16-bit without recomputation.
double activation_bytes_per_layer(const ModelSpec &m, int t, int64_t b, DType dt, Recompute r,
                                  bool sequence_parallel = false);

// Chunk activations stashed at the peak on pipeline rank `stage`, walking the
// schedule's operations (each chunk counted once per micro-batch in flight).
int max_chunks_in_flight(ScheduleKind k, int p, int v, int64_t m, int stage);

// The micro-batches a walk for such a peak needs: m, or 4p where m is more.
// Every schedule but GPipe reaches its peak within its warm-up, which ends by
// micro-batch 3p (interleaving's (v-1)p + 2(p-1) chunks, p micro-batches per
// chunk round); past it, more micro-batches repeat the steady state, so the
// peak of 4p (a multiple of p, as interleaving needs) is m's (checked against
// whole walks: PlanClosedForms.ChunksInFlightSaturateAfterTheWarmUp). A plan of a
// billion samples walked a billion-op list per layout.
int64_t walked_microbatches(ScheduleKind k, int p, int v, int64_t m);

// The same peak in closed form for 1F1B (min(m, p - stage)) and interleaving
// (min(m v, 2(p - stage - 1) + (v - 1)p + 1), Megatron's warm-up plus one),
// or -1 for the others: what max_chunks_in_flight gives where a walk would be
// long (thousands of chunks per rank), checked against walks in the tests.
int64_t chunks_in_flight_closed_form(ScheduleKind k, int p, int v, int64_t m, int stage);

}  // namespace ptdp::plan
