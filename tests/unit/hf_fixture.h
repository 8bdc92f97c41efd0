// The logits fixtures that make_hf_fixture.py and make_llama_fixtures.py
// write beside their models: token sequences and transformers' fp32 logits
// (int32 count, then per sequence int32 n, int32 ids[n], float32
// logits[n][vocab], little-endian).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "temp_dir.h"

struct Sequence {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [n, vocab]
};

inline std::vector<Sequence> read_logits(const std::string &path, int vocab) {
  const std::string b = read_file(path);
  size_t at = 0;
  auto take = [&](void *to, size_t bytes) {
    EXPECT_LE(at + bytes, b.size());
    std::memcpy(to, b.data() + at, bytes);
    at += bytes;
  };
  int32_t count = 0;
  take(&count, 4);
  std::vector<Sequence> out((size_t)count);
  for (Sequence &s : out) {
    int32_t n = 0;
    take(&n, 4);
    s.ids.resize((size_t)n);
    s.logits.resize((size_t)n * vocab);
    take(s.ids.data(), s.ids.size() * 4);
    take(s.logits.data(), s.logits.size() * 4);
  }
  EXPECT_EQ(at, b.size());
  return out;
}

inline double relative_l2(const std::vector<float> &got, const std::vector<float> &want) {
  double d = 0, w = 0;
  for (size_t i = 0; i < want.size(); i++) {
    d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
    w += (double)want[i] * want[i];
  }
  return std::sqrt(d / w);
}

