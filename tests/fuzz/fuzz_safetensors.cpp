// The safetensors importer's parse and checks (header, the GPT2Config of its
// gpt2_config metadata, every tensor's name, shape and dtype), in memory:
// what runs before `ptdp ckpt import-safetensors` writes anything.
#include "checkpoints/safetensors_import.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ptdp_fuzz;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  accepts([&] {
    const ptdp::GptConfig cfg = ptdp::check_safetensors(data, size, "fuzz.safetensors");
    cfg.validate();
  });
  return 0;
}
