// `ptdp ckpt import-safetensors`: the reverse of the export. A Hugging Face
// model becomes a ptdp checkpoint at iteration 0, Adam's moments zero:
//  - GPT-2 (one safetensors file: GPT2Model or GPT2LMHeadModel names, with or
//    without the "transformer." prefix; the four Conv1D weights go from [in,
//    out] to ptdp's [out, in], c_attn's outputs from GPT-2's [3, a, hd] to
//    ptdp's per-head [a, 3, hd]);
//  - the LLaMA family (config model_type llama, mistral or qwen2; one file or
//    the shards of model.safetensors.index.json): checkpoints/llama_import.h.
// F32, F16 or BF16, widened to float32. The checkpoint is saved in layout
// (t=1, p=1, d=1, v=1) with the vocabulary unpadded, as every checkpoint is,
// so it loads into any layout (the loading run pads the vocabulary with zero
// rows to its own make_vocab_size_divisible_by).
#pragma once
#include <cstddef>
#include <string>

#include "engine/model/gpt_config.h"

namespace ptdp {

// file: a model directory (config.json with model.safetensors or
// model.safetensors.index.json), an index, or a .safetensors file.
// config_json: its config.json; "" takes config.json beside the weights (for a
// GPT-2 file, its own "gpt2_config" metadata first: what export_safetensors
// writes). dir: the save directory; the checkpoint goes to
// dir/iter_0000000, committed atomically (a failure leaves no checkpoint).
// Errors:
//  - invalid_config: a config field missing or unsupported (named, with what
//    is supported), a tensor missing, of the wrong shape or not one of GPT-2's
//    (named, with the shape the config makes it), an untied lm_head, or a dir
//    holding another run's checkpoints or any checkpoint past iteration 0;
//  - bad_value: a tensor dtype other than F32, F16, BF16;
//  - corrupt_data: a file that is not valid safetensors or JSON;
//  - io_error: a file that cannot be read, a dir that cannot be written.
// Returns the checkpoint's directory.
std::string import_safetensors(const std::string &file, const std::string &config_json,
                               const std::string &dir);

// What import_safetensors checks before it writes anything, on a file's bytes
// in memory (for the fuzzer): the header, the GPT2Config of its gpt2_config
// metadata (no config.json is looked for), every tensor's name, shape and
// dtype. `file` names it in errors. Throws as import_safetensors; returns the config.
GptConfig check_safetensors(const unsigned char *data, size_t size, const std::string &file);

// The GptConfig of a GPT2Config given as JSON text; `where` names it in errors.
// seq_length and max_position_embeddings are n_positions.
GptConfig gpt_config_from_gpt2(const std::string &json_text, const std::string &where);

}  // namespace ptdp
