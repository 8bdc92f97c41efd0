// The checkpoint manifest (manifest.json): parse, and an accepted manifest
// must write back (to_json) to one that parses to the same datasets.
#include "checkpoints/manifest.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ptdp_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string text(reinterpret_cast<const char *>(data), size);
  ptdp::Manifest m;
  if (!accepts([&] { m = ptdp::Manifest::parse(text, "fuzz manifest.json"); })) return 0;
  for (const ptdp::ManifestDataset &d : m.datasets) {
    check(m.find(d.name) != nullptr, "a parsed dataset is not found by name");
    check(d.bytes() >= 0, "a dataset's size is negative");  // and UBSan: no overflow
  }
  check(ptdp::model_shape_mismatch(m.model, m.model).empty(), "a model differs from itself");
  ptdp::Manifest again;
  const bool ok = accepts([&] { again = ptdp::Manifest::parse(m.to_json(), "rewritten"); });
  check(ok && again.checksummed, "an accepted manifest does not survive to_json()");
  check(again.datasets.size() == m.datasets.size() && again.iteration == m.iteration,
        "to_json() changed the manifest");
  for (size_t i = 0; i < m.datasets.size(); i++)
    check(again.datasets[i].name == m.datasets[i].name &&
              again.datasets[i].shape == m.datasets[i].shape &&
              again.datasets[i].blocks.size() == m.datasets[i].blocks.size(),
          "to_json() changed a dataset");
  return 0;
}
