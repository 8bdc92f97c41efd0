// dump_tokens PATH — what ptdp reads from a dataset (a ptdp file, a Megatron
// PREFIX, PREFIX.idx or PREFIX.bin), for tests written in other languages:
//   format F / docs N / tokens T / vocab V, then "doc D: id id ..." per document.
// A dataset ptdp refuses: "error: <status>: <message>" on stderr, exit 1.
#include <cstdio>
#include <vector>

#include "engine/core/status.h"
#include "engine/data/token_source.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: dump_tokens PATH\n");
    return 2;
  }
  try {
    auto src = ptdp::open_token_source(argv[1]);
    std::printf("format %s\ndocs %llu\ntokens %llu\nvocab %d\n", src->format_name(),
                (unsigned long long)src->num_docs(), (unsigned long long)src->num_tokens(),
                src->vocab_size());
    for (uint64_t d = 0; d < src->num_docs(); d++) {
      const uint64_t a = src->doc_offset(d), b = src->doc_offset(d + 1);
      std::vector<int32_t> ids(b - a);
      src->read(a, ids.size(), ids.data());
      std::printf("doc %llu:", (unsigned long long)d);
      for (int32_t t : ids) std::printf(" %d", t);
      std::printf("\n");
    }
  } catch (const ptdp::Error &e) {
    std::fprintf(stderr, "error: %s: %s\n", ptdp::status_string(e.code()), e.what());
    return 1;
  }
  return 0;
}
