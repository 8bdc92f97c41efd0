// GPT-2's byte-level BPE against Hugging Face's tokenizers: the ids of a few
// hundred KB of text (fortunes and hand-written Unicode) and of its lines,
// made by tests/fixtures/bpe/make_bpe_fixtures.py, must match exactly, from
// vocab.json + merges.txt and from tokenizer.json; decode inverts encode; bad
// files and bad specs are refused naming what is wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/core/status.h"
#include "engine/data/bpe_tokenizer.h"
#include "engine/data/tokenizer.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

using namespace ptdp;

namespace {

const std::string kDir = std::string(PTDP_TEST_DATA_DIR) + "/bpe/";

TokenizerSpec vocab_merges(const std::string &dir = kDir) {
  TokenizerSpec s;
  s.type = "GPT2BPETokenizer";
  s.vocab_file = dir + "vocab.json";
  s.merge_file = dir + "merges.txt";
  return s;
}

TokenizerSpec hf_json(const std::string &path = kDir + "tokenizer.json") {
  TokenizerSpec s;
  s.type = "GPT2BPETokenizer";
  s.tokenizer_file = path;
  return s;
}

std::vector<int32_t> read_ids(const std::string &path) {
  const std::string b = read_file(path);
  std::vector<int32_t> ids(b.size() / 4);
  std::memcpy(ids.data(), b.data(), ids.size() * 4);  // little-endian, as this machine
  return ids;
}

std::vector<std::string> split_lines(const std::string &text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    out.push_back(text.substr(start, nl - start));
  out.push_back(text.substr(start));
  return out;
}

std::string decode(const Tokenizer &t, const std::vector<int32_t> &ids) {
  return t.decode(ids.data(), ids.size());
}

// The first difference, for a readable failure.
void expect_same_ids(const std::vector<int32_t> &want, const std::vector<int32_t> &got,
                     const std::string &what) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) i++;
  EXPECT_TRUE(i == want.size() && i == got.size())
      << what << ": ids differ at " << i << " (want " << want.size() << " ids, got " << got.size()
      << ")"
      << (i < want.size() && i < got.size()
              ? ": want " + std::to_string(want[i]) + ", got " + std::to_string(got[i])
              : std::string());
}

void check_against_fixtures(const Tokenizer &tok) {
  const std::string text = read_file(kDir + "text.txt");
  ASSERT_GT(text.size(), 100000u);
  const std::vector<int32_t> want = read_ids(kDir + "text_ids.bin");
  const std::vector<int32_t> got = tok.encode(text);
  expect_same_ids(want, got, "whole text");
  EXPECT_EQ(decode(tok, got), text);

  const std::vector<std::string> lines = split_lines(text);
  std::ifstream in(kDir + "line_ids.txt");
  int checked = 0;
  for (std::string row; std::getline(in, row);) {
    const size_t tab = row.find('\t');
    ASSERT_NE(tab, std::string::npos) << row;
    const size_t n = std::stoul(row.substr(0, tab));
    ASSERT_LT(n, lines.size());
    std::istringstream ss(row.substr(tab + 1));
    std::vector<int32_t> ids;
    for (int32_t id; ss >> id;) ids.push_back(id);
    const std::vector<int32_t> line_ids = tok.encode(lines[n]);
    expect_same_ids(ids, line_ids, "line " + std::to_string(n) + " '" + lines[n] + "'");
    EXPECT_EQ(decode(tok, line_ids), lines[n]);
    checked++;
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace

TEST(BpeTokenizer, VocabMergesMatchesHuggingFace) {
  auto tok = make_tokenizer(vocab_merges());
  EXPECT_EQ(tok->name(), "GPT2BPETokenizer");
  EXPECT_EQ(tok->vocab_size(), 3000);
  EXPECT_EQ(tok->eod(), 0);  // the trainer put the special token first
  check_against_fixtures(*tok);
}

TEST(BpeTokenizer, TokenizerJsonMatchesHuggingFace) {
  auto tok = make_tokenizer(hf_json());
  EXPECT_EQ(tok->vocab_size(), 3000);
  EXPECT_EQ(tok->eod(), 0);
  check_against_fixtures(*tok);
}

TEST(BpeTokenizer, EndOfTextInTheText) {
  // As Hugging Face's tokenizers by default: the special token is cut out
  // first and becomes its id; text around it is encoded on its own.
  auto tok = make_tokenizer(vocab_merges());
  const int32_t eot = tok->eod();
  auto ids = tok->encode("a<|endoftext|>b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], eot);
  EXPECT_EQ(ids[0], tok->encode("a")[0]);
  EXPECT_EQ(ids[2], tok->encode("b")[0]);
  EXPECT_EQ(tok->encode("<|endoftext|><|endoftext|>"), (std::vector<int32_t>{eot, eot}));
  for (const char *s : {"<|endoftext|", "<|endoftext", "|endoftext|>", "<|ENDOFTEXT|>"})
    for (int32_t id : tok->encode(s)) EXPECT_NE(id, eot) << s;
  EXPECT_EQ(decode(*tok, {eot}), "<|endoftext|>");
}

TEST(BpeTokenizer, PreTokens) {
  auto pieces = [](const std::string &s) {
    std::vector<std::string> out;
    for (size_t i = 0; i < s.size();) {
      const size_t e = bpe_pretoken_end(s, i);
      out.push_back(s.substr(i, e - i));
      i = e;
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello\n\nWorld"), (V{"Hello", "\n", "\n", "World"}));
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("a   "), (V{"a", "   "}));
  EXPECT_EQ(pieces("'S don't 'll ''s"), (V{"'", "S", " don", "'t", " '", "ll", " ''", "s"}));
  EXPECT_EQ(pieces("3.14 12345"), (V{"3", ".", "14", " 12345"}));
  EXPECT_EQ(pieces("caf\xc3\xa9!\xe4\xb8\xad"), (V{"caf\xc3\xa9", "!", "\xe4\xb8\xad"}));
  // A byte that is not UTF-8 is one "other" character.
  EXPECT_EQ(pieces("a\xff\xfe b"), (V{"a", "\xff\xfe", " b"}));
}

TEST(BpeTokenizer, DecodeInvertsEncodeOnAnyBytes) {
  auto tok = make_tokenizer(vocab_merges());
  std::mt19937 rng(7);
  for (int k = 0; k < 200; k++) {
    std::string s(rng() % 64, '\0');
    for (char &c : s) c = (char)(rng() % 4 == 0 ? rng() % 256 : " a'\n\t1.\xc3\xa9"[rng() % 10]);
    EXPECT_EQ(decode(*tok, tok->encode(s)), s);
  }
  const std::string long_word(100000, 'x');  // merged without the cache, by the heap
  EXPECT_EQ(decode(*tok, tok->encode(long_word)), long_word);
  const std::vector<int32_t> pad = {5, 2999, 3000, 50000, -1};  // the model's padding ids skip
  EXPECT_EQ(decode(*tok, pad), decode(*tok, {5, 2999}));
}

TEST(BpeTokenizer, SpecErrors) {
  TokenizerSpec s;
  s.vocab_file = kDir + "vocab.json";
  expect_error([&] { make_tokenizer(s); }, Status::invalid_config,
               "the byte tokenizer takes no files, but vocab_file is set");
  s = TokenizerSpec{};
  s.type = "GPT2BPETokenizer";
  expect_error([&] { make_tokenizer(s); }, Status::invalid_config,
               "GPT2BPETokenizer needs vocab_file + merge_file");
  s.vocab_file = kDir + "vocab.json";
  expect_error([&] { make_tokenizer(s); }, Status::invalid_config, "needs merge_file");
  s = vocab_merges();
  s.tokenizer_file = kDir + "tokenizer.json";
  expect_error([&] { make_tokenizer(s); }, Status::invalid_config, "not both");
  s.type = "gpt2";
  expect_error([&] { make_tokenizer(s); }, Status::bad_value,
               "unknown tokenizer 'gpt2'; allowed: byte, GPT2BPETokenizer, HuggingFaceTokenizer");
  expect_error([&] { make_tokenizer(vocab_merges("/no/such/dir/")); }, Status::io_error,
               "GPT2BPETokenizer: cannot open vocab file '/no/such/dir/vocab.json'");
}

TEST(BpeTokenizer, BadFiles) {
  TempDir dir("ptdp_bpe");
  const std::string d = dir.path + "/";
  const std::string vocab = read_file(kDir + "vocab.json"), merges = read_file(kDir + "merges.txt");
  auto with = [&](const std::string &v, const std::string &m) {
    write_file(d + "vocab.json", v);
    write_file(d + "merges.txt", m);
    return [&] { make_tokenizer(vocab_merges(d)); };
  };
  expect_error(with("{\"a\": 1,", merges), Status::corrupt_data, "vocab.json' is not valid JSON");
  expect_error(with("[1, 2]", merges), Status::corrupt_data, "must be a JSON object of token: id");
  expect_error(with("{\"a\": \"x\"}", merges), Status::corrupt_data, "ids are integers");
  expect_error(with("{\"a\": 1}", merges), Status::corrupt_data,
               "a byte-level vocabulary holds all 256 bytes");
  expect_error(with(vocab, merges + "Ġ zzzq\n"), Status::corrupt_data,
               "names the token 'zzzq', which is not in the vocabulary");
  expect_error(with(vocab, merges + "x q\n"), Status::corrupt_data,
               "makes 'xq', which is not in the vocabulary");
  expect_error(with(vocab, merges + "onlyone\n"), Status::corrupt_data,
               "expected two tokens separated by one space, got 'onlyone'");
  std::string no_eot = vocab;
  no_eot.replace(no_eot.find("<|endoftext|>"), 13, "<|notthis|>");
  expect_error(with(no_eot, merges), Status::corrupt_data, "has no <|endoftext|> token");

  std::string json = read_file(kDir + "tokenizer.json");
  const std::string pre = "\"add_prefix_space\": false";
  json.replace(json.find(pre), pre.size(), "\"add_prefix_space\": true");
  write_file(d + "tokenizer.json", json);
  expect_error([&] { make_tokenizer(hf_json(d + "tokenizer.json")); }, Status::corrupt_data,
               "pre_tokenizer is");
  write_file(d + "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\"}}");
  expect_error([&] { make_tokenizer(hf_json(d + "tokenizer.json")); }, Status::corrupt_data,
               "model.type is \"WordPiece\"");
}
