// `ptdp ckpt export-safetensors`: a checkpoint's parameters as a safetensors
// file with Hugging Face GPT-2 (GPT2Model) names and layouts, readable by any
// safetensors reader: h.{i}.ln_1.weight, ..., wte.weight, wpe.weight, ln_f.*.
// The four linear weights become Conv1D's [in, out], and c_attn's outputs go
// from ptdp's per-head [a, 3, hd] order (Megatron's) to GPT-2's [3, a, hd].
// The tensors are F32, BF16 or F16 as asked (16-bit: rounded to nearest even);
// the metadata holds "format": "pt" and the matching GPT2Config fields as JSON
// text ("gpt2_config", activation gelu_new like ptdp's GeLU).
#pragma once
#include <string>

namespace ptdp {

// path: a save directory (its newest complete checkpoint) or one iter_N.
// Refuses (corrupt_data, "is damaged, not exported: <the fault>") a
// checkpoint with any fault `ptdp ckpt verify` would report, in the optimizer
// state too, or whose datasets disagree with its manifest's model; the
// parameters' checksums are checked again as they are read for the export.
// Writes out_file atomically (out_file.tmp, fsync, rename, fsync of its
// directory), so a failure leaves no file; io_error names the path that
// could not be written.
// dtype: "f32", "bf16" or "f16" (or another name parse_dtype knows for them);
// any other is bad_value, listing these. f16 tops out at 65504: a parameter
// larger in magnitude is bad_value naming the tensor and the value, rather
// than an inf written without a word.
void export_safetensors(const std::string &path, const std::string &out_file,
                        const std::string &dtype = "f32");

}  // namespace ptdp
