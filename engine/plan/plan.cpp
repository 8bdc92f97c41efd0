// Enumeration, ranking and the report of `ptdp plan`.
#include "engine/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "engine/core/output_file.h"
#include "engine/core/status.h"
#include "engine/core/text.h"
#include "engine/device/device.h"

namespace ptdp::plan {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 1; i * i <= n; i++)
    if (n % i == 0) {
      out.push_back(i);
      if (i != n / i) out.push_back(n / i);
    }
  std::sort(out.begin(), out.end());
  return out;
}

std::string fmt(const char *f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

const char *schedule_label(const Layout &L) { return L.p == 1 ? "-" : schedule_name(L.schedule); }

constexpr double GiB = 1024.0 * 1024 * 1024;

}  // namespace

LayoutLabel parse_layout(const std::string &label, const Layout &defaults) {
  LayoutLabel out;
  Layout &L = out.layout;
  L = defaults;
  std::set<std::string> given_keys;
  std::stringstream ss(label);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
      bool is_schedule = false;
      for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                             ScheduleKind::zbh1, ScheduleKind::zbv})
        is_schedule = is_schedule || item == schedule_name(k);
      // Each kind of part once (a second schedule or recomputation won in silence).
      const auto once = [&](bool *named, const char *kind) {
        if (*named) fail(Status::bad_value, "layout '", label, "': it names two ", kind, "s; give one");
        *named = true;
      };
      if (is_schedule) once(&out.schedule, "schedule"), L.schedule = parse_schedule(item);
      else if (item == "none") once(&out.recompute, "recomputation"), L.recompute = Recompute::none;
      else if (item == "selective") once(&out.recompute, "recomputation"), L.recompute = Recompute::selective;
      else if (item == "full") once(&out.recompute, "recomputation"), L.recompute = Recompute::full;
      else if (item == "no-sg") once(&out.scatter_gather, "scatter/gather choice"), L.scatter_gather = false;
      else if (item == "sg") once(&out.scatter_gather, "scatter/gather choice"), L.scatter_gather = true;
      else if (item == "sp") L.sequence_parallel = true;
      else
        fail(Status::bad_value, "layout '", label, "': unknown part '", item,
             "'; allowed: t=, p=, d=, b=, v=, gpipe|1f1b|interleaved|zbh1|zbv, none|selective|full, sg|no-sg, sp");
      continue;
    }
    std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (!given_keys.insert(k).second)  // (the later one won in silence)
      fail(Status::bad_value, "layout '", label, "': ", k, " is given twice; give each once");
    long long x = 0;
    if (!parse_whole(v, &x) || x < 1 || x > (1 << 24))
      fail(Status::bad_value, "layout '", label, "': ", k, " must be a whole number >= 1, got '", v, "'");
    if (k == "t") L.t = (int)x, out.t = true;
    else if (k == "p") L.p = (int)x, out.p = true;
    else if (k == "d") L.d = (int)x, out.d = true;
    else if (k == "b") L.b = (int)x, out.b = true;
    else if (k == "v") L.v = (int)x, out.v = true;
    else
      fail(Status::bad_value, "layout '", label, "': unknown part '", k, "'; allowed: t, p, d, b, v");
  }
  if (!out.schedule) L.schedule = L.v > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
  return out;
}

// The layout --explain names, over the options that fix parts of the layout
// (--tensor-model-parallel-size, --recompute-granularity, ...): a part the
// label leaves out takes the fixed value, one it names must agree with it (it
// explained a layout the ranking below it never considered).
static Layout explained_layout(const PlanRequest &req) {
  Layout defaults;
  if (req.t) defaults.t = req.t;
  if (req.p) defaults.p = req.p;
  if (req.d) defaults.d = req.d;
  if (req.b) defaults.b = req.b;
  if (req.v) defaults.v = req.v;
  if (req.recompute >= 0) defaults.recompute = (Recompute)req.recompute;
  if (req.scatter_gather >= 0) defaults.scatter_gather = req.scatter_gather != 0;
  defaults.sequence_parallel = req.sequence_parallel;
  const LayoutLabel named = parse_layout(req.explain, defaults);
  Layout L = named.layout;
  if (!named.schedule && req.schedule >= 0) L.schedule = (ScheduleKind)req.schedule;
  // A part the label names against the option that fixes it, by their text.
  const auto agree = [&](bool named_it, bool fixed, const std::string &in_label, const std::string &by_option,
                         const char *option) {
    if (named_it && fixed && in_label != by_option)
      fail(Status::invalid_config, "explain ", req.explain, ": it names ", in_label, " where --", option, " ",
           by_option, " is given; leave it out of the layout, or change --", option);
  };
  const auto num = [](const char *k, int x) { return std::string(k) + "=" + std::to_string(x); };
  agree(named.t, req.t, num("t", L.t), num("t", req.t), "tensor-model-parallel-size");
  agree(named.p, req.p, num("p", L.p), num("p", req.p), "pipeline-model-parallel-size");
  agree(named.d, req.d, num("d", L.d), num("d", req.d), "data-parallel-size");
  agree(named.b, req.b, num("b", L.b), num("b", req.b), "micro-batch-size");
  agree(named.v, req.v, num("v", L.v), num("v", req.v), "virtual-pipeline-model-parallel-size");
  agree(named.schedule, req.schedule >= 0, schedule_name(L.schedule),
        req.schedule >= 0 ? schedule_name((ScheduleKind)req.schedule) : "", "pipeline-schedule");
  agree(named.recompute, req.recompute >= 0, recompute_name(L.recompute),
        req.recompute >= 0 ? recompute_name((Recompute)req.recompute) : "", "recompute-granularity");
  agree(named.scatter_gather, req.scatter_gather >= 0, L.scatter_gather ? "sg" : "no-sg",
        req.scatter_gather == 1 ? "sg" : "no-sg", "scatter-gather-tensors-in-pipeline");
  if (!(named.t || req.t) || !(named.p || req.p) || !(named.b || req.b))
    fail(Status::bad_value, "explain needs at least t, p and b (in the layout or fixed by their options), "
         "e.g. t=8,p=2,b=4,v=2; got '", req.explain, "'");
  if (!(named.d || req.d)) {
    if ((int64_t)L.t * L.p > req.train.num_gpus)  // (d would be 0: "must all be >= 1")
      fail(Status::invalid_config, "explain ", req.explain, ": t x p = ", (int64_t)L.t * L.p,
           " is more than the ", req.train.num_gpus, " GPUs");
    L.d = (int)(req.train.num_gpus / ((int64_t)L.t * L.p));
  }
  return L;
}

// --machine as an input of this command. A preset's name registers nothing,
// even beside a local file of that name: the preset is what is read.
static InputFile machine_input(const std::string &machine) {
  return InputFile(is_machine_preset(machine) ? std::string() : machine, "--machine file");
}

PlanResult run_plan(const PlanRequest &req) {
  PlanResult res;
  // The output's rules before any work (a calibration takes a while); a
  // --machine file is this run's input.
  const InputFile machine_file = machine_input(req.machine);
  if (!req.save_machine.empty()) output_target(req.save_machine, "--save-machine", OutputKind::machine);
  if (!req.plot.empty()) {
    output_target(req.plot, "--plot", OutputKind::png);
    if (!req.save_machine.empty() && same_output(req.plot, req.save_machine))
      fail(Status::invalid_argument, "--plot '", req.plot, "' and --save-machine '", req.save_machine,
           "' name the same file: the picture would replace the machine file; give two paths");
  }
  if (req.calibrate) {
    // Element-wise kernels are timed at the model's own layer shape unless
    // that would take long (an attention matrix or MLP over 4M elements).
    CalibrationShape shape;
    const ModelSpec &mm = req.model;
    const CalibrationShape own{(int)mm.seq, (int)mm.hidden, (int)mm.heads, (int)mm.ffn_size()};
    if (mm.heads * mm.seq * mm.seq <= (1 << 22) &&
        mm.seq * std::max(3 * mm.hidden, mm.ffn_size()) <= (1 << 22))
      shape = own;
    const bool gpu = req.device == "auto" ? cuda_device_count() > 0 : req.device != "cpu";
    if (gpu) {
      // One sequence of the model's own layer: a GPU holds it.
      auto dev = make_device(req.device == "auto" ? "cuda" : req.device, 0);
      res.machine = calibrate_gpu(*dev, req.train.dtype, load_machine(req.machine),
                                  &res.machine_log, own);
    } else {
      // The CPU's calibration measures this machine whole (its cores, no
      // network): a --machine given with it was ignored in silence, even one
      // that does not exist.
      if (req.machine_given)
        fail(Status::invalid_config, "machine '", req.machine, "' with calibrate on the CPU: the ",
             "calibration measures this machine whole (its cores; no network), so the machine would go ",
             "unused: leave it out (with a GPU's calibration it gives the links between the GPUs)");
      res.machine = calibrate_this_machine(&res.machine_log, shape);
    }
  } else {
    res.machine = load_machine(req.machine);
  }
  const ModelSpec &m = req.model;
  const TrainSpec &tr = req.train;
  const int64_t n = tr.num_gpus, B = tr.global_batch;
  res.fixed = req.t && req.p && req.b && (req.p == 1 || req.v);

  auto consider = [&](const Layout &L) {
    res.considered++;
    std::string why = layout_problem(m, tr, L);
    if (!why.empty()) {
      res.invalid.push_back({L, why});
      return;
    }
    Prediction P = predict(m, tr, res.machine, L, /*replay=*/false);
    // (Every machine field has a physical range; a time that is still no
    // number is a fault, never a ranked plan.)
    if (!std::isfinite(P.iteration_s) || !(P.iteration_s > 0))
      fail(Status::internal, "plan: ", L.label(), " on machine '", res.machine.name,
           "' predicts an iteration time of ", P.iteration_s, " s; its figures are out of range");
    (P.fits ? res.ranked : res.too_big).push_back(P);
  };

  for (int64_t t : divisors(n)) {
    if (req.t && t != req.t) continue;
    for (int64_t p : divisors(n / t)) {
      if (req.p && p != req.p) continue;
      int64_t d = n / (t * p);
      if (req.d && d != req.d) continue;
      Layout base;
      base.t = (int)t, base.p = (int)p, base.d = (int)d;
      base.b = req.b ? req.b : 1;
      base.scatter_gather = req.scatter_gather != 0;
      base.sequence_parallel = req.sequence_parallel;
      // A t or p that cannot work is reported once, not once per (b, v, recomputation).
      if (m.heads % t != 0 || m.ffn_size() % t != 0 || m.layers % p != 0) {
        if (req.recompute >= 0) base.recompute = (Recompute)req.recompute;
        consider(base);
        continue;
      }
      // Micro-batch sizes: those dividing B/d (up to the cap), or the one asked for.
      std::vector<int64_t> bs;
      if (req.b) bs = {req.b};
      else if (B % d == 0)
        for (int64_t b : divisors(B / d))
          if (b <= req.max_micro_batch) bs.push_back(b);
      if (bs.empty()) bs = {1};  // reported as not divisible
      for (int64_t b : bs) {
        base.b = (int)b;
        // (schedule, v): 1F1B for v = 1, interleaved for v > 1, GPipe only when asked.
        std::vector<std::pair<ScheduleKind, int>> sv;
        // (p = 1 has no pipeline: none for a schedule of chunks, which the
        // trainer refuses there; it was ranked first as if not asked.)
        const bool chunks = req.schedule == (int)ScheduleKind::interleaved || req.schedule == (int)ScheduleKind::zbv;
        if (p == 1) {
          if (!chunks) sv = {{ScheduleKind::one_f_one_b, req.v ? req.v : 1}};
        }
        else if (req.v) sv = {{req.schedule >= 0 ? (ScheduleKind)req.schedule
                                                 : req.v > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b, req.v}};
        else if (req.schedule == (int)ScheduleKind::gpipe || req.schedule == (int)ScheduleKind::one_f_one_b ||
                 req.schedule == (int)ScheduleKind::zbh1)
          sv = {{(ScheduleKind)req.schedule, 1}};
        else if (req.schedule == (int)ScheduleKind::zbv)
          sv = {{ScheduleKind::zbv, 2}};
        else {
          if (req.schedule < 0) sv.push_back({ScheduleKind::one_f_one_b, 1});
          if (m.layers % p == 0)
            for (int64_t v : divisors(m.layers / p))
              if (v > 1) sv.push_back({ScheduleKind::interleaved, (int)v});
          if (sv.empty()) sv.push_back({ScheduleKind::interleaved, 2});  // reported
        }
        for (auto [sched, v] : sv) {
          base.schedule = sched, base.v = v;
          for (int r = 0; r < 3; r++) {
            if (req.recompute >= 0 && r != req.recompute) continue;
            base.recompute = (Recompute)r;
            consider(base);
          }
        }
      }
    }
  }
  if (res.considered == 0)
    fail(Status::invalid_config, "no layout has t x p x d = ", n, " with the given t=", req.t, ", p=", req.p,
         ", d=", req.d, " (t and p must divide num_gpus, d = n / (t p))");
  // Rank by the closed form first, then replay the schedules of the leaders.
  auto by_time = [](const Prediction &a, const Prediction &b) { return a.iteration_s < b.iteration_s; };
  std::sort(res.ranked.begin(), res.ranked.end(), by_time);
  size_t k = std::min(res.ranked.size(), (size_t)std::max(12, 3 * req.top));
  for (size_t i = 0; i < k; i++) res.ranked[i] = predict(m, tr, res.machine, res.ranked[i].layout, true);
  std::sort(res.ranked.begin(), res.ranked.begin() + (long)k, by_time);
  std::sort(res.too_big.begin(), res.too_big.end(),
            [](const Prediction &a, const Prediction &b) { return a.memory.total() < b.memory.total(); });
  for (size_t i = 0; i < std::min<size_t>(res.too_big.size(), 3); i++)
    res.too_big[i] = predict(m, tr, res.machine, res.too_big[i].layout, true);
  return res;
}

namespace {

std::string table_header() {
  return " rank  t   p    d    b   v  schedule     recompute  TFLOP/s/GPU  %peak  iteration(s)  bubble   tp%   pp%   dp%  memory(GiB)  days\n";
}

std::string table_row(int rank, const Prediction &P) {
  const Layout &L = P.layout;
  char buf[320];
  double it = P.iteration_s;
  std::snprintf(buf, sizeof buf,
                " %4d %2d %3d %4d %4d %3d  %-11s  %-9s  %11.1f  %5.1f  %12.3f  %5.1f%%  %4.1f  %4.1f  %4.1f  %11.1f  %5.1f%s\n",
                rank, L.t, L.p, L.d, L.b, L.v, schedule_label(L), recompute_name(L.recompute),
                P.tflops_per_gpu, P.percent_of_peak, it, 100 * P.bubble_fraction, 100 * P.time.tp / it,
                100 * P.time.pp / it, 100 * (P.time.dp + P.time.embedding) / it, P.memory.total() / GiB, P.days,
                P.fits ? "" : "  (does not fit)");
  return buf;
}

std::string machine_line(const Prediction &P) {
  const Layout &L = P.layout;
  std::ostringstream os;
  os << "tflops_per_gpu=" << fmt("%.1f", P.tflops_per_gpu) << " iteration_s=" << fmt("%.4g", P.iteration_s)
     << " memory_gib=" << fmt("%.2f", P.memory.total() / GiB) << " tensor=" << L.t << " pipeline=" << L.p
     << " data=" << L.d << " micro_batch=" << L.b << " virtual=" << L.v;
  return os.str();
}

std::string record(const char *kind, int rank, const Prediction &P) {
  const Layout &L = P.layout;
  double it = P.iteration_s;
  std::ostringstream os;
  os << kind << " rank=" << rank << " " << machine_line(P) << " schedule=" << schedule_label(L)
     << " recompute=" << recompute_name(L.recompute) << " scatter_gather=" << (L.scatter_gather ? 1 : 0)
     << " percent_of_peak=" << fmt("%.2f", P.percent_of_peak) << " bubble=" << fmt("%.4f", P.bubble_fraction)
     << " tp_share=" << fmt("%.4f", P.time.tp / it) << " pp_share=" << fmt("%.4f", P.time.pp / it)
     << " dp_share=" << fmt("%.4f", (P.time.dp + P.time.embedding) / it) << " days=" << fmt("%.3f", P.days)
     << " gpu_hours=" << fmt("%.0f", P.gpu_hours) << " cost_usd=" << fmt("%.0f", P.cost_usd)
     << " activation_gib=" << fmt("%.3f", P.memory.activations / GiB) << " fits=" << (P.fits ? 1 : 0)
     << " label=" << L.label() << "\n";
  return os.str();
}

// The parts of an iteration, for breakdowns and comparisons.
std::vector<std::pair<const char *, double>> parts(const Prediction &P) {
  return {{"GEMMs", P.time.gemm},
          {"element-wise ops", P.time.elementwise},
          {"tensor-parallel all-reduces", P.time.tp},
          {"pipeline sends", P.time.pp},
          {"pipeline bubble", P.time.bubble},
          {"data-parallel all-reduce", P.time.dp},
          {"embedding all-reduce", P.time.embedding},
          {"optimizer step", P.time.optimizer}};
}

// "2.1% slower: +0.40 s pipeline bubble, -0.10 s tensor-parallel all-reduces"
std::string compare(const Prediction &a, const Prediction &best) {
  std::ostringstream os;
  double rel = a.iteration_s / best.iteration_s - 1;
  os << fmt("%.1f%%", 100 * std::fabs(rel)) << (rel >= 0 ? " slower" : " faster");
  auto pa = parts(a), pb = parts(best);
  std::vector<std::pair<double, const char *>> diff;
  for (size_t i = 0; i < pa.size(); i++) diff.push_back({pa[i].second - pb[i].second, pa[i].first});
  std::sort(diff.begin(), diff.end(), [](auto &x, auto &y) { return std::fabs(x.first) > std::fabs(y.first); });
  const char *sep = ": ";
  for (size_t i = 0; i < 3 && i < diff.size(); i++) {
    if (std::fabs(diff[i].first) < 1e-4 * best.iteration_s) break;
    os << sep << (diff[i].first >= 0 ? "+" : "-") << fmt("%.3g", std::fabs(diff[i].first)) << " s " << diff[i].second;
    sep = ", ";
  }
  if (std::fabs(a.memory.total() - best.memory.total()) > 0.05 * GiB)
    os << "; memory " << fmt("%.1f", a.memory.total() / GiB) << " vs " << fmt("%.1f", best.memory.total() / GiB) << " GiB";
  return os.str();
}

std::string where_time_goes(const Prediction &P) {
  std::ostringstream os;
  const char *sep = "";
  for (auto &[name, s] : parts(P)) {
    if (s / P.iteration_s < 0.0005) continue;
    os << sep << name << " " << fmt("%.1f%%", 100 * s / P.iteration_s);
    sep = ", ";
  }
  return os.str();
}

std::string memory_line(const Prediction &P, const Machine &mach) {
  const MemoryBreakdown &M = P.memory;
  std::ostringstream os;
  os << fmt("%.1f", M.total() / GiB) << " GiB of " << fmt("%.1f", mach.memory_bytes / GiB)
     << " = parameters " << fmt("%.1f", M.params / GiB) << " + gradients " << fmt("%.1f", M.grads / GiB)
     << " + optimizer " << fmt("%.1f", M.optimizer / GiB) << " + activations " << fmt("%.1f", M.activations / GiB)
     << " (" << M.in_flight << " chunk" << (M.in_flight == 1 ? "" : "s") << " in flight, "
     << fmt("%.1f", P.activation_bytes_per_layer / (1024.0 * 1024)) << " MiB per layer and micro-batch)"
     << " + workspace " << fmt("%.1f", M.workspace / GiB) << " + reserved " << fmt("%.1f", M.reserved / GiB);
  return os.str();
}

std::string explain_layout(const PlanRequest &req, const PlanResult &res, const Prediction &P) {
  const Machine &mach = res.machine;
  const Layout &L = P.layout;
  std::ostringstream os;
  os << "explain " << L.label() << ":\n";
  os << "  iteration " << fmt("%.4g", P.iteration_s) << " s on the busiest pipeline stage:\n";
  for (auto &[name, s] : parts(P))
    os << "    " << name << std::string(30 - std::string(name).size(), ' ') << fmt("%10.4f s", s)
       << fmt("  %5.1f%%\n", 100 * s / P.iteration_s);
  int64_t mb = L.microbatches(req.train.global_batch);
  os << "  bubble: " << fmt("%.2f%%", 100 * P.bubble_fraction) << (P.replayed ? " replayed from the " : " from the ")
     << schedule_label(L) << " schedule (closed form " << fmt("%.2f%%", 100 * P.bubble_formula)
     << ", m = " << mb << " micro-batches)\n";
  os << "  one layer's forward GEMMs per micro-batch on a tensor rank (efficiency = achieved / peak):\n";
  const int rpn = (int)std::min<int64_t>(req.train.num_gpus, mach.shared_node ? req.train.num_gpus : mach.devices_per_node);
  for (const Gemm &g : layer_forward_gemms(req.model, L.t, L.b)) {
    double s = gemm_seconds(mach, req.train.dtype, g, rpn);
    double eff = g.flops() / s / (mach.peak(req.train.dtype) * (mach.shared_node ? 1.0 / rpn : 1.0));
    char buf[200];
    std::snprintf(buf, sizeof buf, "    %-8s %6lld x %6lld x %6lld  x%-5lld %9.3f ms  %5.1f%%\n", g.name, (long long)g.m,
                  (long long)g.n, (long long)g.k, (long long)g.batch, 1e3 * s, 100 * eff);
    os << buf;
  }
  os << "  memory: " << memory_line(P, mach) << (P.fits ? "" : "  -- DOES NOT FIT") << "\n";
  os << "  " << fmt("%.1f", P.tflops_per_gpu) << " TFLOP/s per GPU (" << fmt("%.1f", P.percent_of_peak)
     << "% of peak), " << fmt("%.1f", P.days) << " days and " << fmt("%.0f", P.gpu_hours) << " GPU-hours for "
     << fmt("%.3g", req.train.train_tokens) << " tokens\n";
  return os.str();
}

// Groups the reasons of layouts that cannot work: "count x reason (e.g. layout)".
// One kind a line for the report, or all on one line for an error.
std::string invalid_summary(const PlanResult &res, size_t max_kinds, bool one_line) {
  std::map<std::string, std::pair<int, std::string>> kinds;  // reason without numbers -> count, example
  std::vector<std::string> order;
  for (auto &[L, why] : res.invalid) {
    std::string key;
    for (char c : why)
      if (!(c >= '0' && c <= '9')) key += c;
    if (!kinds.count(key)) order.push_back(key), kinds[key] = {0, L.label() + ": " + why};
    kinds[key].first++;
  }
  std::ostringstream os;
  const char *before = one_line ? "" : "  ", *after = one_line ? "; " : "\n";
  for (size_t i = 0; i < order.size() && i < max_kinds; i++)
    os << before << kinds[order[i]].first << " x, e.g. " << kinds[order[i]].second << after;
  if (order.size() > max_kinds) os << before << "(" << order.size() - max_kinds << " more kinds)" << after;
  std::string out = os.str();
  if (one_line && !out.empty()) out.resize(out.size() - 2);  // (the last "; ")
  return out;
}

}  // namespace

std::string format_plan(const PlanRequest &req, const PlanResult &res) {
  const ModelSpec &m = req.model;
  const Machine &mach = res.machine;
  std::ostringstream os;
  const Prediction *explained = nullptr;
  Prediction ex;
  if (!req.explain.empty()) {
    const Layout L = explained_layout(req);
    std::string why = layout_problem(m, req.train, L);
    if (!why.empty()) fail(Status::invalid_config, "explain ", req.explain, ": ", why);
    ex = predict(m, req.train, mach, L, true);
    explained = &ex;
  }
  if (res.ranked.empty() && !explained && !(res.fixed && !res.too_big.empty())) {
    std::ostringstream why;
    if (!res.too_big.empty()) {
      why << "no layout fits in " << fmt("%.1f", mach.memory_bytes / GiB) << " GiB per device on " << mach.name
          << "; the smallest: ";
      for (size_t i = 0; i < res.too_big.size() && i < 3; i++)
        why << (i ? "; " : "") << res.too_big[i].layout.label() << ": " << memory_line(res.too_big[i], mach);
      if (!res.invalid.empty()) why << "; and ";
    } else {
      why << "no layout can work: ";
    }
    why << invalid_summary(res, 8, true);
    fail(Status::invalid_config, why.str());
  }
  const Prediction &first = explained ? *explained : res.ranked.empty() ? res.too_big.front() : res.ranked.front();
  // The outputs last, once there is a plan: a failed plan leaves none (it
  // replaced --save-machine before it found no layout). In either format (the
  // records, which ptdp.plan reads, wrote none, exit 0).
  const auto write_outputs = [&] {
    const InputFile machine_file = machine_input(req.machine);  // still this command's input
    if (!req.save_machine.empty())
      write_file_atomic(req.save_machine, machine_to_json(res.machine), "--save-machine",
                        OutputKind::machine);
    if (!req.plot.empty()) plot_plan_png(res, req.plot);
  };

  if (req.format == "records") {
    if (explained) os << record("explained", 0, *explained);
    for (size_t i = 0; i < res.ranked.size() && i < (size_t)req.top; i++) os << record("layout", (int)i + 1, res.ranked[i]);
    for (size_t i = 0; i < res.too_big.size() && i < 3; i++) os << record("too_big", (int)i + 1, res.too_big[i]);
    for (auto &[L, why] : res.invalid) os << "invalid label=" << L.label() << " reason=" << why << "\n";
    write_outputs();
    os << machine_line(first) << "\n";
    return os.str();
  }

  const double P2 = params_total(m);
  os << "ptdp plan: GPT of " << (P2 >= 1e12 ? fmt("%.3gT", P2 / 1e12) : P2 >= 1e9 ? fmt("%.3gB", P2 / 1e9) : fmt("%.3gM", P2 / 1e6))
     << " parameters (l=" << m.layers << ", h=" << m.hidden
     << ", a=" << m.heads << ", V=" << m.vocab << ", S=" << m.seq << "), B=" << req.train.global_batch << ", "
     << req.train.num_gpus << " GPUs of " << mach.name << ", " << dtype_name(req.train.dtype)
     << (req.train.distributed_optimizer ? ", distributed optimizer" : "") << "\n";
  if (!res.machine_log.empty()) os << res.machine_log;
  os << "  parameters: " << fmt("%.0f", params_total(m)) << " (Eq. 2, GPT's closed form: "
     << fmt("%.4g", params_eq2(m)) << "); Eq. 3: "
     << fmt("%.4g", flops_per_iteration(m, req.train.global_batch, Recompute::full)) << " FLOPs per iteration"
     << " with full recomputation (" << fmt("%.4g", flops_per_iteration(m, req.train.global_batch, Recompute::none))
     << " without)\n";
  os << "  " << res.considered << " layouts considered: " << res.ranked.size() << " fit, " << res.too_big.size()
     << " need more than " << fmt("%.1f", mach.memory_bytes / GiB) << " GiB, " << res.invalid.size()
     << " cannot work\n";
  if (explained) os << "\n" << explain_layout(req, res, *explained);
  os << "\n" << table_header();
  if (explained) os << table_row(0, *explained);
  for (size_t i = 0; i < res.ranked.size() && i < (size_t)req.top; i++) os << table_row((int)i + 1, res.ranked[i]);
  if (res.ranked.empty()) os << table_row(1, res.too_big.front());
  os << "  (TFLOP/s counted as the paper does, recomputation included; ranked by iteration time; rank 0 = --explain)\n";
  if (!res.ranked.empty()) {
    const Prediction &w = res.ranked.front();
    os << "\nbest " << w.layout.label() << ": " << where_time_goes(w) << "; memory " << fmt("%.1f", w.memory.total() / GiB)
       << " of " << fmt("%.1f", mach.memory_bytes / GiB) << " GiB.\n";
    if (res.ranked.size() > 1) os << "  runner-up " << res.ranked[1].layout.label() << " is " << compare(res.ranked[1], w) << ".\n";
    if (explained) os << "  the explained layout is, against the best, " << compare(*explained, w) << ".\n";
  } else if (res.fixed) {
    os << "\nthis layout does not fit: " << memory_line(res.too_big.front(), mach) << "\n";
  }
  if (!res.too_big.empty() && !res.fixed) {
    const Prediction &s = res.too_big.front();
    os << "  " << res.too_big.size() << " layouts dropped for memory; the smallest of them, " << s.layout.label()
       << ", needs " << fmt("%.1f", s.memory.total() / GiB) << " GiB\n";
  }
  if (!res.invalid.empty()) os << "  layouts that cannot work:\n" << invalid_summary(res, 4, false);
  write_outputs();
  if (!req.plot.empty()) os << "  wrote " << req.plot << "\n";
  os << machine_line(first) << "\n";
  return os.str();
}

std::string plan_report(const std::vector<std::pair<std::string, std::string>> &options) {
  for (auto &kv : options)
    if (kv.first == "help" || kv.first == "--help") return plan_help();
  PlanRequest req = parse_plan_request(options);
  PlanResult res = run_plan(req);
  return format_plan(req, res);
}

}  // namespace ptdp::plan
