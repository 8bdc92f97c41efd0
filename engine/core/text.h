// Small string helpers shared across the engine (one copy of each).
#pragma once
#include <string_view>

namespace ptdp {

inline bool starts_with(std::string_view s, std::string_view head) {
  return s.size() >= head.size() && s.compare(0, head.size(), head) == 0;
}
inline bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace ptdp
