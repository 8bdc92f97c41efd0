#include "engine/plan/model.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "engine/core/gpt_math.h"
#include "engine/core/status.h"
#include "engine/parallel/placement.h"

namespace ptdp::plan {

const char *recompute_name(Recompute r) {
  return r == Recompute::none ? "none" : r == Recompute::selective ? "selective" : "full";
}

std::string Layout::label() const {
  std::ostringstream os;
  os << "t=" << t << ",p=" << p << ",d=" << d << ",b=" << b << ",v=" << v;
  if (p > 1) os << "," << schedule_name(schedule);
  os << "," << recompute_name(recompute);
  if (p > 1 && !scatter_gather) os << ",no-sg";
  if (t > 1 && sequence_parallel) os << ",sp";
  return os.str();
}

// ---- closed forms -------------------------------------------------------------

double params_eq2(const ModelSpec &m) {
  double l = (double)m.layers, h = (double)m.hidden;
  return 12 * l * h * h * (1 + 13 / (12 * h) + (double)(m.vocab + m.seq) / (12 * l * h));
}

double flops_per_iteration(const ModelSpec &m, int64_t B, Recompute r) {
  const double l = (double)m.layers, h = (double)m.hidden, s = (double)m.seq;
  // With f = 4h the layers' forward is 24 B s l h^2 (1 + s/(6h)); selective
  // recomputation redoes the attention's 4 B s^2 h a layer.
  const double extra = r == Recompute::selective ? l * 4.0 * B * s * s * h : 0;
  return training_flops((double)B, s, h, (double)m.ffn_size(), (double)m.vocab, l,
                        r == Recompute::full ? 1 : 0, extra, (double)m.qkv_width(),
                        (double)m.mlp_matrices());
}

double bubble_closed_form(ScheduleKind k, int p, int v, int64_t m, PassTimes t) {
  const double all = t.f + t.b + t.w;
  if (k == ScheduleKind::zbh1) return (p - 1) * (t.f + t.b - t.w) / (m * all);
  if (k == ScheduleKind::zbv) return (p - 1) * std::max(t.b, 2 * (t.b - t.w)) / (2.0 * m * all);
  return k == ScheduleKind::interleaved ? (double)(p - 1) / ((double)v * m) : (double)(p - 1) / m;
}

double training_days_eq(double tokens, double params, int64_t n, double flops_per_device) {
  return 8 * tokens * params / ((double)n * flops_per_device) / 86400;
}

int64_t padded_vocab(const ModelSpec &m, int t) { return padded_vocab_size(m.vocab, 128 * (int64_t)t); }

double params_on_stage(const ModelSpec &m, const Layout &L, int stage) {
  const double h = (double)m.hidden, f = (double)m.ffn_size(), t = L.t, q = (double)m.qkv_width();
  const double norm = m.rms_norm ? h : 2 * h;  // weight (and LayerNorm's bias), whole
  const double b = m.linear_bias ? 1 : 0;
  // Column-parallel QKV and fc1 (gate and up with SwiGLU; weights and biases
  // split), row-parallel proj and fc2 (weights split, biases whole).
  const double up = m.swiglu ? 2 : 1;  // column-parallel MLP matrices
  double layer = q * h / t + (m.linear_bias || m.qkv_bias ? q / t : 0) + h * h / t + b * h +
                 up * (h * f + b * f) / t + f * h / t + b * h + 2 * norm;
  double out = layer * (double)m.layers / L.p;
  const double emb = (double)padded_vocab(m, L.t) * h / t;
  // The head's rank: the last, or under zbv the first (beside the embedding,
  // so a tied head adds no copy).
  const int head = chunk_home(v_shaped(L.schedule), L.p, L.p * L.v - 1).rank;
  if (stage == 0) out += emb + (m.rope ? 0 : (double)m.seq * h);
  if (stage == head) out += norm + (m.untied || head != 0 ? emb : 0);
  return out;
}

double params_total(const ModelSpec &m) {
  Layout one;
  return params_on_stage(m, one, 0);
}

// ---- one device -----------------------------------------------------------------

namespace {

// What one rank has of a node whose devices share cores (CPU thread ranks).
struct Share {
  double peak_scale = 1, bw_scale = 1, units_scale = 1;
};
Share share_of(const Machine &mach, int ranks_per_node) {
  Share s;
  if (mach.shared_node && ranks_per_node > 1) {
    s.peak_scale = s.bw_scale = s.units_scale = 1.0 / ranks_per_node;
  }
  return s;
}

}  // namespace

double gemm_seconds(const Machine &mach, DType dt, const Gemm &g, int ranks_per_node) {
  Share sh = share_of(mach, ranks_per_node);
  double units = std::max(1.0, std::floor(mach.gemm_units * sh.units_scale));
  double tiles = std::ceil((double)g.m / mach.gemm_tile_m) * std::ceil((double)g.n / mach.gemm_tile_n) *
                 (double)g.batch;
  double waves = std::ceil(tiles / units);
  double util = tiles / (waves * units);
  double keff = (double)g.k / ((double)g.k + mach.gemm_k_half);
  double eff = mach.gemm_max_efficiency * util * keff;
  double compute = g.flops() / (mach.peak(dt) * sh.peak_scale * eff);
  double bytes = (double)dtype_bytes(dt) * ((double)g.m * g.k + (double)g.k * g.n + (double)g.m * g.n) *
                 (double)g.batch;
  double memory = bytes / (mach.memory_bandwidth * mach.memory_efficiency * sh.bw_scale);
  return std::max(compute, memory) + mach.op_overhead_s;
}

std::vector<Gemm> layer_forward_gemms(const ModelSpec &m, int t, int64_t b) {
  int64_t s = m.seq, h = m.hidden, a = m.heads, f = m.ffn_size();
  return {
      {"qkv", b * s, m.qkv_width() / t, h, 1},
      {"scores", s, s, h / a, b * a / t},
      {"context", s, h / a, s, b * a / t},
      {"proj", b * s, h, h / t, 1},
      {"fc1", b * s, (m.swiglu ? 2 : 1) * f / t, h, 1},  // SwiGLU: gate and up
      {"fc2", b * s, h, f / t, 1},
  };
}

double activation_bytes_per_layer(const ModelSpec &m, int t, int64_t b, DType dt, Recompute r,
                                  bool sequence_parallel) {
  double e = dtype_bytes(dt), s = (double)m.seq, h = (double)m.hidden, a = (double)m.heads;
  double E = b * s * h, Et = E / t, A = b * a * s * s / t, Ft = b * s * m.ffn_size() / t;
  // Sequence parallelism keeps the norms' and dropouts' tensors for s/t positions.
  const double Es = sequence_parallel ? Et : E;
  if (r == Recompute::full) return Es * e;  // the layer's input only
  // Stashed for backward, tensor by tensor (a mask is one byte per element):
  double out = 0;
  out += Es * e;          // layernorm 1 input
  out += Es * e;          // layernorm 1 output = QKV input (whole on every tensor rank without SP)
  const double kv = (double)m.groups() / a;  // a key and a value per query group
  out += (1 + kv) * Et * e;  // Q and K
  out += kv * Et * e;        // V
  out += Et * e;          // attention context = proj input
  out += Es;              // dropout mask after proj
  out += Es * e;          // layernorm 2 input
  out += Es * e;          // layernorm 2 output = fc1 input
  out += (m.swiglu ? 2 : 1) * Ft * e;  // fc1 output = GeLU input (SwiGLU: gate and up)
  out += Ft * e;          // GeLU output = fc2 input
  out += Es;              // dropout mask after fc2
  if (r == Recompute::none) {
    out += A * e;         // softmax output
    out += A;             // attention dropout mask
    out += A * e;         // attention dropout output
  }
  return out;
}

int64_t chunks_in_flight_closed_form(ScheduleKind k, int p, int v, int64_t m, int stage) {
  if (k == ScheduleKind::one_f_one_b) return std::min<int64_t>(m, p - stage);
  if (k == ScheduleKind::interleaved)
    return std::min<int64_t>(m * v, 2 * (int64_t)(p - stage - 1) + (int64_t)(v - 1) * p + 1);
  return -1;
}

int64_t walked_microbatches(ScheduleKind k, int p, int v, int64_t m) {
  return k == ScheduleKind::gpipe ? m : std::min<int64_t>(m, 4 * (int64_t)p);
}

int max_chunks_in_flight(ScheduleKind k, int p, int v, int64_t m, int stage) {
  if (k == ScheduleKind::gpipe) {  // every forward before the first backward
    validate_schedule(k, p, v, (int)std::min<int64_t>(m, INT32_MAX));
    return (int)std::min<int64_t>(m * v, INT32_MAX);
  }
  // A long walk (a deep pipeline of many chunks) gives way to the closed form.
  if (4.0 * p * p * v > 2e5)
    if (const int64_t closed = chunks_in_flight_closed_form(k, p, v, m, stage); closed >= 0)
      return (int)std::min<int64_t>(closed, INT32_MAX);
  // The same walk for many layouts of one plan (its t, d and b): remembered.
  static std::mutex mu;
  static std::map<std::tuple<int, int, int, int64_t, int>, int> walked;
  m = walked_microbatches(k, p, v, m);
  const auto key = std::make_tuple((int)k, p, v, m, stage);
  {
    std::lock_guard<std::mutex> g(mu);
    if (auto it = walked.find(key); it != walked.end()) return it->second;
  }
  std::vector<PipeOp> ops = pipeline_schedule(k, p, v, (int)m, stage);
  int now = 0, peak = 0;
  for (const PipeOp &op : ops) {
    if (op.kind == PipeOpKind::forward) peak = std::max(peak, ++now);
    // A micro-batch's activations are kept until its weight gradients when the schedule splits them.
    if (op.kind == (splits_backward(k) ? PipeOpKind::backward_weight : PipeOpKind::backward)) now--;
  }
  std::lock_guard<std::mutex> g(mu);
  walked[key] = peak;
  return peak;
}

std::string layout_problem(const ModelSpec &m, const TrainSpec &tr, const Layout &L) {
  std::ostringstream os;
  if (L.t < 1 || L.p < 1 || L.d < 1 || L.b < 1 || L.v < 1)
    return "t, p, d, b and v must all be >= 1";
  if ((int64_t)L.t * L.p * L.d != tr.num_gpus) {
    os << "t x p x d = " << L.t << " x " << L.p << " x " << L.d << " = " << (int64_t)L.t * L.p * L.d
       << " is not the number of GPUs (" << tr.num_gpus << ")";
    return os.str();
  }
  if (m.heads % L.t != 0) {
    os << "t=" << L.t << " does not divide the attention heads (" << m.heads << ")";
    return os.str();
  }
  if (m.groups() % L.t != 0) {
    os << "t=" << L.t << " does not divide the query groups (" << m.groups() << ")";
    return os.str();
  }
  if (m.ffn_size() % L.t != 0) {
    os << "t=" << L.t << " does not divide the ffn hidden size (" << m.ffn_size() << ")";
    return os.str();
  }
  if (m.layers % ((int64_t)L.p * L.v) != 0) {
    os << "p x v = " << L.p << " x " << L.v << " = " << L.p * L.v << " does not divide the layers ("
       << m.layers << ")";
    return os.str();
  }
  if (tr.global_batch % ((int64_t)L.b * L.d) != 0) {
    os << "the global batch (" << tr.global_batch << ") is not divisible by b x d = " << L.b << " x "
       << L.d << " = " << (int64_t)L.b * L.d;
    return os.str();
  }
  int64_t mb = L.microbatches(tr.global_batch);
  if (mb > (1 << 30)) return "too many micro-batches";
  if (L.sequence_parallel && L.t > 1 && m.seq % L.t != 0) {
    os << "sequence parallelism needs the sequence (" << m.seq << ") divisible by t (" << L.t << ")";
    return os.str();
  }
  if (L.schedule == ScheduleKind::zbv) {
    if (L.p < 2 || L.v != 2) return "zbv needs p >= 2 and v = 2 (two chunks per rank in a V)";
    if (mb < L.p) {
      os << "zbv needs at least as many micro-batches (" << mb << ") as stages (" << L.p << ")";
      return os.str();
    }
  } else if (L.v > 1 && L.schedule != ScheduleKind::interleaved) {
    os << "v=" << L.v << " model chunks per rank need the interleaved or zbv schedule";
    return os.str();
  }
  if (L.schedule == ScheduleKind::interleaved) {
    if (L.p < 2 || L.v < 2) return "the interleaved schedule needs p >= 2 and v >= 2";
    if (mb % L.p != 0) {
      os << "the interleaved schedule needs the micro-batches (B/(b d) = " << mb
         << ") to be a multiple of p (" << L.p << ")";
      return os.str();
    }
  }
  return "";
}

std::vector<StreamOp> layer_elementwise_ops(const ModelSpec &m, int t, int64_t b, DType dt) {
  const double e = dtype_bytes(dt), s = (double)m.seq, h = (double)m.hidden, a = (double)m.heads;
  const double E = b * s * h, A = b * a * s * s / t, Ft = b * s * m.ffn_size() / t, Et = E / t;
  // Layernorms, fused scale-mask-softmax, attention dropout, bias+dropout+add
  // (x2), bias+GeLU; masks one byte.
  return {
      {"layernorm", 2 * E * e, 1, true, false},
      {"layernorm", 2 * E * e, 1, true, false},
      {"softmax", 2 * A * e, 1, true, true},
      {"attention dropout", 2 * A * e + A, 1, true, true},
      {"bias+dropout+add", 3 * E * e + E, 1, true, false},
      {"bias+dropout+add", 3 * E * e + E, 1, true, false},
      {"bias+gelu", 2 * Ft * e, 1, true, false},
      {"layernorm", 3 * E * e, 1, false, false},
      {"layernorm", 3 * E * e, 1, false, false},
      {"softmax", 3 * A * e, 1, false, true},
      {"attention dropout", 2 * A * e + A, 1, false, true},
      {"bias+dropout+add", 2 * E * e + E, 1, false, false},
      {"bias+dropout+add", 2 * E * e + E, 1, false, false},
      {"residual add", 3 * E * e, 1, false, false},
      {"residual add", 3 * E * e, 1, false, false},
      {"bias+gelu", 3 * Ft * e, 1, false, false},
      {"bias gradients", (3 * Et + 2 * E + Ft) * e, 4, false, false},
  };
}

// ---- communication ----------------------------------------------------------------

namespace {

struct Net {
  double bw, latency;
};

// A collective group of g members, consecutive members `stride` ranks apart
// (the rank grid: tensor fastest, then data, then pipeline). Inside a node it
// gets NVLink; across nodes each node's NICs are shared by the groups that
// run at once, so a group with k members per node gets k NICs.
Net group_net(const Machine &mach, int64_t n, int64_t g, int64_t stride) {
  int64_t gpn = mach.shared_node ? std::max<int64_t>(n, 1) : mach.devices_per_node;
  if (g * stride <= gpn && gpn % (g * stride) == 0)
    return {mach.intra.effective(), mach.intra.latency_s};
  if (g * stride <= gpn) return {mach.intra.effective(), mach.intra.latency_s};
  int64_t k = stride >= gpn ? 1 : std::min<int64_t>(g, gpn / stride);
  return {std::min(mach.intra.effective(), (double)k * mach.inter.effective()),
          mach.inter.latency_s};
}

double allreduce_seconds(double bytes, int64_t g, Net net) {
  if (g <= 1) return 0;
  double steps = std::min(2.0 * (g - 1), 2.0 * std::ceil(std::log2((double)g)));
  return 2.0 * (g - 1) / g * bytes / net.bw + steps * net.latency;
}

double allgather_seconds(double bytes, int64_t g, Net net) {  // bytes: the gathered size
  if (g <= 1) return 0;
  return (double)(g - 1) / g * bytes / net.bw + (double)(g - 1) * net.latency;
}

// Do pipeline stages `a` and `b` have ranks on different nodes?
bool stages_cross(const Machine &mach, const Layout &L, int a, int b) {
  if (mach.shared_node) return false;
  int64_t gpn = mach.devices_per_node, td = (int64_t)L.t * L.d;
  for (int64_t x = 0; x < std::min(td, gpn); x++)
    if ((a * td + x) / gpn != (b * td + x) / gpn) return true;
  return false;
}

}  // namespace

// ---- the prediction ------------------------------------------------------------

namespace {

// Times of one micro-batch on one tensor rank, seconds.
struct OpTimes {
  double layer_f_gemm = 0, layer_f_ew = 0, layer_f_tp = 0;
  double layer_b_gemm = 0, layer_b_ew = 0, layer_b_tp = 0;  // recomputation included
  double layer_w_gemm = 0;  // of layer_b_gemm, the weight gradients (a zero-bubble W)
  double emb_f = 0, emb_b = 0, emb_tp = 0;
  double head_f = 0, head_b = 0, head_tp = 0;
};

OpTimes op_times(const ModelSpec &m, const TrainSpec &tr, const Machine &mach, const Layout &L,
                 int rpn) {
  OpTimes o;
  const DType dt = tr.dtype;
  const double e = dtype_bytes(dt), s = (double)m.seq, h = (double)m.hidden;
  const double b = (double)L.b;
  const double E = b * s * h;
  Share sh = share_of(mach, rpn);
  const double bw =
      (mach.elementwise_bandwidth > 0 ? mach.elementwise_bandwidth
                                      : mach.memory_bandwidth * mach.memory_efficiency) *
      sh.bw_scale;
  auto stream = [&](double bytes, int kernels) { return bytes / bw + kernels * mach.op_overhead_s; };

  double f_gemm = 0, b_gemm = 0, core_f = 0;
  for (const Gemm &g : layer_forward_gemms(m, L.t, L.b)) {
    double fwd = gemm_seconds(mach, dt, g, rpn);
    f_gemm += fwd;
    b_gemm += gemm_seconds(mach, dt, {g.name, g.m, g.k, g.n, g.batch}, rpn);  // input gradient
    const double wg = gemm_seconds(mach, dt, {g.name, g.k, g.n, g.m, g.batch}, rpn);
    b_gemm += wg;  // weight gradient (the attention core's second operand's)
    if (g.batch > 1) core_f += fwd;  // the attention core (scores, context)
    else o.layer_w_gemm += wg;       // a weight's: W in a zero-bubble schedule
  }
  double f_ew = 0, b_ew = 0, core_ew = 0;
  for (const StreamOp &op : layer_elementwise_ops(m, L.t, L.b, dt)) {
    double x = stream(op.bytes, op.kernels);
    (op.forward ? f_ew : b_ew) += x;
    if (op.forward && op.attention_core) core_ew += x;
  }
  const Net tp = group_net(mach, tr.num_gpus, L.t, 1);
  const double ar = allreduce_seconds(E * e, L.t, tp);
  o.layer_f_gemm = f_gemm;
  o.layer_f_ew = f_ew;
  o.layer_f_tp = 2 * ar;
  o.layer_b_gemm = b_gemm;
  o.layer_b_ew = b_ew;
  o.layer_b_tp = 2 * ar;
  if (L.recompute == Recompute::full) {
    o.layer_b_gemm += f_gemm;
    o.layer_b_ew += f_ew;
    o.layer_b_tp += 2 * ar;
  } else if (L.recompute == Recompute::selective) {
    o.layer_b_gemm += core_f;
    o.layer_b_ew += core_ew;
  }
  // Embedding (first virtual stage): word + position gather, dropout; its
  // vocab-parallel output is all-reduced. Backward scatters into the table.
  o.emb_f = stream(5 * E * e + E, 3);
  o.emb_tp = ar;
  o.emb_b = stream(4 * E * e + E, 3);
  // Head (last virtual stage): final layernorm, LM head GEMM on the vocab
  // shard, cross-entropy in fp32 over the shard (three small reductions).
  const int64_t Vt = padded_vocab(m, L.t) / L.t;
  const Gemm head{"lm_head", L.b * m.seq, Vt, m.hidden, 1};
  const double Lv = b * s * (double)Vt;
  o.head_f = gemm_seconds(mach, dt, head, rpn) + stream(2 * E * e, 1) + stream(Lv * (e + 16), 4);
  o.head_b = gemm_seconds(mach, dt, {"lm_head", head.m, head.k, head.n, 1}, rpn) +
             gemm_seconds(mach, dt, {"lm_head", head.k, head.n, head.m, 1}, rpn) +
             stream(3 * E * e, 1) + stream(Lv * (8 + e), 2);
  o.head_tp = 3 * allreduce_seconds(b * s * 4, L.t, tp);
  return o;
}

}  // namespace

Prediction predict(const ModelSpec &m, const TrainSpec &tr, const Machine &mach, const Layout &L,
                   bool replay) {
  std::string problem = layout_problem(m, tr, L);
  if (!problem.empty()) fail(Status::invalid_config, "layout ", L.label(), ": ", problem);
  Prediction P;
  P.layout = L;
  const int rpn = (int)std::min<int64_t>(tr.num_gpus, mach.shared_node ? tr.num_gpus : mach.devices_per_node);
  const OpTimes o = op_times(m, tr, mach, L, rpn);
  const int p = L.p, v = L.v, V = p * v;
  const int64_t mb = L.microbatches(tr.global_batch);
  const double Lc = (double)m.layers / V;  // layers per model chunk
  const double e = dtype_bytes(tr.dtype);
  const double E = (double)L.b * m.seq * m.hidden;

  // Point-to-point: the boundary tensor b s h (1/t of it with scatter/gather,
  // then all-gathered inside the tensor group), over NVLink or the NIC.
  const Net tp = group_net(mach, tr.num_gpus, L.t, 1);
  auto p2p = [&](int from, int to) {
    if (p == 1 || from == to) return 0.0;  // zbv's turn stays on its rank
    Net net = stages_cross(mach, L, from, to) ? Net{mach.inter.effective(), mach.inter.latency_s}
                                              : Net{mach.intra.effective(), mach.intra.latency_s};
    // Sequence parallelism's boundary is already this rank's 1/t.
    if (L.sequence_parallel && L.t > 1) return E * e / L.t / net.bw + net.latency;
    if (L.scatter_gather && L.t > 1)
      return E * e / L.t / net.bw + net.latency + allgather_seconds(E * e, L.t, tp);
    return E * e / net.bw + net.latency;
  };

  // Per (rank, chunk) operation costs, split into categories for the breakdown.
  struct Cost {
    double gemm = 0, ew = 0, tp = 0, pp = 0;
    double sum() const { return gemm + ew + tp + pp; }
  };
  const bool v_shape = v_shaped(L.schedule), split = splits_backward(L.schedule);
  auto rank_of = [&](int vs) { return chunk_home(v_shape, p, vs).rank; };
  // fwd, or the backward (B alone when the schedule splits off W).
  auto chunk_cost = [&](int rank, int chunk, bool fwd) {
    Cost c;
    int vs = virtual_stage(v_shape, p, rank, chunk);
    if (fwd) {
      c.gemm = Lc * o.layer_f_gemm;
      c.ew = Lc * o.layer_f_ew;
      c.tp = Lc * o.layer_f_tp;
      if (vs == 0) c.ew += o.emb_f, c.tp += o.emb_tp;
      if (vs == V - 1) c.ew += o.head_f, c.tp += o.head_tp;
      if (vs < V - 1) c.pp = p2p(rank, rank_of(vs + 1));
    } else {
      c.gemm = Lc * (o.layer_b_gemm - (split ? o.layer_w_gemm : 0));
      c.ew = Lc * o.layer_b_ew;
      c.tp = Lc * o.layer_b_tp;
      if (vs == 0) c.ew += o.emb_b;
      if (vs == V - 1) c.ew += o.head_b;
      if (vs > 0) c.pp = p2p(rank, rank_of(vs - 1));
    }
    return c;
  };
  // A chunk's weight gradients, run apart by a zero-bubble schedule.
  const double w_cost = split ? Lc * o.layer_w_gemm : 0;
  // The schedule's formula with the times of a chunk that has neither the
  // embedding nor the head (virtual stage 1; with p*v = 2 the head's).
  const ChunkHome mid = chunk_home(v_shape, p, std::min(1, V - 1));
  P.pass = {chunk_cost(mid.rank, mid.chunk, true).sum(), chunk_cost(mid.rank, mid.chunk, false).sum(),
            w_cost};
  P.bubble_formula = bubble_closed_form(L.schedule, p, v, mb, P.pass);
  // Busiest rank: the most work per micro-batch (all its chunks, both passes).
  int busiest = 0;
  double busiest_work = -1;
  std::vector<double> per_mb(p, 0.0);
  for (int r = 0; r < p; r++) {
    for (int c = 0; c < v; c++)
      per_mb[r] += chunk_cost(r, c, true).sum() + chunk_cost(r, c, false).sum() + w_cost;
    if (per_mb[r] > busiest_work) busiest_work = per_mb[r], busiest = r;
  }
  Cost busy;
  for (int c = 0; c < v; c++) {
    for (bool fwd : {true, false}) {
      Cost x = chunk_cost(busiest, c, fwd);
      busy.gemm += x.gemm, busy.ew += x.ew, busy.tp += x.tp, busy.pp += x.pp;
    }
    busy.gemm += w_cost;
  }
  const double work = busiest_work * mb;

  double makespan;
  // A replay needs m' >= 2p micro-batches on every rank: past ~2M compute ops
  // in all (thousands of stages, or thousands of chunks per rank) it would
  // take minutes, and the formula stands in (the report says which it used).
  const bool replayable = 3.0 * p * v * (2.0 * p) <= 2e6;
  if (p == 1) {
    makespan = work;
  } else if (replay && replayable) {
    // Replay the real schedule; beyond ~60k compute ops replay m' micro-batches
    // (steady state reached: m' >= 2p) and add the busiest rank's extra work.
    int64_t m2 = mb;
    const int64_t cap = 60000;
    if (2 * (int64_t)p * v * mb > cap) {
      m2 = std::max<int64_t>(2 * p, cap / (2 * (int64_t)p * v) / p * p);
      if (m2 > mb) m2 = mb;
    }
    std::vector<std::vector<PipeOp>> ranks;
    for (int r = 0; r < p; r++) ranks.push_back(pipeline_schedule(L.schedule, p, v, (int)m2, r));
    std::vector<std::vector<double>> cost(p);
    for (int r = 0; r < p; r++) {
      std::vector<double> cf((size_t)v), cb((size_t)v);  // (v reaches num_layers / p)
      for (int c = 0; c < v; c++) cf[(size_t)c] = chunk_cost(r, c, true).sum(), cb[(size_t)c] = chunk_cost(r, c, false).sum();
      for (const PipeOp &op : ranks[r])
        cost[r].push_back(op.kind == PipeOpKind::forward    ? cf[(size_t)op.chunk]
                          : op.kind == PipeOpKind::backward ? cb[(size_t)op.chunk]
                          : op.kind == PipeOpKind::backward_weight ? w_cost : 0);
    }
    makespan = replay_makespan(ranks, p, L.schedule, [&](int r, size_t i) { return cost[(size_t)r][i]; });
    makespan += (double)(mb - m2) * busiest_work;
    P.replayed = true;
  } else {
    makespan = work * (1 + P.bubble_formula);
  }
  P.bubble_fraction = makespan / work - 1;

  // Once per iteration: data-parallel gradient all-reduce (or reduce-scatter +
  // all-gather with the distributed optimizer), the tied embedding's
  // all-reduce between the first and last stage, the optimizer step.
  double params_max = 0;
  for (int st : {0, p - 1}) params_max = std::max(params_max, params_on_stage(m, L, st));
  const double g = tr.grads_fp32 || tr.dtype == DType::fp32 ? 4 : e;
  const Net dpn = group_net(mach, tr.num_gpus, L.d, L.t);
  double dp = allreduce_seconds(params_max * g, L.d, dpn);
  if (tr.distributed_optimizer && L.d > 1)
    dp = allgather_seconds(params_max * g, L.d, dpn) + allgather_seconds(params_max * e, L.d, dpn);
  double emb = 0;
  if (p > 1 && !v_shape) {  // zbv holds both halves of the tied embedding on one rank
    double bytes = (double)padded_vocab(m, L.t) * m.hidden / L.t * g;
    Net net = stages_cross(mach, L, 0, p - 1) ? Net{mach.inter.effective(), mach.inter.latency_s}
                                              : Net{mach.intra.effective(), mach.intra.latency_s};
    emb = allreduce_seconds(bytes, 2, net);
  }
  Share sh = share_of(mach, rpn);
  double touched = tr.dtype == DType::fp32 ? 32 : 2 * g + 24 + e + g;  // + zeroing the grads
  double opt_params = tr.distributed_optimizer ? params_max / L.d : params_max;
  double optimizer =
      mach.optimizer_params_per_s > 0
          ? opt_params / (mach.optimizer_params_per_s * sh.peak_scale)
          : opt_params * touched / (mach.memory_bandwidth * mach.memory_efficiency * sh.bw_scale);
  optimizer += 10 * mach.op_overhead_s;

  P.iteration_s = makespan + dp + emb + optimizer;
  P.time.gemm = busy.gemm * mb;
  P.time.elementwise = busy.ew * mb;
  P.time.tp = busy.tp * mb;
  P.time.pp = busy.pp * mb;
  P.time.bubble = makespan - work;
  P.time.dp = dp;
  P.time.embedding = emb;
  P.time.optimizer = optimizer;

  P.flops = flops_per_iteration(m, tr.global_batch, L.recompute);
  P.tflops_per_gpu = P.flops / ((double)tr.num_gpus * P.iteration_s) / 1e12;
  P.percent_of_peak = 100 * P.tflops_per_gpu * 1e12 / mach.peak(tr.dtype);
  double iters = tr.train_tokens / ((double)tr.global_batch * m.seq);
  double seconds = iters * P.iteration_s;
  P.days = seconds / 86400;
  P.gpu_hours = seconds / 3600 * (double)tr.num_gpus;
  P.cost_usd = P.gpu_hours * mach.device_hour_usd;

  // Memory of the fullest device: the first stage (most micro-batches in
  // flight, the embedding) or the head's (the logits; the first under zbv).
  const int head_rank = chunk_home(v_shape, p, V - 1).rank;
  const bool sp = L.sequence_parallel && L.t > 1;
  const double act_layer = activation_bytes_per_layer(m, L.t, L.b, tr.dtype, L.recompute, sp);
  const double act_full = activation_bytes_per_layer(m, L.t, L.b, tr.dtype, Recompute::none, sp);
  P.activation_bytes_per_layer = act_layer;
  const double Lv = (double)L.b * m.seq * padded_vocab(m, L.t) / L.t;
  const double opt_bytes = tr.dtype == DType::fp32 ? 8 : 12;
  for (int st : (p == 1 ? std::vector<int>{0} : std::vector<int>{0, p - 1})) {
    MemoryBreakdown mem;
    double prm = params_on_stage(m, L, st);
    mem.params = prm * e;
    mem.grads = prm * g;
    mem.optimizer = prm * opt_bytes / (tr.distributed_optimizer ? L.d : 1);
    int chunks = L.schedule == ScheduleKind::gpipe && p > 1 ? (int)(mb * v)
                 : p == 1 ? 1 : max_chunks_in_flight(L.schedule, p, v, mb, st);
    if (p == 1) chunks = 1;  // one micro-batch at a time without a pipeline
    mem.in_flight = chunks;
    mem.activations = chunks * Lc * act_layer;
    if (st == head_rank) mem.activations += Lv * 4;  // fp32 softmax of the last micro-batch
    // Working set of one layer's backward: its full activations (recomputed
    // or not), the activation gradients, and on the last stage the logits.
    mem.workspace = act_full + 2 * E * e + (st == head_rank ? Lv * (4 + e) : 0);
    mem.reserved = mach.memory_reserved_bytes;
    if (mem.total() > P.memory.total()) P.memory = mem;
  }
  P.fits = P.memory.total() <= mach.memory_bytes;
  return P;
}

}  // namespace ptdp::plan
