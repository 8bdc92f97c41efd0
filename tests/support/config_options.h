// The tests' configurations as option lists: Megatron's names and their
// values, set in order, so a run's shape reads as one table instead of a
// column of Config::set calls (an unknown name or a bad value fails exactly as
// Config::set does).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/train/config.h"

using ConfigOptions = std::vector<std::pair<std::string, std::string>>;

inline ptdp::Config &set_options(ptdp::Config &c, const ConfigOptions &options) {
  for (const auto &[key, value] : options) c.set(key, value);
  return c;
}
