// `ptdp ckpt inspect` and `ptdp ckpt verify`: what a checkpoint holds, and
// whether every block still matches its manifest checksum.
#pragma once
#include <string>

namespace ptdp {

// path: a save directory (its newest complete checkpoint) or one iter_N.
// Plain text in aligned columns: the directory and why it was chosen, the
// iteration, format, saved layout (t, p, d, v), model config, training
// options, totals (datasets, blocks, bytes, parameters) and one line per
// dataset (name, dtype, shape, bytes, MB, blocks). Throws like open_checkpoint.
std::string inspect_checkpoint(const std::string &path);

// Checks the manifest, the file's size and datasets, and every block's
// checksum. The report is "OK: <dir>: N datasets, M blocks, X bytes checked
// ..." or "FAULTY: <dir>", each fault on its own line and their count; *ok
// (when not null) is false when there is a fault. Throws like open_checkpoint
// only when there is no complete checkpoint at all.
std::string verify_checkpoint(const std::string &path, bool *ok);

}  // namespace ptdp
