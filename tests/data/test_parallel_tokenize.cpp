// `ptdp tokenize --workers N`: GPT-2 BPE encoding on several threads (each
// with its own cache, or all through the locked encode()) gives the ids of one
// thread; run_ordered keeps input order and raises the first error in input
// order; the .ptdp and indexed files are byte-identical for any N, with the
// byte tokenizer and the BPE fixture; bad worker counts are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "engine/core/status.h"
#include "engine/data/corpus.h"
#include "engine/data/indexed_tokenize.h"
#include "engine/data/ordered_parallel.h"
#include "engine/data/tokenizer.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"

using namespace ptdp;

namespace {

const std::string kDir = std::string(PTDP_TEST_DATA_DIR) + "/bpe/";

TokenizerSpec bpe_spec() {
  TokenizerSpec s;
  s.type = "GPT2BPETokenizer";
  s.vocab_file = kDir + "vocab.json";
  s.merge_file = kDir + "merges.txt";
  return s;
}

std::vector<std::string> fixture_lines() {
  std::vector<std::string> out;
  std::istringstream in(read_file(kDir + "text.txt"));
  for (std::string line; std::getline(in, line);) out.push_back(line + "\n");
  return out;
}

// Runs f(thread index) on n threads at once.
template <class F>
void on_threads(int n, F f) {
  std::vector<std::thread> threads;
  for (int t = 0; t < n; t++) threads.emplace_back([&f, t] { f(t); });
  for (auto &th : threads) th.join();
}

}  // namespace

TEST(ParallelBpe, OwnCachesGiveTheIdsOfOneThread) {
  const auto tok = make_tokenizer(bpe_spec());
  const std::vector<std::string> lines = fixture_lines();
  ASSERT_GT(lines.size(), 1000u);
  std::vector<std::vector<int32_t>> want;
  for (const auto &l : lines) want.push_back(tok->encode(l));
  std::atomic<int> mismatches{0};
  // Each thread starts elsewhere, so that they fill their caches with different words.
  on_threads(4, [&](int t) {
    auto cache = tok->new_cache();
    for (size_t k = 0; k < lines.size(); k++) {
      const size_t i = (k + t * lines.size() / 4) % lines.size();
      if (tok->encode_with(lines[i], *cache) != want[i]) mismatches++;
    }
  });
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ParallelBpe, SharedEncodeIsSafeOnThreads) {
  const auto tok = make_tokenizer(bpe_spec());
  const std::vector<std::string> lines = fixture_lines();
  std::vector<std::vector<int32_t>> want;
  {
    auto cache = tok->new_cache();  // a cache of its own: the locked one starts empty below
    for (const auto &l : lines) want.push_back(tok->encode_with(l, *cache));
  }
  std::atomic<int> mismatches{0};
  on_threads(3, [&](int t) {
    for (size_t i = t; i < lines.size(); i += 2)
      if (tok->encode(lines[i]) != want[i]) mismatches++;
  });
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(ParallelBpe, ByteTokenizerAndForeignCaches) {
  const auto bytes = make_tokenizer("byte");
  const auto bpe = make_tokenizer(bpe_spec());
  auto byte_cache = bytes->new_cache();
  ASSERT_NE(byte_cache, nullptr);
  EXPECT_EQ(bytes->encode_with("ab", *byte_cache), (std::vector<int32_t>{'a', 'b'}));
  expect_error([&] { bpe->encode_with("ab", *byte_cache); }, Status::invalid_argument,
               "GPT2BPETokenizer::encode_with: the cache is not from this tokenizer's new_cache()");
  // Nor a cache of another tokenizer of the same kind: its words have other ids.
  const auto other = make_tokenizer(bpe_spec());
  auto other_cache = other->new_cache();
  expect_error([&] { bpe->encode_with("ab", *other_cache); }, Status::invalid_argument,
               "not from this tokenizer's new_cache()");
}

TEST(OrderedParallel, ResultsComeInInputOrder) {
  for (int workers : {1, 2, 3, 8}) {
    int produced = 0;
    std::vector<int> seen;
    run_ordered<int>(
        workers,
        [&](int &chunk) {
          if (produced == 200) return false;
          chunk = produced++;
          return true;
        },
        [&](int &chunk, int w) {
          EXPECT_GE(w, 0);
          EXPECT_LT(w, workers);
          // Uneven work, so that later chunks often finish first.
          std::this_thread::sleep_for(std::chrono::microseconds((chunk * 7919) % 300));
          return chunk * 10;
        },
        [&](int &r) { seen.push_back(r); });
    ASSERT_EQ(seen.size(), 200u) << workers;
    for (int i = 0; i < 200; i++) EXPECT_EQ(seen[i], i * 10) << workers;
  }
}

TEST(OrderedParallel, TheFirstErrorInInputOrderWins) {
  for (int workers : {1, 2, 4}) {
    // Work fails at chunks 5 and 9 (9 quickly, 5 slowly); the input at 12.
    int produced = 0;
    std::vector<int> seen;
    auto input = [&](int &chunk) {
      if (produced == 12) fail(Status::io_error, "input error at 12");
      chunk = produced++;
      return true;
    };
    expect_error(
        [&] {
          run_ordered<int>(
              workers, input,
              [&](int &chunk, int) {
                if (chunk == 5) {
                  std::this_thread::sleep_for(std::chrono::milliseconds(20));
                  fail(Status::invalid_argument, "work error at 5");
                }
                if (chunk == 9) fail(Status::invalid_argument, "work error at 9");
                return chunk;
              },
              [&](int &r) { seen.push_back(r); });
        },
        Status::invalid_argument, "work error at 5");
    EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3, 4})) << workers;
    // Only the input fails: everything before it is consumed first.
    produced = 0;
    seen.clear();
    expect_error(
        [&] {
          run_ordered<int>(
              workers, input, [&](int &chunk, int) { return chunk; },
              [&](int &r) { seen.push_back(r); });
        },
        Status::io_error, "input error at 12");
    EXPECT_EQ(seen.size(), 12u) << workers;
  }
}

namespace {

// A corpus of several chunks (kTokenizeChunkBytes each): the fixture's lines as
// plain text and as JSON lines with two keys, the second a list of sentences.
struct Corpus {
  TempDir dir{"ptdp_workers"};
  std::string text, jsonl;
  Corpus() {
    const std::vector<std::string> lines = fixture_lines();
    std::string t, j;
    for (int rep = 0; rep < 4; rep++)
      for (size_t i = 0; i < lines.size(); i++) {
        t += lines[i];
        nlohmann::json doc = {{"text", lines[i]},
                              {"title", {lines[(i + 1) % lines.size()], "", lines[i]}}};
        j += doc.dump() + "\n";
        if (i % 97 == 0) j += "  \n";  // blank lines are skipped
      }
    EXPECT_GT(t.size(), 3 * kTokenizeChunkBytes);
    text = dir.path + "/text.txt";
    jsonl = dir.path + "/docs.jsonl";
    write_file(text, t);
    write_file(jsonl, j);
  }
};

// The files build_token_dataset and build_indexed_dataset write with `workers`.
std::vector<std::string> tokenize_files(const Corpus &c, const Tokenizer &tok, int workers) {
  const std::string p = c.dir.path + "/w" + std::to_string(workers);
  const CorpusStats st = build_token_dataset({c.text}, "lines", tok, p + ".ptdp", workers);
  EXPECT_GT(st.num_docs, 1000u);
  IndexedTokenizeOptions o;
  o.json_keys = {"text", "title"};
  o.append_eod = true;
  o.output_prefix = p;
  o.workers = workers;
  build_indexed_dataset({c.jsonl}, o, tok);
  std::vector<std::string> files = {read_file(p + ".ptdp")};
  for (const char *key : {"text", "title"})
    for (const char *ext : {".bin", ".idx"})
      files.push_back(read_file(indexed_output_prefix(p, key) + ext));
  return files;
}

void expect_same_files_for_any_workers(const Tokenizer &tok) {
  Corpus c;
  const std::vector<std::string> one = tokenize_files(c, tok, 1);
  for (const auto &f : one) EXPECT_GT(f.size(), 1000u);
  for (int workers : {2, 3, 0}) {
    const std::vector<std::string> many = tokenize_files(c, tok, workers);
    ASSERT_EQ(many.size(), one.size());
    for (size_t k = 0; k < one.size(); k++)
      EXPECT_TRUE(many[k] == one[k]) << "file " << k << " differs with " << workers << " workers";
  }
}

}  // namespace

TEST(ParallelTokenize, SameFilesForAnyWorkersByte) {
  expect_same_files_for_any_workers(*make_tokenizer("byte"));
}

TEST(ParallelTokenize, SameFilesForAnyWorkersBpe) {
  expect_same_files_for_any_workers(*make_tokenizer(bpe_spec()));
}

TEST(ParallelTokenize, SameErrorForAnyWorkers) {
  Corpus c;
  // A bad line far into the file, and another after it in a second file: the first is the error.
  std::string j = read_file(c.jsonl);
  const size_t at = j.size() * 3 / 4;
  const size_t line_start = j.rfind('\n', at) + 1;
  j.insert(line_start, "{\"text\": 5}\n");
  const uint64_t line_no = std::count(j.begin(), j.begin() + line_start, '\n') + 1;
  write_file(c.jsonl, j);
  const std::string second = c.dir.path + "/second.jsonl";
  write_file(second, "{\"body\": \"x\"}\n");
  for (int workers : {1, 2, 3}) {
    IndexedTokenizeOptions o;
    o.output_prefix = c.dir.path + "/bad";
    o.workers = workers;
    const auto tok = make_tokenizer("byte");
    expect_error(
        [&] {
          build_indexed_dataset({c.jsonl, second}, o, *tok);
        },
        Status::invalid_argument,
        c.jsonl + ":" + std::to_string(line_no) + ": key 'text' holds a number");
  }
}

// Every key=value list of the C ABI splits through one split_key_value: an
// item without '=' or with an empty key is refused the same way by both.
TEST(ParallelTokenize, OptionsMustBeKeyValue) {
  for (const char *bad : {"output", "=x"}) {
    expect_error([&] { parse_tokenize_options({"output=x", bad}); }, Status::bad_value,
                 std::string("tokenize option '") + bad + "' is not key=value; keys: output,");
    expect_error([&] { parse_indexed_tokenize_options({"output_prefix=x", bad}); },
                 Status::bad_value,
                 std::string("tokenize option '") + bad + "' is not key=value; keys: output_prefix");
  }
  EXPECT_EQ(parse_tokenize_options({"output=a=b"}).output, "a=b");  // split at the first '='
  // A key given twice is refused (the last one took effect, silently).
  expect_error([&] { parse_tokenize_options({"output=a", "output=b"}); }, Status::bad_value,
               "tokenize option 'output' is given twice");
  expect_error([&] { parse_indexed_tokenize_options({"output_prefix=a", "output_prefix=b"}); },
               Status::bad_value, "tokenize option 'output_prefix' is given twice");
}

TEST(ParallelTokenize, WorkersOutOfRange) {
  const auto tok = make_tokenizer("byte");
  const std::string range = "workers must be in [0, 1024] (0: one per core)";
  for (const char *bad : {"-1", "1025", "99999999999"}) {
    expect_error(
        [&] {
          parse_tokenize_options({"output=x", std::string("workers=") + bad});
        },
        Status::bad_value, range);
    expect_error(
        [&] {
          parse_indexed_tokenize_options({"output_prefix=x", std::string("workers=") + bad});
        },
        Status::bad_value, range);
  }
  for (const char *bad : {"", "two", "2x", "1.5"})
    expect_error(
        [&] {
          parse_tokenize_options({"output=x", std::string("workers=") + bad});
        },
        Status::bad_value, "workers must be an integer in [0, 1024]");
  EXPECT_EQ(parse_tokenize_options({"output=x", "workers=0"}).workers, 0);
  EXPECT_EQ(parse_indexed_tokenize_options({"output_prefix=x", "workers=16"}).workers, 16);
  Corpus c;
  expect_error([&] { build_token_dataset({c.text}, "lines", *tok, c.dir.path + "/o", -2); },
               Status::bad_value, range);
  EXPECT_GE(resolve_workers(0), 1);
}
