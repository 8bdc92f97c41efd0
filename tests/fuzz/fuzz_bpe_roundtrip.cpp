// Encode/decode of arbitrary bytes with the test fixtures' GPT-2 BPE
// (tests/fixtures/bpe): decode(encode(x)) == x, and vocab.json + merges.txt
// encode as the same model's tokenizer.json does.
#include "tests/fuzz/bpe_fuzz_util.h"

using namespace ptdp_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const auto from_files = ptdp::Gpt2BpeTokenizer::from_vocab_merges(
      PTDP_FUZZ_DATA_DIR "/bpe/vocab.json", PTDP_FUZZ_DATA_DIR "/bpe/merges.txt");
  static const auto from_json =
      ptdp::Gpt2BpeTokenizer::from_tokenizer_json(PTDP_FUZZ_DATA_DIR "/bpe/tokenizer.json");
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  const auto a = check_round_trip(*from_files, text);
  const auto b = check_round_trip(*from_json, text);
  check(a == b, "vocab.json + merges.txt and tokenizer.json encode differently");
  return 0;
}
