// Megatron-LM's indexed dataset (MMapIndexedDataset): PREFIX.bin holds the
// token ids, PREFIX.idx says where each sequence lies and how sequences make
// documents. Read for training, written by `ptdp tokenize --output-prefix`,
// byte for byte as Megatron's own builder writes it.
//
// PREFIX.idx, little-endian, packed (no padding):
//   char[9]  magic "MMIDIDX\0\0"
//   u64      version, 1
//   u8       dtype code of the tokens in .bin: 1 uint8, 2 int8, 3 int16,
//            4 int32, 5 int64, 6 float64, 7 float32, 8 uint16
//   u64      S, the sequence count
//   u64      D, the document-index length (documents + 1)
//   i32[S]   sequence lengths, in tokens
//   i64[S]   sequence pointers, byte offsets into .bin
//   i64[D]   document index: sequence numbers where documents start, from 0,
//            non-decreasing, ending with S (an empty document repeats a value)
//   i8[S]    only in multimodal datasets: a mode per sequence (ignored here)
// PREFIX.bin: the tokens, nothing else; the builder writes the sequences back
// to back, so pointer[i] = (tokens before sequence i) x dtype size. An index
// whose pointers say otherwise is refused on open, naming the first sequence.
//
// Megatron's tools pick uint16 when the vocabulary has fewer than 65500 ids
// and int32 otherwise; ptdp does the same.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/mapped_file.h"
#include "engine/core/output_file.h"
#include "engine/data/token_source.h"

namespace ptdp {

constexpr uint64_t kIndexedDatasetVersion = 1;
constexpr size_t kIndexedHeaderBytes = 34;  // magic 9 + version 8 + dtype 1 + S 8 + D 8

// The dtype code Megatron's tools use for a vocabulary of this size.
uint8_t indexed_dtype_for_vocab(int vocab_size);

class IndexedDataset final : public TokenSource {
 public:
  // prefix: the path without ".bin"/".idx". Throws io_error (cannot open) or
  // corrupt_data naming the file and what is wrong; never reads out of bounds.
  explicit IndexedDataset(const std::string &prefix);
  IndexedDataset(const IndexedDataset &) = delete;
  IndexedDataset &operator=(const IndexedDataset &) = delete;

  const std::string &path() const override { return prefix_; }
  const char *format_name() const override { return "megatron"; }
  int vocab_size() const override { return vocab_size_; }
  uint64_t num_docs() const override { return num_docs_; }
  uint64_t num_tokens() const override { return num_tokens_; }
  uint64_t doc_offset(uint64_t d) const override;
  void read(uint64_t first, size_t n, int32_t *out) const override;

  uint8_t dtype_code() const { return dtype_; }
  uint64_t num_sequences() const { return num_seqs_; }

 private:
  uint64_t seq_start(uint64_t s) const;  // token index where sequence s starts
  int64_t load_token(uint64_t token) const;  // the int64 check

  std::string prefix_;
  InputFile idx_input_, bin_input_;  // no output of the run may overwrite them
  MappedFile idx_file_, bin_file_;  // PREFIX.idx, PREFIX.bin
  uint8_t dtype_ = 0;
  size_t token_bytes_ = 0;
  uint64_t num_seqs_ = 0, num_docs_ = 0, num_tokens_ = 0;
  const unsigned char *lengths_ = nullptr, *pointers_ = nullptr, *doc_index_ = nullptr;
  // The sequences lie back to back from byte 0 (checked on open): token i is
  // at byte i x size.
  int vocab_size_ = 0;
};

// Writes one Megatron indexed dataset, PREFIX.bin + PREFIX.idx. Tokens go to a
// temporary .bin as documents come; prepare() writes the index and fsyncs
// both, commit() puts them in place (.bin first, then .idx, which readers
// open first: put_in_place, which also finds another command's pair put there
// at the same moment); finish() is both. Several datasets of one command (its
// json keys) are all prepared, then their staged() files put in place together
// (engine/data/indexed_tokenize.cpp). Without a commit (an error on the way)
// nothing is left behind.
class IndexedDatasetWriter {
 public:
  // vocab_size picks the dtype and bounds the ids. The targets are checked
  // like every writer's (engine/core/output_file.h), and must not be any of
  // `inputs`.
  IndexedDatasetWriter(const std::string &prefix, int vocab_size,
                       const std::vector<std::string> &inputs);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter &) = delete;
  IndexedDatasetWriter &operator=(const IndexedDatasetWriter &) = delete;

  // One document made of sequences (one sequence per document unless
  // sentences were split). Empty sequences are not stored; a document with no
  // tokens still counts, as Megatron's builder records it.
  void add_document(const std::vector<std::vector<int32_t>> &sequences);
  void prepare();
  void commit();
  void finish() { prepare(), commit(); }
  // The prepared temporaries and their targets, for the caller to put in
  // place (put_in_place): from then on they are the caller's.
  std::vector<std::pair<std::string, std::string>> staged();

  const std::string &bin_path() const { return bin_path_; }
  const std::string &idx_path() const { return idx_path_; }
  uint64_t num_docs() const { return doc_index_.size() - 1; }
  uint64_t num_tokens() const { return num_tokens_; }

 private:
  void flush();

  std::vector<InputFile> inputs_;  // what is being tokenized: no output may be one
  // Its two files, refused to every other writer of the command (another
  // json key's dataset through a link, say) while it writes them.
  OutputClaim bin_claim_, idx_claim_;
  std::string bin_path_, idx_path_, bin_tmp_, idx_tmp_;
  int fd_ = -1;
  int vocab_size_;
  uint8_t dtype_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_index_{0};
  std::vector<unsigned char> buf_;
  uint64_t num_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace ptdp
