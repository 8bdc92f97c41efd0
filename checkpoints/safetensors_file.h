// Reading Hugging Face safetensors files and writing what an import makes:
// shared by the GPT-2 import (safetensors_import.cpp) and the LLaMA family's
// (llama_import.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/model/gpt.h"

namespace ptdp {

// One tensor of a mapped file (its bytes stay in the mapping).
struct SourceTensor {
  std::string dtype;  // as the file says: "F32", "BF16", ...
  std::vector<int64_t> shape;
  const unsigned char *data = nullptr;
  uint64_t bytes = 0;
};

// The header of a safetensors file: 8 bytes little-endian N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}},
// then the data the offsets count from.
struct Safetensors {
  nlohmann::json metadata = nlohmann::json::object();
  std::map<std::string, SourceTensor> tensors;
};

// The header checked against the data (corrupt_data naming `file` otherwise).
Safetensors parse_safetensors(const std::string &file, const unsigned char *data, size_t size);
// bad_value unless F32, F16 or BF16.
void check_dtype(const std::string &file, const std::string &name, const SourceTensor &t);
// The tensor's values as float32 (16-bit values widen exactly).
std::vector<float> widen(const std::string &file, const std::string &name, const SourceTensor &t);
// A config.json's or an index's text: a regular file of at most 64 MiB
// (io_error naming the path otherwise).
std::string read_text(const std::string &path);
// What an import records of its source in the manifest's training fields:
// "imported_from" (the weights file, canonical), "imported_file" (its size
// and modification time), so that an import of other weights from the same
// path is another run's, not a replacement of the earlier import, and its
// lineage (checkpoints/save_target.h).
std::map<std::string, std::string> imported_source(const std::string &weights);
// The tokenizer an import records (kTokenizerTypeKey, kTokenizerVocabularyKey):
// the vocabulary of a tokenizer.json beside the weights (the model's, as for
// from_pretrained; one that does not read as a HuggingFaceTokenizer records
// nothing), else a ptdp export's own record from its safetensors metadata (a
// note when the two disagree). The record survives an export and import, so
// another vocabulary is refused as it is for the checkpoint.
void record_tokenizer(const std::string &weights, const nlohmann::json &metadata,
                      std::map<std::string, std::string> &training);
// A file's size and modification time as imports record it ("" when absent):
// the source model still told apart when it was moved or renamed.
std::string file_record(const std::string &path);

// Refuses a directory whose newest checkpoint is another run's, or past
// iteration 0 (the import would become the newest and hide it).
void check_import_target(const std::string &dir, const GptConfig &cfg,
                         const std::map<std::string, std::string> &training);
// Saves `params` (the whole model in the flat layout of `table`, vocabulary
// padding rows zero) as the checkpoint of iteration 0 in dir, Adam's moments zero.
std::string save_imported(const std::string &dir, const GptConfig &cfg,
                          const std::vector<ParamInfo> &table, std::vector<float> &params,
                          const std::map<std::string, std::string> &training);

}  // namespace ptdp
