// GPT-2 BPE from a Hugging Face tokenizer.json; an accepted file must
// round-trip the input's bytes.
#include "tests/fuzz/bpe_fuzz_util.h"

using namespace ptdp_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path =
      write_file("tokenizer.json", {reinterpret_cast<const char *>(data), size});
  std::unique_ptr<ptdp::Gpt2BpeTokenizer> tok;
  if (!accepts([&] { tok = ptdp::Gpt2BpeTokenizer::from_tokenizer_json(path); })) return 0;
  check(tok->eod() >= 0 && tok->eod() < tok->vocab_size(), "eod outside the vocabulary");
  check_round_trip(*tok, {reinterpret_cast<const char *>(data), size});
  return 0;
}
