// The token dataset of tests/fixtures/tiny_corpus.txt, built once per test process
// in a temporary directory of its own.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

#include "engine/data/corpus.h"

inline std::string tiny_dataset_path() {
  static const std::string path = [] {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("ptdp_test_" + std::to_string(getpid()));
    fs::create_directories(dir);
    std::string out = (dir / "tiny.ptdp").string();
    ptdp::ByteTokenizer tok;
    ptdp::build_token_dataset({std::string(PTDP_TEST_DATA_DIR) + "/tiny_corpus.txt"}, "fortune",
                              tok, out);
    return out;
  }();
  return path;
}
