// The token dataset file: documents of token ids, memory-mapped, validated on open.
//
//   offset 0   header (64 bytes, little-endian):
//              magic "PTDPTOK\0" | u32 version (1) | u32 token bytes (2 or 4)
//              | u32 vocab_size | u32 reserved | u64 num_docs | u64 num_tokens | u8[24] zero
//   then       u64 doc_offsets[num_docs + 1]  (token index where each document starts)
//   then       tokens (u16 or u32)[num_tokens]; every document ends with the EOD token
//
// Files are written to a temporary name, fsynced and renamed: never half-written.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/mapped_file.h"
#include "engine/core/output_file.h"
#include "engine/data/token_source.h"

namespace ptdp {

constexpr uint32_t kTokenDatasetVersion = 1;

// Writes documents (already tokenized, EOD included) atomically, recording the
// tokenizer's vocabulary_fingerprint (0: none). new_only: a file there by
// then (another command made it meanwhile) is not replaced: Error(io_error),
// this one's file gone (put_in_place).
void write_token_dataset(const std::string &path, const std::vector<std::vector<int32_t>> &docs,
                         int vocab_size, uint64_t vocabulary = 0, bool new_only = false);

class TokenDataset final : public TokenSource {
 public:
  explicit TokenDataset(const std::string &path);  // throws io_error / corrupt_data
  TokenDataset(const TokenDataset &) = delete;
  TokenDataset &operator=(const TokenDataset &) = delete;

  const std::string &path() const override { return path_; }
  const char *format_name() const override { return "ptdp"; }
  int vocab_size() const override { return vocab_size_; }
  uint64_t vocabulary() const override { return vocabulary_; }
  uint64_t num_docs() const override { return num_docs_; }
  uint64_t num_tokens() const override { return num_tokens_; }
  uint64_t doc_offset(uint64_t d) const override { return offsets_[d]; }  // d in [0, num_docs]
  void read(uint64_t first, size_t n, int32_t *out) const override {
    for (size_t i = 0; i < n; i++) out[i] = token(first + i);
  }
  int32_t token(uint64_t i) const {
    return token_bytes_ == 2 ? (int32_t)((const uint16_t *)tokens_)[i]
                             : (int32_t)((const uint32_t *)tokens_)[i];
  }

 private:
  std::string path_;
  InputFile input_;  // no output of the run may overwrite it
  MappedFile file_;  // the whole dataset
  int vocab_size_ = 0;
  uint64_t vocabulary_ = 0;
  uint32_t token_bytes_ = 0;
  uint64_t num_docs_ = 0, num_tokens_ = 0;
  const uint64_t *offsets_ = nullptr;
  const void *tokens_ = nullptr;
};

}  // namespace ptdp
