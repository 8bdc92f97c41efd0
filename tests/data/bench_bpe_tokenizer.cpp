// GPT-2 BPE encoding speed on one core, in MB of text per second:
//   bench_bpe_tokenizer [--vocab-file V --merge-file M | --tokenizer-file T] [INPUT...]
// Defaults: the test fixtures' 3000-token BPE and Debian's fortunes
// (/usr/share/games/fortunes). The first pass starts with an empty word cache
// (what `ptdp tokenize` sees); the second has every word cached.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/status.h"
#include "engine/data/corpus.h"
#include "engine/data/tokenizer.h"

int main(int argc, char **argv) {
  ptdp::TokenizerSpec spec;
  spec.type = "GPT2BPETokenizer";
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; i++) {
    const std::string a = argv[i];
    if (i + 1 < argc && a == "--vocab-file")
      spec.vocab_file = argv[++i];
    else if (i + 1 < argc && a == "--merge-file")
      spec.merge_file = argv[++i];
    else if (i + 1 < argc && a == "--tokenizer-file")
      spec.tokenizer_file = argv[++i];
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
  } catch (const ptdp::Error &e) {
    std::fprintf(stderr, "bench_bpe_tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
