// GPT-2's byte-level BPE (Megatron's GPT2BPETokenizer), from vocab.json +
// merges.txt or from a Hugging Face tokenizer.json of that kind, or of LLaMA
// 3's (another pre-tokenization regex, special tokens added around a text). Text is cut
// at the special tokens (<|endoftext|> and any other added token of a
// tokenizer.json, which encode to their ids as in Hugging Face's tokenizers),
// then into GPT-2's pre-tokens (bpe_pretokenize), and each pre-token's bytes
// are merged by rank. Encoding gives the ids of Hugging Face's tokenizers.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/output_file.h"
#include "engine/data/bpe_merge.h"
#include "engine/data/bpe_word_cache.h"
#include "engine/data/tokenizer.h"

namespace ptdp {

// The end of the first pre-token of text[i..]: GPT-2's regex
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// over UTF-8 (a byte that is not valid UTF-8 counts as one "other" character).
size_t bpe_pretoken_end(std::string_view text, size_t i);
// The same for LLaMA 3's regex (a Split pre-tokenizer before ByteLevel):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t llama3_pretoken_end(std::string_view text, size_t i);

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  static std::unique_ptr<Gpt2BpeTokenizer> from_vocab_merges(const std::string &vocab_file,
                                                             const std::string &merge_file);
  // any_byte_level: also LLaMA 3's kind (its Split pre-tokenizer, then
  // ByteLevel without its regex; a TemplateProcessing post-processor that adds
  // special tokens around each encoded text), as HuggingFaceTokenizer takes it.
  static std::unique_ptr<Gpt2BpeTokenizer> from_tokenizer_json(const std::string &path,
                                                               bool any_byte_level = false);
  // Whether a tokenizer.json's pre-tokenizer is byte-level (GPT-2's ByteLevel,
  // LLaMA 3's Split + ByteLevel): the kind it declares, whatever else it holds.
  static bool declares_byte_level(const std::string &path);

  std::string name() const override { return name_; }
  int vocab_size() const override { return (int)token_bytes_.size(); }
  int32_t eod() const override { return eod_; }
  std::vector<int32_t> encode(std::string_view text) const override;
  // A word cache of the caller's own: encode_with takes no lock.
  std::unique_ptr<Cache> new_cache() const override;
  std::vector<int32_t> encode_with(std::string_view text, Cache &cache) const override;
  // Ids outside the vocabulary (the model's padding) are skipped.
  std::string decode(const int32_t *tokens, size_t n) const override;

 private:
  Gpt2BpeTokenizer() = default;
  // vocab: GPT-2's byte-alphabet strings and their ids; merges in rank order.
  void build(const std::vector<std::pair<std::string, int64_t>> &vocab,
             const std::vector<std::pair<std::string, std::string>> &merges,
             const std::string &what);
  void add_special(const std::string &content, int64_t id, const std::string &what);
  void check_template_id(int32_t id, const std::string &what) const;
  std::vector<int32_t> encode_cached(std::string_view text, BpeWordCache &cache) const;
  void encode_segment(std::string_view text, BpeWordCache &cache, std::vector<int32_t> &out) const;
  void merge_word(std::string_view word, std::vector<int32_t> &ids) const;

  std::vector<InputFile> files_;                  // read from: no output may overwrite them
  std::vector<std::string> token_bytes_;          // id -> bytes ("" for an unused id)
  std::unordered_map<std::string, int32_t> ids_;  // bytes -> id (the model's vocabulary)
  BpeMerges merges_;
  int32_t byte_id_[256] = {};
  std::vector<std::pair<std::string, int32_t>> specials_;  // cut out of the text first
  int32_t eod_ = -1;
  bool ignore_merges_ = false;  // tokenizer.json: a word in the vocabulary is one token
  size_t (*pretoken_end_)(std::string_view, size_t) = bpe_pretoken_end;  // GPT-2's or LLaMA 3's
  std::vector<int32_t> prefix_, suffix_;  // the post-processor's special tokens around a text
  std::string name_ = "GPT2BPETokenizer";

  // encode()'s cache, shared by the threads calling it.
  mutable std::mutex mu_;
  mutable BpeWordCache shared_cache_{this};
};

}  // namespace ptdp
