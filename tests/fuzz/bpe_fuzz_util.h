// What every accepted GPT-2 BPE must do with any text: ids inside its
// vocabulary, and decode(encode(text)) == text.
#pragma once
#include <string_view>

#include "engine/data/bpe_tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace ptdp_fuzz {

inline std::vector<int32_t> check_round_trip(const ptdp::Tokenizer &tok, std::string_view text) {
  const std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids)
    check(id >= 0 && id < tok.vocab_size(), "encode gave an id outside the vocabulary");
  check(tok.decode(ids.data(), ids.size()) == text, "decode(encode(text)) != text");
  return ids;
}

}  // namespace ptdp_fuzz
