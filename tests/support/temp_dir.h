// A fresh directory under the system's temporary folder ($TMPDIR), removed
// with everything in it when the object goes; and whole-file read and write
// for the tests that use it.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

// Whether a writer's temporary file (PATH.tmp or PATH.tmp.XXXXXX) is left
// beside path.
inline bool temp_left_beside(const std::string &path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string stem = p.filename().string() + ".tmp";
  std::error_code ec;
  for (fs::directory_iterator it(p.parent_path(), ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind(stem, 0) == 0) return true;
  return false;
}

struct TempDir {
  std::string path;
  explicit TempDir(const std::string &prefix = "ptdp_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) std::abort();
    path = buf.data();
  }
  ~TempDir() {
    ::chmod(path.c_str(), 0700);  // a test may have made it read-only
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
};

inline std::string read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}
