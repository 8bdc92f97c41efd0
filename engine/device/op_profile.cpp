#include "engine/device/op_profile.h"

#include <algorithm>
#include <cstdio>

namespace ptdp {

DeviceTimer &OpProfiler::next_timer() {
  if (pending_.size() == timers_.size()) timers_.push_back(dev_.make_timer());
  return *timers_[pending_.size()];
}

std::vector<OpTime> OpProfiler::take() {
  for (size_t i = 0; i < pending_.size(); i++) pending_[i]->ms += timers_[i]->elapsed_ms();
  pending_.clear();
  std::vector<OpTime> out;
  for (auto &kv : rows_) out.push_back(kv.second);
  rows_.clear();
  std::sort(out.begin(), out.end(), [](const OpTime &a, const OpTime &b) { return a.ms > b.ms; });
  return out;
}

std::string gemm_op_name(bool ta, bool tb, int M, int N, int K, int batch) {
  char k[80];
  std::snprintf(k, sizeof k, "gemm %dx%dx%d %c%c%s", M, N, K, ta ? 'T' : 'N', tb ? 'T' : 'N',
                batch > 1 ? (" x" + std::to_string(batch)).c_str() : "");
  return k;
}

double attention_flops(int s, int b, int heads, int hd) {
  return 2.0 * b * heads * (double)s * s * hd;
}

std::string format_op_profile(const std::vector<OpTime> &rows) {
  double total = 0;
  for (const OpTime &r : rows) total += r.ms;
  std::string out;
  char line[200];
  std::snprintf(line, sizeof line, "%-40s %7s %10s %6s %9s\n", "op", "calls", "ms", "share",
                "TFLOP/s");
  out += line;
  for (const OpTime &r : rows) {
    char rate[16] = "";
    if (r.flops > 0 && r.ms > 0) std::snprintf(rate, sizeof rate, "%.3g", r.flops / r.ms / 1e9);
    std::snprintf(line, sizeof line, "%-40s %7lld %10.3f %5.1f%% %9s\n", r.op.c_str(),
                  (long long)r.calls, r.ms, total > 0 ? 100 * r.ms / total : 0.0, rate);
    out += line;
  }
  // All GEMMs together (with their fused epilogues, "gemm+..."): the share
  // the tensor cores (or BLAS) take.
  OpTime gemms{"gemm (all shapes)"};
  for (const OpTime &r : rows)
    if (r.op.rfind("gemm ", 0) == 0 || r.op.rfind("gemm+", 0) == 0)
      gemms.calls += r.calls, gemms.ms += r.ms, gemms.flops += r.flops;
  if (gemms.calls) {
    std::snprintf(line, sizeof line, "%-40s %7lld %10.3f %5.1f%% %9.3g\n", gemms.op.c_str(),
                  (long long)gemms.calls, gemms.ms, total > 0 ? 100 * gemms.ms / total : 0.0,
                  gemms.ms > 0 ? gemms.flops / gemms.ms / 1e9 : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-40s %7s %10.3f\n", "total (device time in ops)", "", total);
  out += line;
  return out;
}

}  // namespace ptdp
