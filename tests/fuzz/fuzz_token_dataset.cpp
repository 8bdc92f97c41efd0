// ptdp's own token dataset (engine/data/dataset.h): the header, size and
// document-index checks on open, then what a run reads from an accepted file.
// Input: the whole file.
#include <vector>

#include "engine/data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ptdp_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path =
      write_file("d.ptdp", std::string_view(reinterpret_cast<const char *>(data), size));
  accepts([&] {
    const ptdp::TokenDataset ds(path);
    const uint64_t n = ds.num_tokens();
    check(n <= size, "more tokens than bytes");
    check(ds.doc_offset(0) == 0 && ds.doc_offset(ds.num_docs()) == n, "documents do not span");
    for (uint64_t d = 1; d <= ds.num_docs(); d++)
      check(ds.doc_offset(d - 1) <= ds.doc_offset(d), "document offsets decrease");
    std::vector<int32_t> tokens(n);
    ds.read(0, n, tokens.data());
    for (int32_t t : tokens) check(t >= 0 && t < ds.vocab_size(), "token outside vocab_size()");
  });
  return 0;
}
