// ptdp's own token dataset (engine/data/dataset.h): the header, size and
// document-index checks on open, then what a run reads from an accepted file.
// Input: the whole file.
#include "engine/data/dataset.h"
#include "tests/fuzz/token_source_checks.h"

using namespace ptdp_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string path =
      write_file("d.ptdp", std::string_view(reinterpret_cast<const char *>(data), size));
  accepts([&] {
    check_token_source(ptdp::TokenDataset(path), size);
  });
  return 0;
}
