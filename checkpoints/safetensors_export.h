// `ptdp ckpt export-safetensors`: a checkpoint's parameters in Hugging Face's
// names and layouts, readable by any safetensors reader. GPT-2 (GPT2Model
// names: h.{i}.ln_1.weight, ..., wte, wpe, ln_f; the four linear weights as
// Conv1D's [in, out]; c_attn's outputs from ptdp's per-head [a, 3, hd] order
// to GPT-2's [3, a, hd]) or, for a model of the LLaMA family's shape (RMSNorm,
// rope, SwiGLU, no linear biases but QKV's), LlamaForCausalLM's names
// (Qwen2ForCausalLM's with QKV biases), QKV split into q_proj, k_proj, v_proj
// (checkpoints/llama_layout.h). The tensors are F32, BF16 or F16 as asked
// (16-bit: rounded to nearest even).
// The output is a model directory (any path not ending in .safetensors; made
// if absent, its other files left alone): model.safetensors, config.json and
// generation_config.json as save_pretrained writes them, bos/eos ids included
// when the checkpoint came from a Hugging Face import. A path ending in
// .safetensors is GPT-2's weights file alone, its GPT2Config in the metadata
// ("gpt2_config", activation gelu_new like ptdp's GeLU).
#pragma once
#include <string>

namespace ptdp {

// path: a save directory (its newest complete checkpoint) or one iter_N.
// Refuses (corrupt_data, "is damaged, not exported: <the fault>") a
// checkpoint with any fault `ptdp ckpt verify` would report, in the optimizer
// state too, or whose datasets disagree with its manifest's model; the
// parameters' checksums are checked again as they are read for the export.
// Writes each file atomically (a temporary file, fsync, rename, fsync of its
// directory), so a failure leaves no file; io_error names the path that
// could not be written. A LLaMA-family model to a .safetensors path, or a
// directory path that is a file, is invalid_argument before anything is written.
// dtype: "f32", "bf16" or "f16" (or another name parse_dtype knows for them);
// any other is bad_value, listing these. f16 tops out at 65504: a parameter
// larger in magnitude is bad_value naming the tensor and the value, rather
// than an inf written without a word.
void export_safetensors(const std::string &path, const std::string &out_file,
                        const std::string &dtype = "f32");

}  // namespace ptdp
