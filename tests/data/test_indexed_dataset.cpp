// Megatron's indexed dataset (PREFIX.bin + PREFIX.idx): the writer's layout,
// reading any layout Megatron's reader takes, every damaged file refused with
// a message naming it, format recognition, data_path blends, and training on
// indexed data and blends under several layouts (ARCHITECTURE §3).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <set>

#include "engine/core/status.h"
#include "engine/data/blend.h"
#include "engine/data/corpus.h"
#include "engine/data/dataset.h"
#include "engine/data/indexed_dataset.h"
#include "engine/data/indexed_tokenize.h"
#include "engine/data/tokenizer.h"
#include "engine/train/trainer.h"
#include "tests/support/config_options.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trained_run.h"

namespace fs = std::filesystem;
using namespace ptdp;

namespace {

// An index laid out by hand from the format's description (not by the
// writer), so the reader is checked against the layout itself.
struct RawIndex {
  uint8_t dtype = 8;
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> docs{0};
  uint64_t version = 1;
  std::string bytes() const {
    std::string s("MMIDIDX\0\0", 9);
    auto put = [&s](const void *p, size_t n) { s.append(static_cast<const char *>(p), n); };
    put(&version, 8);
    put(&dtype, 1);
    uint64_t n = lengths.size(), d = docs.size();
    put(&n, 8);
    put(&d, 8);
    for (int32_t v : lengths) put(&v, 4);
    for (int64_t v : pointers) put(&v, 8);
    for (int64_t v : docs) put(&v, 8);
    return s;
  }
};

std::string u16(std::initializer_list<uint16_t> v) {
  std::string s;
  for (uint16_t x : v) s.append(reinterpret_cast<const char *>(&x), 2);
  return s;
}

std::vector<int32_t> read_all(const TokenSource &s) {
  std::vector<int32_t> out(s.num_tokens());
  if (!out.empty()) s.read(0, out.size(), out.data());
  return out;
}

// Documents of the writer's test dataset: an empty document, one of two
// sequences, one with an empty sequence dropped.
std::string write_sample(const std::string &prefix) {
  IndexedDatasetWriter w(prefix, 300, {});
  w.add_document({{1, 2, 3}});
  w.add_document({});
  w.add_document({{4, 5}, {299}});
  w.add_document({{}, {7}});
  w.finish();
  return prefix;
}

}  // namespace

TEST(IndexedDataset, WriterLayoutIsMegatrons) {
  TempDir dir;
  const std::string p = write_sample(dir.path + "/ds");
  const std::string idx = read_file(p + ".idx"), bin = read_file(p + ".bin");
  // Sequences: {1,2,3} {4,5} {299} {7}; documents: [0, 1, 1, 3, 4].
  RawIndex want;
  want.dtype = 8;  // uint16: vocabulary of 300 < 65500
  want.lengths = {3, 2, 1, 1};
  want.pointers = {0, 6, 10, 12};
  want.docs = {0, 1, 1, 3, 4};
  EXPECT_EQ(idx, want.bytes());
  EXPECT_EQ(bin, u16({1, 2, 3, 4, 5, 299, 7}));
  EXPECT_FALSE(fs::exists(p + ".bin.tmp")) << "temporaries left";
  for (const auto &e : fs::directory_iterator(dir.path))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();

  IndexedDataset ds(p);
  EXPECT_EQ(ds.num_docs(), 4u);
  EXPECT_EQ(ds.num_sequences(), 4u);
  EXPECT_EQ(ds.num_tokens(), 7u);
  EXPECT_EQ(ds.vocab_size(), 300);
  EXPECT_EQ(read_all(ds), (std::vector<int32_t>{1, 2, 3, 4, 5, 299, 7}));
  std::vector<uint64_t> offs;
  for (uint64_t d = 0; d <= ds.num_docs(); d++) offs.push_back(ds.doc_offset(d));
  EXPECT_EQ(offs, (std::vector<uint64_t>{0, 3, 3, 6, 7}));
}

TEST(IndexedDataset, LargeVocabularyUsesInt32) {
  TempDir dir;
  IndexedDatasetWriter w(dir.path + "/wide", 70000, {});
  w.add_document({{69999, 0, 65535, 65536}});
  w.finish();
  EXPECT_EQ(read_file(dir.path + "/wide.idx")[17], 4);  // int32
  IndexedDataset ds(dir.path + "/wide");
  EXPECT_EQ(ds.dtype_code(), 4);
  EXPECT_EQ(read_all(ds), (std::vector<int32_t>{69999, 0, 65535, 65536}));
  EXPECT_EQ(indexed_dtype_for_vocab(65499), 8);
  EXPECT_EQ(indexed_dtype_for_vocab(65500), 4);
}

TEST(IndexedDataset, WriterRefusesBadTokensAndLeavesNothing) {
  TempDir dir;
  {
    IndexedDatasetWriter w(dir.path + "/bad", 10, {});
    expect_error([&] { w.add_document({{1, 10}}); }, Status::invalid_argument,
                 "outside the vocabulary [0, 10)");
  }
  EXPECT_TRUE(fs::is_empty(dir.path));
  write_file(dir.path + "/in.bin", "x");
  expect_error([&] { IndexedDatasetWriter w(dir.path + "/in", 10, {dir.path + "/in.bin"}); },
               Status::invalid_argument, "refusing to overwrite an input");
  EXPECT_EQ(read_file(dir.path + "/in.bin"), "x");
}

// Every integer dtype Megatron's DType enum has; an index whose pointers
// disagree with its lengths and dtype is refused, naming the first sequence.
TEST(IndexedDataset, ReadsEveryIntegerDtypeAndRefusesPointersOffTheLengths) {
  TempDir dir;
  struct Case { uint8_t code; int size; };
  for (Case c : {Case{1, 1}, Case{2, 1}, Case{3, 2}, Case{4, 4}, Case{5, 8}, Case{8, 2}}) {
    const std::string p = dir.path + "/d" + std::to_string(c.code);
    std::string bin;
    for (int v : {5, 6, 7, 100}) {
      int64_t x = v;
      bin.append(reinterpret_cast<const char *>(&x), (size_t)c.size);  // little-endian low bytes
    }
    RawIndex ri;
    ri.dtype = c.code;
    ri.lengths = {3, 1};
    ri.pointers = {0, 3 * c.size};
    ri.docs = {0, 2};
    write_file(p + ".idx", ri.bytes());
    write_file(p + ".bin", bin);
    IndexedDataset ds(p);
    EXPECT_EQ(read_all(ds), (std::vector<int32_t>{5, 6, 7, 100})) << "dtype " << (int)c.code;
    EXPECT_EQ(ds.vocab_size(), 101);
  }
  // Sequences stored in reverse order with a gap (Megatron's reader would
  // follow the pointers; its builder never writes this): refused.
  const std::string p = dir.path + "/scattered";
  write_file(p + ".bin", u16({9, 9, 30, 31, 32, 9, 10, 11}));
  RawIndex ri;
  ri.lengths = {2, 0, 3};
  ri.pointers = {12, 4, 4};
  ri.docs = {0, 1, 3};
  write_file(p + ".idx", ri.bytes());
  expect_error([&] { IndexedDataset ds(p); }, Status::corrupt_data,
               "sequence 0 starts at byte 12 but the 0 tokens of uint16 before it end at byte 0");
  // Overlapping (a pointer repeated) and misaligned (half a token in).
  for (auto [ptrs, want] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {{0, 0, 4}, "sequence 1 starts at byte 0 but the 2 tokens of uint16 before it end at byte 4"},
           {{0, 5, 5}, "sequence 1 starts at byte 5 but the 2 tokens of uint16 before it end at byte 4"}}) {
    write_file(p + ".bin", u16({1, 2, 3, 4, 5}));
    RawIndex r2;
    r2.lengths = {2, 0, 3};
    r2.pointers = ptrs;
    r2.docs = {0, 1, 3};
    write_file(p + ".idx", r2.bytes());
    expect_error([&] { IndexedDataset ds(p); }, Status::corrupt_data, want);
  }
  // A multimodal index (one mode byte per sequence after the document index).
  const std::string mm = dir.path + "/multimodal";
  write_file(mm + ".bin", u16({1, 2, 3}));
  RawIndex m;
  m.lengths = {2, 1};
  m.pointers = {0, 4};
  m.docs = {0, 2};
  write_file(mm + ".idx", m.bytes() + std::string("\0\1", 2));
  EXPECT_EQ(read_all(IndexedDataset(mm)), (std::vector<int32_t>{1, 2, 3}));
}

TEST(IndexedDataset, RefusesDamagedFilesNamingThem) {
  TempDir dir;
  const std::string good = write_sample(dir.path + "/good");
  const std::string idx0 = read_file(good + ".idx"), bin0 = read_file(good + ".bin");
  int n = 0;
  // Writes a variant of the good dataset and expects its error.
  auto check = [&](const std::string &idx, const std::string &bin, Status code,
                   const std::string &text, const char *file) {
    const std::string p = dir.path + "/case" + std::to_string(n++);
    write_file(p + ".idx", idx);
    write_file(p + ".bin", bin);
    SCOPED_TRACE(text);
    expect_error([&] { IndexedDataset d(p); }, code, text);
    expect_error([&] { IndexedDataset d(p); }, code, p + file);  // the file is named
  };
  auto patched = [&](size_t at, const void *v, size_t len) {
    std::string s = idx0;
    std::memcpy(&s[at], v, len);
    return s;
  };
  const Status bad = Status::corrupt_data;
  check("XXIDIDX\0\0" + idx0.substr(9), bin0, bad, "bad magic", ".idx");
  check("", bin0, bad, "bad magic", ".idx");
  uint64_t v2 = 2;
  check(patched(9, &v2, 8), bin0, bad, "has version 2; this build reads version 1", ".idx");
  uint8_t f64 = 6, nine = 9;
  check(patched(17, &f64, 1), bin0, bad, "dtype code 6 (float64), which is no token type", ".idx");
  check(patched(17, &nine, 1), bin0, bad, "dtype code 9 (unknown)", ".idx");
  check(idx0.substr(0, 20), bin0, bad, "shorter than its 34-byte header: truncated", ".idx");
  check(idx0.substr(0, idx0.size() - 8), bin0, bad, ": truncated", ".idx");
  check(idx0 + "abc", bin0, bad, "3 trailing bytes", ".idx");
  uint64_t huge = 1ull << 60;
  check(patched(18, &huge, 8), bin0, bad, "more than its", ".idx");
  const size_t docs_at = 34 + 4 * 12;  // 4 sequences
  int64_t one = 1, nine64 = 9, minus = -1;
  check(patched(docs_at, &one, 8), bin0, bad, "document index starts at 1", ".idx");
  check(patched(docs_at + 8, &nine64, 8), bin0, bad, "document index decreases at entry 2", ".idx");
  int64_t three = 3;
  check(patched(docs_at + 32, &three, 8), bin0, bad, "ends at sequence 3 but there are 4", ".idx");
  int32_t neg = -3;
  check(patched(34, &neg, 4), bin0, bad, "sequence 0 has a negative length -3", ".idx");
  check(patched(34 + 16, &minus, 8), bin0, bad, "sequence 0 has a negative pointer -1", ".idx");
  check(idx0, bin0.substr(0, bin0.size() - 2), bad, "the .bin is truncated", ".bin");
  check(idx0, bin0 + "zz", bad, "the .bin has trailing bytes", ".bin");
  int64_t far = 1000;  // sequence 3 pointed past the end: off the lengths
  check(patched(34 + 16 + 24, &far, 8), bin0, bad,
        "sequence 3 starts at byte 1000 but the 6 tokens of uint16 before it end at byte 12", ".idx");
  // A negative token in a signed dtype, and an int64 id beyond int32.
  uint8_t i16 = 3;
  std::string negbin = bin0;
  negbin[0] = (char)0xff, negbin[1] = (char)0xff;
  check(patched(17, &i16, 1), negbin, bad, "token -1 at position 0 is negative", "");
  {
    RawIndex ri;
    ri.dtype = 5;
    ri.lengths = {1};
    ri.pointers = {0};
    ri.docs = {0, 1};
    int64_t big = 1ll << 40;
    check(ri.bytes(), std::string(reinterpret_cast<const char *>(&big), 8), bad,
          "is not a valid token id", "");
  }
  // Missing files and directories: I/O errors naming what is missing.
  write_file(dir.path + "/onlyidx.idx", idx0);
  expect_error([&] { IndexedDataset d(dir.path + "/onlyidx"); }, Status::io_error,
               "cannot open its data file '" + dir.path + "/onlyidx.bin'");
  expect_error([&] { IndexedDataset d(dir.path + "/nothing"); }, Status::io_error,
               "cannot open its index '" + dir.path + "/nothing.idx'");
  fs::create_directories(dir.path + "/dir.idx");
  write_file(dir.path + "/dir.bin", bin0);
  expect_error([&] { IndexedDataset d(dir.path + "/dir"); }, Status::io_error, "is a directory");
}

// Random damage to a valid index or data file: opening either fails with a
// ptdp::Error or gives a dataset whose every token can be read (ASan checks
// that nothing is read out of bounds in the sanitizer build).
TEST(IndexedDataset, RandomDamageNeverCrashes) {
  TempDir dir;
  IndexedDatasetWriter w(dir.path + "/src", 1000, {});
  std::mt19937 rng(7);
  for (int d = 0; d < 20; d++) {
    std::vector<std::vector<int32_t>> seqs(1 + rng() % 3);
    for (auto &s : seqs)
      for (int k = (int)(rng() % 6); k > 0; k--) s.push_back((int32_t)(rng() % 1000));
    w.add_document(seqs);
  }
  w.finish();
  const std::string idx0 = read_file(dir.path + "/src.idx"), bin0 = read_file(dir.path + "/src.bin");
  int opened = 0, refused = 0;
  for (int trial = 0; trial < 3000; trial++) {
    std::string idx = idx0, bin = bin0;
    std::string &victim = trial % 4 == 3 ? bin : idx;
    const int kind = (int)(rng() % 3);
    if (kind == 0 && !victim.empty()) victim.resize(rng() % victim.size());  // truncate
    for (int k = 0; k < 1 + (int)(rng() % 3) && !victim.empty(); k++)        // flip bytes
      victim[rng() % victim.size()] = (char)(rng() % 256);
    if (kind == 2) victim += std::string(rng() % 16, (char)(rng() % 256));  // append
    write_file(dir.path + "/t.idx", idx);
    write_file(dir.path + "/t.bin", bin);
    try {
      IndexedDataset ds(dir.path + "/t");
      std::vector<int32_t> all = read_all(ds);
      for (int32_t t : all) ASSERT_TRUE(t >= 0 && t < ds.vocab_size());
      for (uint64_t d = 0; d < ds.num_docs(); d++) ASSERT_LE(ds.doc_offset(d), ds.doc_offset(d + 1));
      ASSERT_EQ(ds.doc_offset(ds.num_docs()), ds.num_tokens());
      opened++;
    } catch (const Error &e) {
      ASSERT_TRUE(e.code() == Status::corrupt_data || e.code() == Status::io_error) << e.what();
      refused++;
    }
  }
  EXPECT_GT(refused, 1000);
  EXPECT_GT(opened, 10);  // flips of token bytes keep a valid file
}

TEST(TokenSource, RecognisesEachFormatByWhatIsOnDisk) {
  TempDir dir;
  const std::string m = write_sample(dir.path + "/mega");
  write_token_dataset(dir.path + "/own.ptdp", {{1, 2, 0}}, 3);
  EXPECT_STREQ(open_token_source(m)->format_name(), "megatron");
  EXPECT_STREQ(open_token_source(m + ".idx")->format_name(), "megatron");
  EXPECT_STREQ(open_token_source(m + ".bin")->format_name(), "megatron");
  EXPECT_EQ(open_token_source(m + ".idx")->path(), m);
  EXPECT_STREQ(open_token_source(dir.path + "/own.ptdp")->format_name(), "ptdp");
  expect_error([&] { open_token_source(dir.path + "/none"); }, Status::io_error,
               "nor is there a Megatron dataset '" + dir.path + "/none.bin'");
  expect_error([&] { open_token_source(dir.path); }, Status::io_error, "is a directory");
  write_file(dir.path + "/junk", "just some text, long enough for a header..........................");
  expect_error([&] { open_token_source(dir.path + "/junk"); }, Status::corrupt_data,
               "nor a Megatron index");
  fs::copy_file(m + ".idx", dir.path + "/misnamed");
  expect_error([&] { open_token_source(dir.path + "/misnamed"); }, Status::invalid_config,
               "is a Megatron index but is not named PREFIX.idx");
}

TEST(TokenSource, VocabularyCheckSaysWhatToChange) {
  TempDir dir;
  IndexedDatasetWriter w(dir.path + "/g", 50257, {});
  w.add_document({{50256, 10}});
  w.finish();
  auto src = open_token_source(dir.path + "/g");
  EXPECT_EQ(src->vocab_size(), 50257);
  expect_error([&] { check_source_vocab(*src, 257, "byte", 257, 0); }, Status::invalid_config,
               "holds token ids up to 50256 but the model's vocabulary has 257 ids");
  check_source_vocab(*src, 50257, "byte", 257, 0);  // a larger vocab_size is the way out
}

// A ptdp dataset records its tokenizer's vocabulary: byte tokens under GPT-2's
// BPE (ids that fit the model but mean other tokens) are refused, as is the reverse.
TEST(TokenSource, DatasetOfAnotherTokenizerIsRefused) {
  TempDir dir;
  write_token_dataset(dir.path + "/bytes.ptdp", {{104, 105, 256}}, 257);
  auto bytes = open_token_source(dir.path + "/bytes.ptdp");
  expect_error([&] { check_source_vocab(*bytes, 50304, "GPT2BPETokenizer", 50257, 0); },
               Status::invalid_config,
               "was tokenized with a vocabulary of 257 (the byte tokenizer's) but this run's "
               "'GPT2BPETokenizer' tokenizer has 50257");
  check_source_vocab(*bytes, 384, "byte", 257, 0);  // its own tokenizer, a padded model vocabulary
  write_token_dataset(dir.path + "/bpe.ptdp", {{15496, 50256}}, 50257);
  auto bpe = open_token_source(dir.path + "/bpe.ptdp");
  expect_error([&] { check_source_vocab(*bpe, 257, "byte", 257, 0); }, Status::invalid_config,
               "has vocabulary size 50257 but the 'byte' tokenizer (and so the model) has 257");
  // Of one size, another vocabulary (a shuffled vocab.json: the ids name other
  // tokens, the end of document another id): told by the recorded fingerprint.
  const ByteTokenizer byte;
  const uint64_t fp = vocabulary_fingerprint(byte);
  EXPECT_EQ(fp, vocabulary_fingerprint(ByteTokenizer()));
  write_token_dataset(dir.path + "/marked.ptdp", {{104, 256}}, 257, fp);
  auto marked = open_token_source(dir.path + "/marked.ptdp");
  EXPECT_EQ(marked->vocabulary(), fp);
  check_source_vocab(*marked, 384, "byte", 257, fp);
  check_source_vocab(*marked, 384, "byte", 257, 0);  // (a caller that knows none)
  expect_error([&] { check_source_vocab(*marked, 384, "GPT2BPETokenizer", 257, fp ^ 1); },
               Status::invalid_config, "was tokenized with another vocabulary than this run's");
  EXPECT_EQ(bytes->vocabulary(), 0u);  // (written without one: not compared)
}

TEST(DataPath, ParsesOnePathOrAWeightedBlend) {
  DataPathSpec one = parse_data_path("data/x.ptdp");
  EXPECT_EQ(one.paths, (std::vector<std::string>{"data/x.ptdp"}));
  DataPathSpec spaced = parse_data_path("my data/x");  // no weight first: one path
  EXPECT_EQ(spaced.paths, (std::vector<std::string>{"my data/x"}));
  DataPathSpec b = parse_data_path(" 30 A\t70  B ");
  EXPECT_EQ(b.paths, (std::vector<std::string>{"A", "B"}));
  ASSERT_EQ(b.weights.size(), 2u);
  EXPECT_DOUBLE_EQ(b.weights[0], 0.3);
  EXPECT_DOUBLE_EQ(b.weights[1], 0.7);
  expect_error([] { parse_data_path("0.3 A 0.7"); }, Status::invalid_config, "odd number");
  expect_error([] { parse_data_path("0.3 A B C"); }, Status::invalid_config, "'B' (item 3) is not a weight");
  expect_error([] { parse_data_path("-1 A 2 B"); }, Status::invalid_config, "is negative");
  expect_error([] { parse_data_path("0 A 0 B"); }, Status::invalid_config,
               "sum to 0; they must sum to a positive number");
  expect_error([] { parse_data_path("  "); }, Status::invalid_config, "data_path is not set");
  // A weight written as a number but not finite (inf, nan, past a double's
  // range) is named as such, not read as part of a path with spaces.
  for (const char *bad : {"1e309 A 1 B", "nan A", "1 A inf B"})
    expect_error([&] { parse_data_path(bad); }, Status::invalid_config, "is not a finite number");
  // Nor is a hex weight a path's first word (the Lua side read it as a weight).
  expect_error([] { parse_data_path("0x10 A 1 B"); }, Status::invalid_config,
               "the weight '0x10' (item 1) is not a decimal number");
  expect_error([] { parse_data_path("1 A 0x2 B"); }, Status::invalid_config, "'0x2' (item 3) is not a weight");
  // Finite weights whose sum passes the largest double are still relative.
  DataPathSpec big = parse_data_path("1e308 A 1e308 B");
  EXPECT_EQ(big.weights, (std::vector<double>{0.5, 0.5}));
}

namespace {

// A sampler whose sample k is {part, k, ...}: shows which part served what.
struct Tagged final : Sampler {
  int part;
  explicit Tagged(int p) : part(p) {}
  uint64_t num_samples() const override { return 10; }
  uint64_t num_tokens() const override { return 100; }
  void get(uint64_t index, int32_t *out) override {
    out[0] = part;
    out[1] = (int32_t)index;
  }
  std::vector<double> unigram() const override { return {0.0, 0.0}; }
};

BlendedSampler tagged_blend(const std::vector<double> &w) {
  std::vector<std::unique_ptr<Sampler>> parts;
  for (size_t i = 0; i < w.size(); i++) parts.push_back(std::make_unique<Tagged>((int)i));
  return BlendedSampler(std::move(parts), w);
}

}  // namespace

// After every prefix of N samples, part d has given w_d * N samples to within
// one, in its own order 0, 1, 2, ...; a part of weight 0 gives none.
TEST(Blend, CountsFollowTheWeights) {
  for (const std::vector<double> &w :
       {std::vector<double>{0.3, 0.7}, {1, 2, 5}, {0.5, 0, 0.5}, {0.01, 0.99}, {1, 1, 1, 1, 1, 1, 1}}) {
    BlendedSampler s = tagged_blend(w);
    double total = 0;
    for (double x : w) total += x;
    std::vector<uint64_t> count(w.size(), 0);
    int32_t out[2];
    for (uint64_t i = 0; i < 20000; i++) {
      s.get(i, out);
      ASSERT_EQ((uint64_t)out[1], count[(size_t)out[0]]) << "part " << out[0] << " out of order";
      count[(size_t)out[0]]++;
      for (size_t d = 0; d < w.size(); d++)
        ASSERT_LE(std::abs((double)count[d] - w[d] / total * (double)(i + 1)), 1.0)
            << "part " << d << " after " << i + 1 << " samples";
    }
    for (size_t d = 0; d < w.size(); d++)
      if (w[d] == 0) {
        EXPECT_EQ(count[d], 0u);
      }
  }
}

// Sample i is a function of i alone: any order of access, from a fresh
// sampler or one that has been elsewhere, gives the same answer.
TEST(Blend, RandomAccessEqualsSequential) {
  BlendedSampler seq = tagged_blend({0.25, 0.6, 0.15});
  std::vector<std::pair<int32_t, int32_t>> want;
  int32_t out[2];
  for (uint64_t i = 0; i < 30000; i++) {
    seq.get(i, out);
    want.push_back({out[0], out[1]});
  }
  BlendedSampler jump = tagged_blend({0.25, 0.6, 0.15});
  std::mt19937 rng(3);
  for (int k = 0; k < 3000; k++) {
    const uint64_t i = rng() % want.size();
    jump.get(i, out);
    ASSERT_EQ(std::make_pair(out[0], out[1]), want[i]) << "sample " << i;
  }
  BlendedSampler far = tagged_blend({0.25, 0.6, 0.15});
  far.get(29999, out);
  EXPECT_EQ(std::make_pair(out[0], out[1]), want[29999]);
}

TEST(IndexedTokenize, JsonLinesAsMegatronsPreprocessing) {
  TempDir dir;
  const std::string in = dir.path + "/in.jsonl";
  write_file(in,
             "{\"text\": \"ab\", \"title\": \"T\"}\n"
             "\n"  // a blank line is passed over
             "{\"title\": \"\", \"text\": [\"c\", \"\", \"\\u00e9\"]}\r\n"
             "{\"text\": \"\", \"title\": \"x\"}\n");
  IndexedTokenizeOptions o;
  o.output_prefix = dir.path + "/out";
  o.json_keys = {"text", "title"};
  o.append_eod = true;
  ByteTokenizer tok;
  std::vector<IndexedOutput> out = build_indexed_dataset({in}, o, tok);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].prefix, dir.path + "/out_text_document");
  EXPECT_EQ(out[1].prefix, dir.path + "/out_title_document");
  EXPECT_EQ(out[0].num_docs, 3u);
  IndexedDataset text(out[0].prefix);
  // "ab"+EOD | "c", "é" (2 bytes)+EOD as two sequences | empty: no EOD
  EXPECT_EQ(read_all(text), (std::vector<int32_t>{'a', 'b', 256, 'c', 0xc3, 0xa9, 256}));
  EXPECT_EQ(text.num_sequences(), 3u);
  EXPECT_EQ(text.doc_offset(2), 7u);
  EXPECT_EQ(text.doc_offset(3), 7u);
  IndexedDataset title(out[1].prefix);
  EXPECT_EQ(read_all(title), (std::vector<int32_t>{'T', 256, 'x', 256}));
  // Without append_eod no EOD is added (Megatron's default).
  o.append_eod = false;
  o.json_keys = {"text"};
  o.output_prefix = dir.path + "/plain";
  build_indexed_dataset({in}, o, tok);
  EXPECT_EQ(read_all(IndexedDataset(dir.path + "/plain_text_document")),
            (std::vector<int32_t>{'a', 'b', 'c', 0xc3, 0xa9}));
}

// Two keys' datasets are two outputs: where links make them one file, the
// command is refused and the first key's dataset kept.
TEST(IndexedTokenize, TwoKeysNeverWriteOneFile) {
  TempDir dir;
  const std::string in = dir.path + "/in.jsonl";
  write_file(in, "{\"text\": \"ab\", \"title\": \"T\"}\n");
  IndexedTokenizeOptions o;
  o.output_prefix = dir.path + "/out";
  o.json_keys = {"text", "title"};
  ByteTokenizer tok;
  const std::vector<IndexedOutput> out = build_indexed_dataset({in}, o, tok);
  const std::string kept = read_file(out[0].prefix + ".bin");
  for (const char *ext : {".bin", ".idx"}) {
    fs::remove(out[1].prefix + ext);
    fs::create_symlink(out[0].prefix + ext, out[1].prefix + ext);
  }
  expect_error([&] { build_indexed_dataset({in}, o, tok); }, Status::invalid_argument,
               "two outputs cannot share one file");
  EXPECT_EQ(read_file(out[0].prefix + ".bin"), kept);
  // A key names its files beside the prefix: no '/' to lead them elsewhere.
  expect_error([] { parse_indexed_tokenize_options({"output_prefix=p", "json_keys=text,x/../p_text"}); },
               Status::bad_value, "json_keys entry 'x/../p_text' holds a '/'");
}

// Through a link, a dataset's two files stay one pair: a .idx linked to
// another dataset's index (its .bin a file of its own) would replace that
// index and pair it with the other's tokens.
TEST(IndexedTokenize, APairIsOnePairThroughLinks) {
  TempDir dir;
  const std::string in = dir.path + "/in.jsonl";
  write_file(in, "{\"text\": \"ab\"}\n");
  IndexedTokenizeOptions o;
  o.output_prefix = dir.path + "/a";
  o.json_keys = {"text"};
  ByteTokenizer tok;
  const std::string a = build_indexed_dataset({in}, o, tok)[0].prefix;
  const std::string a_idx = read_file(a + ".idx");
  o.output_prefix = dir.path + "/b";
  const std::string b = dir.path + "/b_text_document";
  fs::copy_file(a + ".bin", b + ".bin");
  fs::create_symlink(a + ".idx", b + ".idx");
  write_file(in, "{\"text\": \"something longer\"}\n");
  expect_error([&] { build_indexed_dataset({in}, o, tok); }, Status::invalid_argument,
               "a dataset's two files are one pair, X.bin beside X.idx");
  EXPECT_EQ(read_file(a + ".idx"), a_idx);
  // Nor a link to a file without the pair's extension ('Z' beside 'Z.idx').
  fs::remove(b + ".idx");
  write_file(dir.path + "/Z", "");
  fs::rename(a + ".idx", dir.path + "/Z.idx");
  fs::create_symlink(dir.path + "/Z", b + ".bin.z");
  fs::remove(b + ".bin");
  fs::rename(b + ".bin.z", b + ".bin");
  fs::create_symlink(dir.path + "/Z.idx", b + ".idx");
  expect_error([&] { build_indexed_dataset({in}, o, tok); }, Status::invalid_argument,
               "a dataset's two files are one pair, X.bin beside X.idx");
  fs::rename(dir.path + "/Z.idx", a + ".idx");
  fs::remove(b + ".idx");
  fs::create_symlink(a + ".idx", b + ".idx");
  // Links to both halves of one pair are one pair: written through.
  fs::remove(b + ".bin");
  fs::create_symlink(a + ".bin", b + ".bin");
  build_indexed_dataset({in}, o, tok);
  EXPECT_NE(read_file(a + ".idx"), a_idx);
}

TEST(IndexedTokenize, BadInputsAreClearErrorsAndWriteNothing) {
  TempDir dir;
  ByteTokenizer tok;
  IndexedTokenizeOptions o;
  o.output_prefix = dir.path + "/o";
  auto run = [&](const std::string &text) {
    write_file(dir.path + "/in.jsonl", text);
    build_indexed_dataset({dir.path + "/in.jsonl"}, o, tok);
  };
  expect_error([&] { run("{\"text\": \"a\"}\n{\"txt\": \"b\"}\n"); }, Status::invalid_argument,
               "in.jsonl:2: no key 'text'");
  expect_error([&] { run("{\"text\": \"a\"\n"); }, Status::invalid_argument,
               "in.jsonl:1 is not valid JSON");
  expect_error([&] { run("[\"a\"]\n"); }, Status::invalid_argument, "must be a JSON object, got: array");
  expect_error([&] { run("{\"text\": 3}\n"); }, Status::invalid_argument,
               "key 'text' holds a number; expected a string or a list of strings");
  expect_error([&] { run("{\"text\": [\"a\", null]}\n"); }, Status::invalid_argument,
               "is a list holding a null");
  expect_error([&] { run("{\"text\": \"\\ud800\"}\n"); }, Status::invalid_argument, "not valid JSON");
  expect_error([&] { run("\n\n"); }, Status::invalid_argument, "hold no documents");
  // The last line needs no newline; a FIFO as an input is refused, not
  // waited on (read as every input is: mapped).
  EXPECT_NO_THROW(run("{\"text\": \"a\"}\n\n{\"text\": \"b\"}"));
  fs::remove(o.output_prefix + "_text_document.bin");
  fs::remove(o.output_prefix + "_text_document.idx");
  ASSERT_EQ(::mkfifo((dir.path + "/fifo.jsonl").c_str(), 0600), 0);
  expect_error([&] { build_indexed_dataset({dir.path + "/fifo.jsonl"}, o, tok); }, Status::io_error,
               "is not a regular file");
  fs::remove(dir.path + "/fifo.jsonl");
  for (const auto &e : fs::directory_iterator(dir.path))
    EXPECT_EQ(e.path().filename(), "in.jsonl") << "left behind: " << e.path();
  // The output may not be an input, nor a directory.
  const std::string input = dir.path + "/x_text_document.bin";
  write_file(input, "{\"text\": \"a\"}\n");
  o.output_prefix = dir.path + "/x";
  expect_error([&] { build_indexed_dataset({input}, o, tok); }, Status::invalid_argument,
               "refusing to overwrite an input");
  EXPECT_EQ(read_file(input), "{\"text\": \"a\"}\n");
  fs::create_directories(dir.path + "/d_text_document.idx");
  o.output_prefix = dir.path + "/d";
  expect_error([&] { build_indexed_dataset({input}, o, tok); }, Status::invalid_argument,
               "is a directory");
  expect_error([] { parse_indexed_tokenize_options({"format=csv", "output_prefix=x"}); },
               Status::bad_value, "allowed: jsonl, fortune, lines, file");
  expect_error([] { parse_indexed_tokenize_options({"colour=red"}); }, Status::unknown_option,
               "allowed: output_prefix, format");
  expect_error([] { parse_indexed_tokenize_options({"format=jsonl"}); }, Status::invalid_argument,
               "needs output_prefix");
}

namespace {

// Two Megatron datasets made from the test corpora by the tokenize path.
struct BlendData {
  TempDir dir;
  std::string a, b;
  BlendData() {
    ByteTokenizer tok;
    IndexedTokenizeOptions o;
    o.format = "fortune";
    o.append_eod = true;
    o.output_prefix = dir.path + "/a";
    a = build_indexed_dataset({std::string(PTDP_TEST_DATA_DIR) + "/tiny_corpus.txt"}, o, tok)[0].prefix;
    o.format = "lines";
    o.output_prefix = dir.path + "/b";
    b = build_indexed_dataset({std::string(PTDP_TEST_DATA_DIR) + "/capi_corpus.txt"}, o, tok)[0].prefix;
  }
};

BlendData &blend_data() {
  static BlendData d;
  return d;
}

TrainerOptions blend_options(const std::string &data_path, int t, int d) {
  Config c;
  set_options(c, {{"num_layers", "2"}, {"hidden_size", "48"}, {"num_attention_heads", "12"},
                  {"seq_length", "16"}, {"micro_batch_size", "2"}, {"global_batch_size", "8"},
                  {"train_iters", "6"}, {"lr", "3e-3"}, {"min_lr", "3e-4"}});
  c.set("lr_warmup_iters", "2");  // as test_parallel, whose parameter bound this shares
  set_options(c, {{"split", "80,20"}, {"data_path", data_path},
                  {"tensor_model_parallel_size", std::to_string(t)},
                  {"data_parallel_size", std::to_string(d)}});
  return TrainerOptions::from_config(c);
}

}  // namespace

// Training on a blend of two indexed datasets: every layout computes the
// serial run (the blend's order is a function of the sample index alone).
TEST(Blend, EveryLayoutTrainsTheSerialRun) {
  const std::string spec = "0.3 " + blend_data().a + " 0.7 " + blend_data().b;
  const TrainedRun serial = train_run(blend_options(spec, 1, 1), 6);
  for (auto [t, d] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    SCOPED_TRACE("t=" + std::to_string(t) + " d=" + std::to_string(d));
    const TrainedRun run = train_run(blend_options(spec, t, d), 6);
    // One sample other than the serial run's moves a step's loss by ~1e-2 (the
    // shared 1e-5 catches it). Adam turns rounding in near-zero gradients into
    // updates of a few 1e-5 (3.3e-5 seen in the sanitizer build); other data
    // moves parameters by O(lr) = 3e-3 a step: 2e-4.
    expect_matches_serial(run, serial, 2e-4);
  }
  // The blend is not one of its parts: other weights, other losses.
  const TrainedRun other = train_run(blend_options("0.9 " + blend_data().a + " 0.1 " + blend_data().b, 1, 1), 6);
  EXPECT_NE(other.losses.back(), serial.losses.back());
  const TrainedRun only_a = train_run(blend_options(blend_data().a, 1, 1), 6);
  EXPECT_NE(only_a.losses.back(), serial.losses.back());
}

TEST(Blend, TrainerReportsTheBlendAndItsErrors) {
  Trainer tr(blend_options("1 " + blend_data().a + " 3 " + blend_data().b, 1, 1));
  Trainer a(blend_options(blend_data().a, 1, 1)), b(blend_options(blend_data().b, 1, 1));
  EXPECT_EQ(tr.train_samples(), a.train_samples() + b.train_samples());
  // The unigram entropy is the mixture's: above the smaller of the parts'.
  EXPECT_GT(tr.unigram_entropy(), std::min(a.unigram_entropy(), b.unigram_entropy()));
  expect_error([&] { Trainer x(blend_options("0 " + blend_data().a + " 0 " + blend_data().b, 1, 1)); },
               Status::invalid_config, "must sum to a positive number");
  expect_error([&] { Trainer x(blend_options("1 " + blend_data().a + " 1 /nonexistent/x", 1, 1)); },
               Status::io_error, "/nonexistent/x");
}

// "1 x" reads as a blend (weight 1 of x) and may also name a dataset "1 x": a
// sweep found the blend trained silently. Refused, naming both readings;
// "./1 x" is the dataset.
TEST(Blend, ADataPathThatIsAlsoABlendIsRefused) {
  TempDir dir;
  for (const char *name : {"x", "1 x"})
    for (const char *ext : {".bin", ".idx"})
      fs::copy_file(blend_data().a + ext, dir.path + "/" + name + ext);
  const fs::path here = fs::current_path();
  fs::current_path(dir.path);
  expect_error([&] { Trainer x(blend_options("1 x", 1, 1)); }, Status::invalid_config,
               "data_path '1 x' names a dataset and also reads as a blend (weight 1 of 'x')");
  Trainer named(blend_options("./1 x", 1, 1));
  Trainer blend(blend_options("1 x 1 x", 1, 1));  // a blend no file is named as
  fs::current_path(here);
  EXPECT_GT(named.train_samples(), 0);
}

// A path with a space whose first word is no number is one path, also where
// that word holds an 'x' (a sweep: 'x y/d', 'ex work/d', 'box b/d' were
// refused as a hexadecimal weight); only a weight written as a number in hex
// ('0x1 A') is refused as one. Spaces at its ends are the path's (' lead' was
// read as 'lead', another dataset where one is there).
TEST(Blend, APathWithASpaceIsOnePath) {
  TempDir dir;
  const fs::path here = fs::current_path();
  fs::current_path(dir.path);  // (relative: the first word is the name's)
  for (const char *name : {"x y", "ex work", "box b", " lead", "trail "}) {
    for (const char *ext : {".bin", ".idx"}) fs::copy_file(blend_data().a + ext, name + std::string(ext));
    Trainer t(blend_options(name, 1, 1));
    EXPECT_GT(t.train_samples(), 0) << name;
  }
  fs::current_path(here);
  expect_error([&] { Trainer x(blend_options("0x1 " + blend_data().a, 1, 1)); }, Status::invalid_config,
               "the weight '0x1' (item 1) is not a decimal number");
}
