// Megatron's indexed dataset: the .idx parse and the .bin size checks, then
// what a run reads from an accepted dataset (document bounds and tokens).
// Input: split2() into PREFIX.idx and PREFIX.bin.
#include <vector>

#include "engine/data/indexed_dataset.h"
#include "tests/fuzz/token_source_checks.h"

using namespace ptdp_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const auto files = split2(data, size);  // .idx, .bin
  write_file("d.idx", files.first);
  write_file("d.bin", files.second);
  const size_t bin_bytes = files.second.size();
  accepts([&] {
    const ptdp::IndexedDataset ds(scratch_dir() + "/d");
    const uint64_t n = ds.num_tokens();
    const std::vector<int32_t> tokens = check_token_source(ds, bin_bytes);
    // Reads that start inside a sequence, as the sampler's windows do.
    for (uint64_t first = 1; first < n; first += 7) {
      int32_t t[3];
      const size_t k = std::min<uint64_t>(3, n - first);
      ds.read(first, k, t);
      for (size_t j = 0; j < k; j++) check(t[j] == tokens[first + j], "a window read differs");
    }
  });
  return 0;
}
