#include "checkpoints/inspect.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "checkpoints/hdf5_file.h"
#include "checkpoints/sharded_checkpoint.h"

namespace ptdp {

namespace {

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list again;
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s((size_t)std::max(n, 0) + 1, '\0');  // names and paths have no length limit
  std::vsnprintf(s.data(), s.size(), fmt, again);
  va_end(again);
  s.pop_back();
  return s;
}

std::string mb(int64_t bytes) { return format("%.3f MB", (double)bytes / 1e6); }

using Rows = std::vector<std::pair<std::string, std::string>>;

// Titled sections of "key   value" lines, every value in one column.
std::string sections(const std::vector<std::pair<std::string, Rows>> &secs) {
  size_t width = 0;
  for (const auto &sec : secs)
    for (const auto &r : sec.second) width = std::max(width, r.first.size());
  std::string out;
  for (const auto &[title, rows] : secs) {
    out += title + "\n";
    if (rows.empty()) out += "  (none recorded)\n";
    for (const auto &[k, v] : rows) out += format("  %-*s  %s\n", (int)width, k.c_str(), v.c_str());
  }
  return out;
}

std::string num(int64_t v) { return std::to_string(v); }
std::string num(float v) { return format("%g", (double)v); }

struct Totals {
  int64_t bytes = 0, blocks = 0, params = 0;
};

Totals totals(const Manifest &m) {
  Totals t;
  for (const ManifestDataset &d : m.datasets) {
    t.bytes += d.bytes();
    t.blocks += (int64_t)d.blocks.size();
    if (d.name.rfind("/model/", 0) == 0) t.params += d.numel();
  }
  return t;
}

// Older checkpoints load without a checksum of the manifest's own fields: say so.
std::string manifest_checksum_text(const Manifest &m) {
  return m.checksummed ? "matches its fields"
                       : "none (an older checkpoint, saved before manifests had one: its fields "
                         "are not checked)";
}

// The model as the manifest records it (ffn_hidden_size and max_position_embeddings resolved).
Rows model_rows(const GptConfig &g) {
  Rows rows;
  for (const GptConfigField &f : gpt_config_fields())
    rows.emplace_back(f.name, f.kind == GptConfigField::Int      ? num((int64_t)f.int_value(g))
                              : f.kind == GptConfigField::Choice ? f.choice_name(g.*f.int_member)
                                                                 : num(f.float_value(g)));
  return rows;
}

}  // namespace

std::string inspect_checkpoint(const std::string &path) {
  const CheckpointRef ref = open_checkpoint(path);
  const Manifest &m = ref.manifest;
  const Totals tot = totals(m);
  // The manifest's size of the data file, and what is wrong with the file
  // itself (inspect reads only the manifest; verify checks the data).
  std::string file = m.file + ", " + num(m.file_bytes) + " bytes";
  if (const std::string fault = data_file_fault(ref.dir + "/" + m.file, m.file_bytes); !fault.empty())
    file += " (damaged: " + fault + "; `ptdp ckpt verify` says more)";
  std::string out =
      sections({{"checkpoint",
                 {{"directory", ref.dir},
                  {"chosen", ref.why},
                  {"iteration", num(m.iteration)},
                  {"format", format("ptdp-checkpoint version %d", Manifest::kFormatVersion)},
                  {"manifest checksum", manifest_checksum_text(m)},
                  {"file", file},
                  {"saved with", m.layout.text()}}},
                {"model", model_rows(m.model)},
                {"training", Rows(m.training.begin(), m.training.end())},
                {"totals",
                 {{"datasets", num((int64_t)m.datasets.size())},
                  {"blocks", num(tot.blocks)},
                  {"bytes", num(tot.bytes) + " (" + mb(tot.bytes) + ")"},
                  {"parameters", num(tot.params) + " (elements of /model/*)"}}}});

  // One line per dataset, in columns sized to their widest entry.
  std::vector<std::vector<std::string>> rows = {
      {"name", "dtype", "shape", "bytes", "MB", "blocks"}};
  for (const ManifestDataset &d : m.datasets)
    rows.push_back({d.name, d.dtype, dims_text(d.shape), num(d.bytes()),
                    format("%.3f", (double)d.bytes() / 1e6), num((int64_t)d.blocks.size())});
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto &r : rows)
    for (size_t c = 0; c < r.size(); c++) w[c] = std::max(w[c], r[c].size());
  out += "datasets\n";
  for (const auto &r : rows)  // text columns to the left, numbers to the right
    out += format("  %-*s  %-*s  %-*s  %*s  %*s  %*s\n", (int)w[0], r[0].c_str(), (int)w[1],
                  r[1].c_str(), (int)w[2], r[2].c_str(), (int)w[3], r[3].c_str(), (int)w[4],
                  r[4].c_str(), (int)w[5], r[5].c_str());
  return out;
}

std::string verify_checkpoint(const std::string &path, bool *ok) {
  const CheckpointRef ref = open_checkpoint(path);
  const std::vector<std::string> faults = checkpoint_faults(ref.dir);
  if (ok) *ok = faults.empty();
  // Taken other than by the tracker (it was stale or missing): said, so that
  // an OK for an older checkpoint does not hide the newer one that was passed over.
  const bool plain = ref.why.empty() || ref.why.rfind("from the tracker", 0) == 0 ||
                     ref.why.rfind("the checkpoint directory given", 0) == 0;
  const std::string chosen = plain ? "" : " (" + ref.why + ")";
  if (faults.empty()) {
    const Totals tot = totals(ref.manifest);
    return format("OK: %s%s: %zu datasets, %lld blocks, %lld bytes checked against their "
                  "checksums; manifest checksum: %s\n",
                  ref.dir.c_str(), chosen.c_str(), ref.manifest.datasets.size(),
                  (long long)tot.blocks, (long long)tot.bytes,
                  manifest_checksum_text(ref.manifest).c_str());
  }
  std::string out = "FAULTY: " + ref.dir + chosen + "\n";
  for (const std::string &f : faults) out += "  " + f + "\n";
  return out + format("%zu fault%s\n", faults.size(), faults.size() == 1 ? "" : "s");
}

}  // namespace ptdp
