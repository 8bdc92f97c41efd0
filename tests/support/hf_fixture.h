// The Hugging Face fixtures of make_hf_fixture.py and make_llama_fixtures.py:
// their safetensors files, read from the format's description (not by ptdp's
// code), and the logits written beside the models: token sequences and
// transformers' fp32 logits (int32 count, then per sequence int32 n, int32
// ids[n], float32 logits[n][vocab], little-endian).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

struct Tensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

struct Safetensors {
  nlohmann::json metadata = nlohmann::json::object();
  std::map<std::string, Tensor> tensors;
};

inline Safetensors read_safetensors(const std::string &path) {
  const std::string b = read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | (unsigned char)b[(size_t)i];
  const nlohmann::json h = nlohmann::json::parse(b.substr(8, n));
  Safetensors st;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") {
      st.metadata = it.value();
      continue;
    }
    const uint64_t s = it.value()["data_offsets"][0], e = it.value()["data_offsets"][1];
    st.tensors[it.key()] = {it.value()["dtype"], it.value()["shape"].get<std::vector<int64_t>>(),
                            b.substr(8 + n + s, e - s)};
  }
  return st;
}

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

