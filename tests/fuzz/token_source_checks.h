// What a run may assume of a dataset that opened (either format): documents
// span the tokens in order, every token is inside the vocabulary. Returns the
// tokens. For the fuzzers of tests/fuzz.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/data/token_source.h"
#include "tests/fuzz/fuzz_util.h"

namespace ptdp_fuzz {

inline std::vector<int32_t> check_token_source(const ptdp::TokenSource &ds, uint64_t max_tokens) {
  const uint64_t n = ds.num_tokens();
  check(n <= max_tokens, "more tokens than the file's bytes");
  check(ds.doc_offset(0) == 0 && ds.doc_offset(ds.num_docs()) == n, "documents do not span");
  for (uint64_t d = 1; d <= ds.num_docs(); d++)
    check(ds.doc_offset(d - 1) <= ds.doc_offset(d), "document offsets decrease");
  std::vector<int32_t> tokens(n);
  ds.read(0, n, tokens.data());
  for (int32_t t : tokens) check(t >= 0 && t < ds.vocab_size(), "token outside vocab_size()");
  return tokens;
}

}  // namespace ptdp_fuzz
