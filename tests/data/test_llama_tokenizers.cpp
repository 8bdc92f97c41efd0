// The LLaMA family's Hugging Face tokenizers against the ids Hugging Face's
// tokenizers 0.23.2 gives (tests/fixtures/llama_tok, made by
// tests/checkpoint/hf/make_llama_fixtures.py): a byte-level BPE set up as
// LLaMA 3's (its Split regex, ignore_merges, <|begin_of_text|> added by the
// post-processor) and a SentencePiece-style BPE with byte fallback in
// Mistral's form (Metaspace) and LLaMA 2's (Prepend + Replace normalizer),
// all on a Unicode-heavy text (accents, CJK, emoji, Arabic, combining marks,
// whitespace runs, contractions, digits).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/status.h"
#include "engine/data/tokenizer.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

using namespace ptdp;

namespace {

const std::string kDir = std::string(PTDP_TEST_DATA_DIR) + "/llama_tok/";

std::vector<int32_t> ids_of(const std::string &name) {
  const std::string b = read_file(kDir + name + "_ids.bin");
  std::vector<int32_t> ids(b.size() / 4);
  std::memcpy(ids.data(), b.data(), ids.size() * 4);
  return ids;
}

std::unique_ptr<Tokenizer> hf(const std::string &file) {
  TokenizerSpec s;
  s.type = "HuggingFaceTokenizer";
  s.tokenizer_file = file;
  return make_tokenizer(s);
}

// The whole text's ids, then where the first difference is (for a readable failure).
void expect_fixture_ids(const std::string &name) {
  SCOPED_TRACE(name);
  const auto tok = hf(kDir + name + ".json");
  const std::string text = read_file(kDir + "text.txt");
  const std::vector<int32_t> want = ids_of(name), got = tok->encode(text);
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) i++;
  EXPECT_EQ(got.size(), want.size());
  EXPECT_EQ(i, want.size()) << "first difference at id " << i << ": got "
                            << (i < got.size() ? got[i] : -1) << ", want "
                            << (i < want.size() ? want[i] : -1);
  EXPECT_EQ(tok->name(), "HuggingFaceTokenizer");
}

}  // namespace

TEST(LlamaTokenizers, Llama3MatchesHuggingFace) {
  expect_fixture_ids("llama3");
  const auto tok = hf(kDir + "llama3.json");
  EXPECT_EQ(tok->encode("")[0], 0);  // <|begin_of_text|> before every text
  EXPECT_EQ(tok->eod(), 1);          // <|end_of_text|> ends documents
  const std::vector<int32_t> ids = tok->encode("Hello, world! It's 2026.");
  EXPECT_EQ(tok->decode(ids.data() + 1, ids.size() - 1), "Hello, world! It's 2026.");
}

TEST(LlamaTokenizers, SentencePieceBpeMatchesHuggingFace) {
  expect_fixture_ids("sp_metaspace");
  expect_fixture_ids("sp_normalizer");
  const auto tok = hf(kDir + "sp_metaspace.json");
  EXPECT_EQ(tok->eod(), 2);  // </s>
  const std::vector<int32_t> ids = tok->encode("Héllo wörld, 你好 😀");
  EXPECT_EQ(ids[0], 1);  // <s>
  EXPECT_EQ(tok->decode(ids.data() + 1, ids.size() - 1), "Héllo wörld, 你好 😀");
}

// A tokenizer.json of a kind ptdp does not have is refused by name.
TEST(LlamaTokenizers, RefusesOtherKinds) {
  TempDir dir;
  auto variant = [&](const std::string &from, auto edit) {
    nlohmann::json j = nlohmann::json::parse(read_file(kDir + from + ".json"));
    edit(j);
    const std::string path = dir.path + "/t.json";
    write_file(path, j.dump());
    return path;
  };
  expect_error([&] { hf(variant("sp_metaspace", [](nlohmann::json &j) { j["model"]["type"] = "Unigram"; })); },
               Status::corrupt_data, "model.type is \"Unigram\"");
  expect_error([&] { hf(variant("sp_metaspace", [](nlohmann::json &j) { j["model"]["vocab"].erase("<0x41>"); })); },
               Status::corrupt_data, "lacks the byte token <0x41>");
  expect_error([&] {
    hf(variant("llama3", [](nlohmann::json &j) {
      j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
    }));
  }, Status::corrupt_data, "LLaMA 3's Split + ByteLevel");
  expect_error([&] {
    hf(variant("sp_normalizer", [](nlohmann::json &j) { j["normalizer"]["normalizers"][0]["prepend"] = "_"; }));
  }, Status::corrupt_data, "a Metaspace pre-tokenizer, or a normalizer Sequence");
  expect_error([&] {
    hf(variant("llama3", [](nlohmann::json &j) {
      j["post_processor"]["special_tokens"]["<|begin_of_text|>"]["ids"] = {5000};
    }));
  }, Status::corrupt_data, "adds id 5000");
  // A byte-level file with a normalizer (SentencePiece's mark) is refused for
  // what its own kind does not take, not for a SentencePiece field.
  expect_error([&] {
    hf(variant("llama3", [](nlohmann::json &j) { j["normalizer"] = {{"type", "Lowercase"}}; }));
  }, Status::corrupt_data, "(read as a byte-level BPE): tokenizer file");
  expect_error([&] {
    hf(variant("llama3", [](nlohmann::json &j) { j["normalizer"] = {{"type", "Lowercase"}}; }));
  }, Status::corrupt_data, "normalizer is {\"type\":\"Lowercase\"}; a GPT-2 byte-level BPE has none");
  TokenizerSpec s;
  s.type = "HuggingFaceTokenizer";
  expect_error([&] { make_tokenizer(s); }, Status::invalid_config, "takes tokenizer_file");
  // GPT2BPETokenizer stays GPT-2's: another kind is refused, naming the type that reads it.
  s.type = "GPT2BPETokenizer";
  s.tokenizer_file = kDir + "llama3.json";
  expect_error([&] { make_tokenizer(s); }, Status::corrupt_data, "tokenizer_type HuggingFaceTokenizer");
  // A file that is not JSON is named as the type the user gave.
  write_file(dir.path + "/garbage.json", "not json {");
  s.type = "HuggingFaceTokenizer";
  s.tokenizer_file = dir.path + "/garbage.json";
  try {
    make_tokenizer(s);
    ADD_FAILURE() << "garbage accepted";
  } catch (const Error &e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("HuggingFaceTokenizer", 0), 0u) << msg;
    EXPECT_NE(msg.find("is not valid JSON"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("GPT2BPETokenizer"), std::string::npos) << msg;
  }
}

// The SentencePiece-style tokenizer's word cache: the whole text encoded again
// with a cache that already holds its words, and on three threads each with a
// cache of its own, gives Hugging Face's ids; a cache of another tokenizer is
// refused (its words have other ids).
TEST(LlamaTokenizers, SentencePieceWordCacheKeepsTheIds) {
  const std::string text = read_file(kDir + "text.txt");
  for (const char *name : {"sp_metaspace", "sp_normalizer"}) {
    SCOPED_TRACE(name);
    const auto tok = hf(kDir + name + ".json");
    const std::vector<int32_t> want = ids_of(name);
    auto cache = tok->new_cache();
    EXPECT_EQ(tok->encode_with(text, *cache), want);
    EXPECT_EQ(tok->encode_with(text, *cache), want);  // every word from the cache
    EXPECT_EQ(tok->encode(text), want);
    std::vector<std::vector<int32_t>> got(3);
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; t++)
      threads.emplace_back([&, t] {
        auto own = tok->new_cache();
        got[t] = tok->encode_with(text, *own);
      });
    for (auto &th : threads) th.join();
    for (const auto &g : got) EXPECT_EQ(g, want);
    const auto other = hf(kDir + name + ".json");
    expect_error([&] { other->encode_with("x", *cache); }, Status::invalid_argument,
                 "not from this tokenizer's new_cache()");
  }
}
