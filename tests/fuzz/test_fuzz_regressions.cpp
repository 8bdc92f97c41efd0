// One test per bug the fuzzers (tests/fuzz) found, on the input that found it
// (tests/fuzz/regressions/<fuzzer>/): each is now a ptdp::Error naming what is
// wrong, where it was undefined behaviour or a wrong decode.
#include <gtest/gtest.h>

#include <climits>
#include <nlohmann/json.hpp>

#include "checkpoints/manifest.h"
#include "checkpoints/safetensors_import.h"
#include "engine/data/bpe_tokenizer.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

using namespace ptdp;

namespace {

std::string regression(const std::string &fuzzer, const std::string &name) {
  return read_file(std::string(PTDP_FUZZ_DIR) + "/regressions/" + fuzzer + "/" + name);
}

void expect_manifest_error(const std::string &name, const std::string &text) {
  expect_error([&] { Manifest::parse(regression("fuzz_manifest", name), "m"); },
               Status::corrupt_data, text);
}

}  // namespace

// Signed overflow in ManifestDataset::numel() (shape [2^62, 4]).
TEST(FuzzRegressions, ManifestShapeTooLarge) {
  expect_manifest_error("shape_numel_overflows", "has a negative or too large dimension");
}

// Signed overflow in offset + count (offset INT64_MAX, count 1).
TEST(FuzzRegressions, ManifestBlockOffsetOverflow) {
  expect_manifest_error("block_offset_plus_count_overflows", "a block lies outside");
}

// A float read as an int or int64 (1e30, 1e300): an out-of-range cast.
TEST(FuzzRegressions, ManifestFloatForInteger) {
  expect_manifest_error("int_field_is_1e30", "field 'hidden_size' has the wrong type (1e+30)");
  expect_manifest_error("iteration_is_1e300", "field 'iteration' has the wrong type");
}

// 4 x hidden_size overflowed int in GptConfig::ffn() (hidden_size 2^30).
TEST(FuzzRegressions, GptConfigTooLarge) {
  expect_manifest_error("hidden_size_2_30_ffn_overflows", "its 4 x hidden_size MLP");
  GptConfig g;
  g.hidden_size = 1 << 30;
  g.num_attention_heads = 1;
  expect_error([&] { g.validate(); }, Status::invalid_config, "does not fit in 32 bits");
  g = GptConfig{};
  g.vocab_size = INT_MAX - 10;
  expect_error([&] { g.validate(2); }, Status::invalid_config, "padded to a multiple of 256");
}

// The same overflow through a GPT2Config: n_embd 2^30, and n_inner compared
// with 4 x n_embd in int.
TEST(FuzzRegressions, SafetensorsConfigTooLarge) {
  for (const auto &[name, text] :
       {std::pair<const char *, const char *>{"n_embd_2_30", "does not fit in 32 bits"},
        {"n_inner_is_4_n_embd_overflow", "hidden_size 1073741824 is outside [1, 1048576]"}}) {
    const std::string bytes = regression("fuzz_safetensors", name);
    expect_error(
        [&] {
          check_safetensors(reinterpret_cast<const unsigned char *>(bytes.data()), bytes.size(),
                            name);
        },
        Status::invalid_config, text);
  }
  const std::string seed =
      read_file(std::string(PTDP_FUZZ_DIR) + "/corpus/fuzz_safetensors/tiny_f32");
  const GptConfig cfg =
      check_safetensors(reinterpret_cast<const unsigned char *>(seed.data()), seed.size(), "seed");
  EXPECT_EQ(cfg.hidden_size, 4);
}

// Two vocabulary tokens with one id: one decoded as the other.
TEST(FuzzRegressions, BpeTwoTokensOneId) {
  const std::string input = regression("fuzz_bpe_vocab_merges", "two_tokens_one_id");
  const size_t n = (unsigned char)input[0] | (unsigned char)input[1] << 8;  // split2()
  TempDir dir;
  write_file(dir.path + "/vocab.json", input.substr(2, n));
  write_file(dir.path + "/merges.txt", input.substr(2 + n));
  expect_error(
      [&] {
        Gpt2BpeTokenizer::from_vocab_merges(dir.path + "/vocab.json", dir.path + "/merges.txt");
      },
      Status::corrupt_data, "tokens 'a' and 'ab' have the same id 97");
}

// An added token given a vocabulary token's id: that token decoded as it.
TEST(FuzzRegressions, BpeAddedTokenTakesVocabId) {
  TempDir dir;
  const std::string path = dir.path + "/tokenizer.json";
  write_file(path, regression("fuzz_bpe_tokenizer_json", "added_token_takes_a_vocab_id"));
  expect_error([&] { Gpt2BpeTokenizer::from_tokenizer_json(path); }, Status::corrupt_data,
               "added token '<|pad|>' has id");
}
