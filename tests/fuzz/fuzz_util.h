// Shared by the fuzzers: a parser may reject an input only with ptdp::Error;
// any other exception is a bug (as crashes, sanitizer reports and timeouts
// are, which libFuzzer catches itself).
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "engine/core/status.h"

namespace ptdp_fuzz {

// Runs f(); swallows ptdp::Error (a rejected input), aborts on anything else.
template <class F>
bool accepts(F &&f) {
  try {
    f();
    return true;
  } catch (const ptdp::Error &) {
    return false;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "BUG: a parser threw a non-ptdp::Error exception: %s\n", e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "BUG: a parser threw something that is not an exception\n");
    std::abort();
  }
}

// Aborts with `what` unless `ok`: a property every accepted input must keep.
inline void check(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "BUG: %s\n", what);
    std::abort();
  }
}

// A directory of this process's own for the files a path-only parser reads.
inline const std::string &scratch_dir() {
  static const std::string dir = [] {
    std::string t = (std::filesystem::temp_directory_path() / "ptdp_fuzz.XXXXXX").string();
    if (!::mkdtemp(&t[0])) std::abort();
    return t;
  }();
  return dir;
}

inline std::string write_file(const std::string &name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
  return path;
}

// Two files from one input: a 2-byte little-endian length, that many bytes
// (clipped to what is there), then the rest. make_seeds.py writes seeds so.
inline std::pair<std::string_view, std::string_view> split2(const uint8_t *data, size_t size) {
  if (size < 2) return {{}, {}};
  const size_t n = std::min<size_t>(data[0] | data[1] << 8, size - 2);
  const char *p = reinterpret_cast<const char *>(data) + 2;
  return {{p, n}, {p + n, size - 2 - n}};
}

}  // namespace ptdp_fuzz
