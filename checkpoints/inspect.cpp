#include "checkpoints/inspect.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoints/sharded_checkpoint.h"

namespace ptdp {

namespace {

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string shape_text(const std::vector<int64_t> &s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); i++) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

std::string inspect_checkpoint(const std::string &path) {
  const CheckpointRef ref = open_checkpoint(path);
  const Manifest &m = ref.manifest;
  const GptConfig &g = m.model;
  std::string out;
  out += "checkpoint  " + ref.dir + " (" + ref.why + ")\n";
  out += format("iteration   %lld\n", (long long)m.iteration);
  out += format("format      ptdp-checkpoint %d, %s (%.1f MB)\n", Manifest::kFormatVersion,
                m.file.c_str(), (double)m.file_bytes / 1e6);
  out += "saved with  " + m.layout.text() + "\n";
  out += format("model       num_layers %d, hidden_size %d, num_attention_heads %d, "
                "ffn_hidden_size %d, vocab_size %d, max_position_embeddings %d, seq_length %d\n",
                g.num_layers, g.hidden_size, g.num_attention_heads, g.ffn(), g.vocab_size,
                g.max_positions(), g.seq_length);
  out += "training   ";
  for (const auto &[k, v] : m.training) out += " " + k + "=" + v;
  out += "\n";
  int64_t bytes = 0, params = 0, blocks = 0;
  size_t width = 0;
  for (const ManifestDataset &d : m.datasets) {
    bytes += d.bytes();
    blocks += (int64_t)d.blocks.size();
    if (d.name.rfind("/model/", 0) == 0) params += d.numel();
    width = std::max(width, d.name.size());
  }
  out += format("datasets    %zu, %lld blocks, %.1f MB; %lld parameters\n", m.datasets.size(),
                (long long)blocks, (double)bytes / 1e6, (long long)params);
  for (const ManifestDataset &d : m.datasets)
    out += format("  %-*s  %-7s  %-14s  %10.3f MB  %3zu blocks\n", (int)width, d.name.c_str(),
                  d.dtype.c_str(), shape_text(d.shape).c_str(), (double)d.bytes() / 1e6,
                  d.blocks.size());
  return out;
}

std::string verify_checkpoint(const std::string &path, bool *ok) {
  const CheckpointRef ref = open_checkpoint(path);
  const std::vector<std::string> faults = checkpoint_faults(ref.dir);
  *ok = faults.empty();
  if (faults.empty()) {
    int64_t bytes = 0, blocks = 0;
    for (const ManifestDataset &d : ref.manifest.datasets) {
      bytes += d.bytes();
      blocks += (int64_t)d.blocks.size();
    }
    return format("OK: %s: %zu datasets, %lld blocks, %lld bytes checked against their checksums\n",
                  ref.dir.c_str(), ref.manifest.datasets.size(), (long long)blocks,
                  (long long)bytes);
  }
  std::string out = "FAULTY: " + ref.dir + "\n";
  for (const std::string &f : faults) out += "  " + f + "\n";
  return out + format("%zu fault(s)\n", faults.size());
}

}  // namespace ptdp
