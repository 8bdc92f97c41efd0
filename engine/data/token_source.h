// A tokenized corpus as the samplers see it: one stream of token ids cut into
// documents, whatever file format holds it. Two formats implement it:
//   - ptdp's own token dataset, one file (engine/data/dataset.h);
//   - Megatron-LM's indexed dataset, PREFIX.bin + PREFIX.idx
//     (engine/data/indexed_dataset.h).
// open_token_source() tells them apart by what is on disk (see its comment).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ptdp {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // What errors name: the file, or the Megatron prefix.
  virtual const std::string &path() const = 0;
  virtual const char *format_name() const = 0;  // "ptdp" or "megatron"
  // Every token id is in [0, vocab_size()): the declared vocabulary of a ptdp
  // file, the largest id + 1 of a Megatron dataset (its files do not say).
  virtual int vocab_size() const = 0;
  // The vocabulary_fingerprint of the tokenizer that made it (0: not recorded;
  // a Megatron dataset records none).
  virtual uint64_t vocabulary() const { return 0; }
  virtual uint64_t num_docs() const = 0;
  virtual uint64_t num_tokens() const = 0;
  // Token index where document d starts; d in [0, num_docs], the last is num_tokens.
  virtual uint64_t doc_offset(uint64_t d) const = 0;
  // Tokens [first, first + n) of the stream; the range must lie inside it.
  virtual void read(uint64_t first, size_t n, int32_t *out) const = 0;
};

// Opens a dataset named by `path`:
//   - a file starting with ptdp's magic "PTDPTOK": a ptdp token dataset;
//   - a file starting with Megatron's magic "MMIDIDX" (PREFIX.idx), or a
//     PREFIX.bin whose PREFIX.idx exists: the Megatron dataset PREFIX;
//   - no file `path` but PREFIX.idx or PREFIX.bin with PREFIX = path: that
//     Megatron dataset (the usual spelling, as Megatron's --data-path).
// Anything else is an error naming the path and what was expected.
std::shared_ptr<const TokenSource> open_token_source(const std::string &path);

// Throws invalid_config when the source holds ids the model cannot embed, or
// (a ptdp dataset, which records its tokenizer's vocabulary: its size and,
// since its header holds it, its vocabulary_fingerprint) was made by a
// tokenizer of another vocabulary than the run's (`vocabulary`: the run's
// tokenizer's fingerprint), saying which vocabulary is whose and what to change.
void check_source_vocab(const TokenSource &src, int model_vocab, const std::string &tokenizer,
                        int tokenizer_vocab, uint64_t vocabulary);

}  // namespace ptdp
