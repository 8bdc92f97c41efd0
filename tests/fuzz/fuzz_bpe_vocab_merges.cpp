// GPT-2 BPE from vocab.json + merges.txt (input: split2() into the two);
// an accepted pair must round-trip the input's bytes.
#include "tests/fuzz/bpe_fuzz_util.h"

using namespace ptdp_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const auto files = split2(data, size);  // vocab.json, merges.txt
  const std::string vpath = write_file("vocab.json", files.first);
  const std::string mpath = write_file("merges.txt", files.second);
  std::unique_ptr<ptdp::Gpt2BpeTokenizer> tok;
  if (!accepts([&] { tok = ptdp::Gpt2BpeTokenizer::from_vocab_merges(vpath, mpath); })) return 0;
  check(tok->eod() >= 0 && tok->eod() < tok->vocab_size(), "eod outside the vocabulary");
  check_round_trip(*tok, {reinterpret_cast<const char *>(data), size});
  return 0;
}
