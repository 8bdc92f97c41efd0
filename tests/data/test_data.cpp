// Token datasets: round trip, validation on open, corpora, splits and the sampler.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "engine/core/status.h"
#include "tests/support/expect_error.h"
#include "engine/data/corpus.h"
#include "engine/data/dataset.h"
#include "engine/data/indexed_dataset.h"
#include "engine/data/sampler.h"
#include "engine/data/token_source.h"

namespace fs = std::filesystem;
using namespace ptdp;

namespace {

std::string temp_path(const std::string &name) {
  fs::path dir = fs::temp_directory_path() / ("ptdp_test_data_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}


std::string make_dataset(const std::string &name) {
  std::string p = temp_path(name);
  write_token_dataset(p, {{1, 2, 3, 0}, {4, 5, 0}, {6, 0}}, 7);
  return p;
}

void patch_file(const std::string &path, long offset, const void *bytes, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(static_cast<const char *>(bytes), (std::streamsize)n);
}

}  // namespace

TEST(Dataset, RoundTrip) {
  TokenDataset ds(make_dataset("rt.ptdp"));
  EXPECT_EQ(ds.num_docs(), 3u);
  EXPECT_EQ(ds.num_tokens(), 9u);
  EXPECT_EQ(ds.vocab_size(), 7);
  EXPECT_EQ(ds.doc_offset(1), 4u);
  EXPECT_EQ(ds.doc_offset(3), 9u);
  std::vector<int32_t> all;
  for (uint64_t i = 0; i < ds.num_tokens(); i++) all.push_back(ds.token(i));
  EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3, 0, 4, 5, 0, 6, 0}));
}

TEST(Dataset, WideTokens) {
  std::string p = temp_path("wide.ptdp");
  write_token_dataset(p, {{70000, 1, 69999}}, 70001);
  TokenDataset ds(p);
  EXPECT_EQ(ds.token(0), 70000);
  EXPECT_EQ(ds.token(2), 69999);
}

// Every bulk input is mapped through one MappedFile: a FIFO, a directory or a
// device is refused at once (a FIFO once blocked the open until a writer came).
TEST(Dataset, OnlyRegularFilesAreMapped) {
  const std::string fifo = temp_path("fifo.ptdp"), dir = temp_path("dir.ptdp");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directories(dir);
  expect_error([&] { TokenDataset d(fifo); }, Status::io_error,
               "dataset '" + fifo + "' is not a regular file (a FIFO)");
  // The same through the data path's opener (which reads a file's first bytes).
  expect_error([&] { open_token_source(fifo); }, Status::io_error,
               "dataset '" + fifo + "' is not a regular file (a FIFO)");
  expect_error([&] { TokenDataset d(dir); }, Status::io_error,
               "dataset '" + dir + "' is a directory, not a file");
  expect_error([&] { TokenDataset d("/dev/null"); }, Status::io_error,
               "is not a regular file (a device)");
  // A Megatron prefix whose .idx is a FIFO.
  const std::string prefix = temp_path("meg");
  std::remove((prefix + ".idx").c_str());
  ASSERT_EQ(::mkfifo((prefix + ".idx").c_str(), 0600), 0);
  std::ofstream(prefix + ".bin").put('x');
  expect_error([&] { IndexedDataset d(prefix); }, Status::io_error,
               "Megatron dataset '" + prefix + "': its index '" + prefix +
                   ".idx' is not a regular file (a FIFO)");
  std::remove(fifo.c_str());
  std::remove((prefix + ".idx").c_str());
  std::remove((prefix + ".bin").c_str());
  fs::remove(dir);
}

TEST(Dataset, RejectsBadFiles) {
  expect_error([] { TokenDataset d(temp_path("missing.ptdp")); }, Status::io_error,
               "cannot open dataset");
  {
    std::string p = make_dataset("magic.ptdp");
    patch_file(p, 0, "XXXX", 4);
    expect_error([&] { TokenDataset d(p); }, Status::corrupt_data, "bad magic");
  }
  {
    std::string p = make_dataset("version.ptdp");
    uint32_t v = 99;
    patch_file(p, 8, &v, 4);
    expect_error([&] { TokenDataset d(p); }, Status::corrupt_data, "format version 99");
  }
  {
    std::string p = make_dataset("trunc.ptdp");
    fs::resize_file(p, fs::file_size(p) - 3);
    expect_error([&] { TokenDataset d(p); }, Status::corrupt_data, "truncated");
  }
  {
    std::string p = make_dataset("trail.ptdp");
    fs::resize_file(p, fs::file_size(p) + 5);
    expect_error([&] { TokenDataset d(p); }, Status::corrupt_data, "trailing bytes");
  }
  {
    std::string p = make_dataset("token.ptdp");
    uint16_t t = 9;  // vocab is 7
    patch_file(p, 64 + 4 * 8 + 2 * 2, &t, 2);
    expect_error([&] { TokenDataset d(p); }, Status::corrupt_data, "outside the vocabulary");
  }
  {
    std::string p = make_dataset("index.ptdp");
    uint64_t off = 8;  // document 1 would start after document 2
    patch_file(p, 64 + 8, &off, 8);
    expect_error([&] { TokenDataset d(p); }, Status::corrupt_data, "document index decreases");
  }
  {
    std::string p = temp_path("short.ptdp");
    std::ofstream(p) << "PTDP";
    expect_error([&] { TokenDataset d(p); }, Status::corrupt_data, "shorter than its 64-byte header");
  }
}

TEST(Dataset, WriterRejectsTokensOutsideVocabulary) {
  expect_error([] { write_token_dataset(temp_path("bad.ptdp"), {{1, 9}}, 5); },
               Status::invalid_argument, "outside the vocabulary");
  EXPECT_FALSE(fs::exists(temp_path("bad.ptdp")));
  EXPECT_FALSE(fs::exists(temp_path("bad.ptdp.tmp." + std::to_string(getpid()))));
}

TEST(Corpus, FortuneFormatAndBuild) {
  std::string dir = temp_path("corpus");
  fs::create_directories(dir);
  std::ofstream(dir + "/a") << "first\nfortune\n%\nsecond\n%\n";
  std::ofstream(dir + "/a.dat") << "binary index, skipped";
  std::ofstream(dir + "/b") << "third\n";
  auto docs = read_documents(dir + "/a", "fortune");
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], "first\nfortune\n");
  ByteTokenizer tok;
  CorpusStats st = build_token_dataset({dir}, "fortune", tok, temp_path("c.ptdp"));
  EXPECT_EQ(st.num_docs, 3u);
  EXPECT_EQ(st.num_tokens, 14u + 7u + 6u + 3u);  // bytes + one EOD per document
  TokenDataset ds(temp_path("c.ptdp"));
  EXPECT_EQ(ds.vocab_size(), 257);
  for (uint64_t d = 0; d < ds.num_docs(); d++) EXPECT_EQ(ds.token(ds.doc_offset(d + 1) - 1), 256);
  expect_error([&] { read_documents(dir + "/a", "csv"); }, Status::bad_value, "fortune, lines, file");
  expect_error([&] { build_token_dataset({dir + "/nope"}, "lines", tok, temp_path("x.ptdp")); },
               Status::io_error, "does not exist");
  // A FIFO named as a corpus file is refused, not waited on; an empty file has no documents.
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0644), 0);
  expect_error([&] { read_documents(dir + "/fifo", "lines"); }, Status::io_error,
               "is not a regular file");
  std::ofstream(dir + "/empty");
  EXPECT_TRUE(read_documents(dir + "/empty", "lines").empty());
}

// The plain-text formats keep the input's bytes: no newline after a last line
// that has none (as jsonl's text and the file format), and only UTF-8, as
// jsonl's JSON: an ill-formed byte is refused with its line and bytes.
TEST(Corpus, PlainTextFormatsKeepTheInputsBytes) {
  const std::string dir = temp_path("corpus_bytes");
  fs::create_directories(dir);
  std::ofstream(dir + "/unterminated") << "one\n\ntwo";
  EXPECT_EQ(read_documents(dir + "/unterminated", "lines"),
            (std::vector<std::string>{"one\n", "two"}));
  EXPECT_EQ(read_documents(dir + "/unterminated", "fortune"),
            (std::vector<std::string>{"one\n\ntwo"}));
  EXPECT_EQ(read_documents(dir + "/unterminated", "file"),
            (std::vector<std::string>{"one\n\ntwo"}));
  std::ofstream(dir + "/fortunes") << "a\n%\nb";
  EXPECT_EQ(read_documents(dir + "/fortunes", "fortune"), (std::vector<std::string>{"a\n", "b"}));
  std::ofstream(dir + "/crlf") << "a\r\n\r\nb\r\n%\r\nc\r\n";  // blank CRLF lines, a CRLF separator
  EXPECT_EQ(read_documents(dir + "/crlf", "lines"),
            (std::vector<std::string>{"a\r\n", "b\r\n", "%\r\n", "c\r\n"}));
  EXPECT_EQ(read_documents(dir + "/crlf", "fortune"),
            (std::vector<std::string>{"a\r\n\r\nb\r\n", "c\r\n"}));
  std::ofstream(dir + "/latin1") << "caf\xC3\xA9\nna\xEFve\n";  // line 2: Latin-1's i-diaeresis
  for (const char *format : {"lines", "fortune", "file"})
    expect_error([&] { read_documents(dir + "/latin1", format); }, Status::invalid_argument,
                 "line 2: not valid UTF-8 (\\xEFve");
}

TEST(Tokenizer, ByteRoundTrip) {
  ByteTokenizer tok;
  std::string s = "h\xc3\xa9llo\n\t";
  auto ids = tok.encode(s);
  EXPECT_EQ(ids.size(), s.size());
  EXPECT_EQ(tok.decode(ids.data(), ids.size()), s);
  EXPECT_THROW(make_tokenizer("gpt2"), Error);
}

TEST(Split, Parse) {
  auto r = parse_split("98,2", 100);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].end_doc, 98u);
  EXPECT_EQ(r[1].first_doc, 98u);
  EXPECT_EQ(r[1].end_doc, 100u);
  auto r3 = parse_split("949,50,1", 1000);
  EXPECT_EQ(r3[2].end_doc - r3[2].first_doc, 1u);
  expect_error([] { parse_split("98", 10); }, Status::bad_value, "98,2");
  expect_error([] { parse_split("a,b", 10); }, Status::bad_value, "98,2");
  expect_error([] { parse_split("1,0", 10); }, Status::bad_value, "positive");
  for (const char *bad : {"98,2,", ",98,2", "98,,2"})
    expect_error([&] { parse_split(bad, 10); }, Status::bad_value, "separated by commas");
  expect_error([] { parse_split("1,1,1,1", 10); }, Status::bad_value,
               "split '1,1,1,1' has 4 parts; give 2 or 3");
  // Relative weights whose sum passes the largest double: halves, not NaN bounds.
  auto huge = parse_split("1e308,1e308", 100);
  EXPECT_EQ(huge[0].end_doc, 50u);
  EXPECT_EQ(huge[1].end_doc, 100u);
}

TEST(Sampler, DeterministicPermutationPerEpoch) {
  std::vector<std::vector<int32_t>> docs;
  for (int d = 0; d < 50; d++) docs.push_back(std::vector<int32_t>(20, d % 7));
  std::string p = temp_path("s.ptdp");
  write_token_dataset(p, docs, 8);
  auto ds = std::make_shared<const TokenDataset>(p);
  GptSampler a(ds, {0, 50}, 9, 5, true), b(ds, {0, 50}, 9, 5, true), c(ds, {0, 50}, 9, 6, true);
  const uint64_t n = a.num_samples();
  EXPECT_EQ(n, (1000u - 1) / 9);
  std::vector<int32_t> x(10), y(10);
  int differ = 0;
  for (uint64_t i = 0; i < 2 * n; i++) {
    a.get(i, x.data());
    b.get(i, y.data());
    ASSERT_EQ(x, y);
    c.get(i, y.data());
    differ += x != y;
  }
  EXPECT_GT(differ, 0);
  // Within an epoch every window appears exactly once: starts are distinct.
  GptSampler plain(ds, {0, 50}, 9, 5, false);
  std::set<std::vector<int32_t>> seen_shuffled, seen_plain;
  for (uint64_t i = 0; i < n; i++) {
    a.get(i, x.data());
    plain.get(i, y.data());
    seen_shuffled.insert(x);
    seen_plain.insert(y);
  }
  EXPECT_EQ(seen_shuffled, seen_plain);
}
