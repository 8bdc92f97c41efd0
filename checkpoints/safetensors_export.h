// `ptdp ckpt export-safetensors`: a checkpoint's parameters as a safetensors
// file with Hugging Face GPT-2 (GPT2Model) names and layouts, readable by any
// safetensors reader: h.{i}.ln_1.weight, ..., wte.weight, wpe.weight, ln_f.*.
// The four linear weights become Conv1D's [in, out], and c_attn's outputs go
// from ptdp's per-head [a, 3, hd] order (Megatron's) to GPT-2's [3, a, hd].
#pragma once
#include <string>

namespace ptdp {

// path: a save directory (its newest complete checkpoint) or one iter_N.
// Refuses (corrupt_data) a checkpoint with any fault; writes out_file
// atomically (a temporary file, fsync, rename), so a failure leaves no file.
void export_safetensors(const std::string &path, const std::string &out_file);

}  // namespace ptdp
