// GPT-2 BPE encoding speed, in MB of text per second:
//   bench_bpe_tokenizer [--vocab-file V --merge-file M | --tokenizer-file T]
//                       [--workers 1,2] [--repeat 5] [INPUT...]
// Defaults: the test fixtures' 3000-token BPE and Debian's fortunes
// (/usr/share/games/fortunes). On one thread with encode(): the first pass
// starts with an empty word cache (what `ptdp tokenize` sees), the second has
// every word cached. Then `ptdp tokenize --workers N`'s encoding (chunks on N
// threads, a cache each, starting empty), `--repeat` times for each N: the
// median, min and max MB/s, and the speed-up of the medians over 1 worker.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/data/corpus.h"
#include "engine/data/ordered_parallel.h"
#include "engine/data/tokenizer.h"

namespace {

// Seconds to encode `docs` as `ptdp tokenize --workers` does; `ids` counts the
// tokens, `cpu_s` the CPU seconds of all threads.
double encode_parallel(const ptdp::Tokenizer &tok, const std::vector<std::string> &docs,
                       int workers, size_t &ids, double &cpu_s) {
  std::vector<std::unique_ptr<ptdp::Tokenizer::Cache>> caches;
  for (int w = 0; w < workers; w++) caches.push_back(tok.new_cache());
  size_t next = 0;
  ids = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();  // the process's: every thread's
  ptdp::run_ordered<std::vector<const std::string *>>(
      workers,
      [&](std::vector<const std::string *> &chunk) {
        for (size_t bytes = 0; next < docs.size() && bytes < ptdp::kTokenizeChunkBytes; next++) {
          chunk.push_back(&docs[next]);
          bytes += docs[next].size();
        }
        return !chunk.empty();
      },
      [&](std::vector<const std::string *> &chunk, int w) {
        size_t n = 0;
        for (const std::string *d : chunk) n += tok.encode_with(*d, *caches[w]).size();
        return n;
      },
      [&](size_t n) { ids += n; });
  cpu_s = double(std::clock() - c0) / CLOCKS_PER_SEC;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int> parse_list(const std::string &s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) out.push_back(std::stoi(part));
  return out;
}

}  // namespace

int main(int argc, char **argv) {
  ptdp::TokenizerSpec spec;
  spec.type = "GPT2BPETokenizer";
  std::vector<std::string> inputs;
  std::vector<int> workers = {1, 2};
  int repeat = 5;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (i + 1 < argc && a == "--vocab-file")
      spec.vocab_file = argv[++i];
    else if (i + 1 < argc && a == "--merge-file")
      spec.merge_file = argv[++i];
    else if (i + 1 < argc && a == "--tokenizer-file")
      spec.tokenizer_file = argv[++i];
    else if (i + 1 < argc && a == "--workers")
      workers = parse_list(argv[++i]);
    else if (i + 1 < argc && a == "--repeat")
      repeat = std::max(1, std::atoi(argv[++i]));
    else
      inputs.push_back(a);
  }
  if (spec.vocab_file.empty() && spec.merge_file.empty() && spec.tokenizer_file.empty()) {
    spec.vocab_file = PTDP_TEST_DATA_DIR "/bpe/vocab.json";
    spec.merge_file = PTDP_TEST_DATA_DIR "/bpe/merges.txt";
  }
  if (inputs.empty()) inputs.push_back("/usr/share/games/fortunes");
  try {
    std::vector<std::string> docs;
    size_t bytes = 0;
    for (const std::string &f : ptdp::expand_inputs(inputs))
      for (std::string &d : ptdp::read_documents(f, "fortune")) {
        bytes += d.size();
        docs.push_back(std::move(d));
      }
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    auto tok = ptdp::make_tokenizer(spec);
    const double load_s = std::chrono::duration<double>(clock::now() - t0).count();
    std::printf("tokenizer: %s, vocabulary %d, loaded in %.3f s\n", tok->name().c_str(),
                tok->vocab_size(), load_s);
    std::printf("text: %zu documents, %.2f MB\n", docs.size(), bytes / 1e6);
    for (const char *pass : {"cold cache", "warm cache"}) {
      size_t ids = 0;
      t0 = clock::now();
      const std::clock_t c0 = std::clock();
      for (const std::string &d : docs) ids += tok->encode(d).size();
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;  // one thread: its CPU time
      std::printf("encode (%s): %zu ids in %.3f s: %.1f MB/s (%.1f MB/s of CPU time)\n", pass, ids,
                  s, bytes / 1e6 / s, bytes / 1e6 / cpu);
    }
    double median_one = 0;
    for (int w : workers) {
      std::vector<double> mbs, cpu_mbs;
      size_t ids = 0;
      for (int r = 0; r < repeat; r++) {
        double cpu_s = 0;
        const double s = encode_parallel(*tok, docs, ptdp::resolve_workers(w), ids, cpu_s);
        mbs.push_back(bytes / 1e6 / s);
        cpu_mbs.push_back(bytes / 1e6 / cpu_s);
      }
      std::sort(mbs.begin(), mbs.end());
      std::sort(cpu_mbs.begin(), cpu_mbs.end());
      const double median = mbs[mbs.size() / 2];
      if (w == 1) median_one = median;
      std::printf(
          "encode (--workers %d, cold caches, %d runs): %zu ids, median %.1f MB/s "
          "(min %.1f, max %.1f; %.1f MB/s of CPU time)",
          w, repeat, ids, median, mbs.front(), mbs.back(), cpu_mbs[cpu_mbs.size() / 2]);
      if (median_one > 0 && w != 1) std::printf(", %.2fx 1 worker", median / median_one);
      std::printf("\n");
    }
  } catch (const ptdp::Error &e) {
    std::fprintf(stderr, "bench_bpe_tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
