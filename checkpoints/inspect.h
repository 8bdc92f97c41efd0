// `ptdp ckpt inspect` and `ptdp ckpt verify`: what a checkpoint holds, and
// whether every block still matches its manifest checksum.
#pragma once
#include <string>

namespace ptdp {

// path: a save directory (its newest complete checkpoint) or one iter_N.
// Iteration, saved layout, model config, training options, totals, and one
// line per dataset (name, dtype, shape, MB, blocks). Throws like open_checkpoint.
std::string inspect_checkpoint(const std::string &path);

// Checks the manifest, the file's size and datasets, and every block's
// checksum; the report lists each fault (or says what was checked). *ok is
// false when there is a fault. Throws only when there is no checkpoint at all.
std::string verify_checkpoint(const std::string &path, bool *ok);

}  // namespace ptdp
