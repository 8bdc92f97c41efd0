// The names a checkpoint root holds (ARCHITECTURE §5): one directory per
// saved iteration, "iter_0001000" (7 digits, more if needed), "iter_0001000.tmp"
// while its save is written, and the tracker "latest". One source for the
// checkpoint writer (checkpoints/commit.cpp) and for the rule that no other
// writer's output goes among them (engine/core/output_file.cpp).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/core/status.h"

namespace ptdp {

inline constexpr const char *kCheckpointTracker = "latest";
// The two files of every checkpoint directory: its manifest and its data.
inline constexpr const char *kCheckpointManifest = "manifest.json";
inline constexpr const char *kCheckpointData = "model.h5";

// "iter_0001000" for iteration 1000; Error(bad_value) for iteration < 0.
inline std::string checkpoint_name(int64_t iteration) {
  if (iteration < 0) fail(Status::bad_value, "checkpoint iteration must be >= 0, got ", iteration);
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", (long long)iteration);
  return buf;
}

// The iteration a directory name stands for ("iter_0001000", or with *tmp set
// "iter_0001000.tmp"); -1 for any other name. One spelling per iteration.
inline int64_t checkpoint_iteration(std::string name, bool *tmp) {
  *tmp = name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
  if (*tmp) name.resize(name.size() - 4);
  if (name.compare(0, 5, "iter_") != 0) return -1;
  const std::string digits = name.substr(5);
  if (digits.size() < 7 || digits.size() > 18 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  const int64_t it = std::stoll(digits);
  return checkpoint_name(it) == name ? it : -1;
}

// Whether `name` is a checkpoint directory's (iter_N, its save's .tmp, or the
// .old a commit swaps out or a rotation is removing); *old tells the last.
inline bool checkpoint_dir_name(std::string name, bool *old = nullptr) {
  const bool is_old = name.size() > 4 && name.compare(name.size() - 4, 4, ".old") == 0;
  if (is_old) name.resize(name.size() - 4);
  bool tmp;
  if (checkpoint_iteration(name, &tmp) < 0 || (is_old && tmp)) return false;
  if (old) *old = is_old;
  return true;
}

}  // namespace ptdp
