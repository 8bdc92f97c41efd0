// The SentencePiece-style BPE of LLaMA 2 and Mistral, from a Hugging Face
// tokenizer.json: spaces become "▁" (a Metaspace pre-tokenizer that also cuts
// the text into words at each "▁", or a Prepend + Replace normalizer over the
// whole text), words are merged by rank over their characters, and a
// character the vocabulary lacks becomes its UTF-8 bytes' <0xXX> tokens (byte
// fallback). Added tokens are cut out of the text first; a TemplateProcessing
// post-processor puts its special tokens (<s>) around each encoded text. The
// ids are those of Hugging Face's tokenizers.
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

class SpBpeTokenizer final : public Tokenizer {
 public:
  // Whether the tokenizer.json at path is of this kind (a Metaspace
  // pre-tokenizer, a normalizer, or byte fallback); false too when it cannot
  // be read as JSON (the byte-level reader then says why).
  static bool is_its_kind(const std::string &path);
  static std::unique_ptr<SpBpeTokenizer> from_tokenizer_json(const std::string &path);

  std::string name() const override { return "HuggingFaceTokenizer"; }
  int vocab_size() const override { return (int)pieces_.size(); }
  int32_t eod() const override { return eod_; }  // </s>
  std::vector<int32_t> encode(std::string_view text) const override;
  // A word cache of the caller's own: encode_with takes no lock.
  std::unique_ptr<Cache> new_cache() const override;
  std::vector<int32_t> encode_with(std::string_view text, Cache &cache) const override;
  std::string decode(const int32_t *tokens, size_t n) const override;

 private:
  SpBpeTokenizer() = default;
  std::vector<int32_t> encode_cached(std::string_view text, BpeWordCache &cache) const;
  void encode_segment(std::string_view text, bool first, BpeWordCache &cache,
                      std::vector<int32_t> &out) const;
  void merge_word(std::string_view word, std::vector<int32_t> &ids) const;

  std::vector<InputFile> files_;
  std::vector<std::string> pieces_;                  // id -> piece ("" for an unused id)
  std::unordered_map<std::string, int32_t> ids_;     // piece -> id
  BpeMerges merges_;
  int32_t byte_id_[256] = {};                        // <0xXX>
  std::vector<std::pair<std::string, int32_t>> specials_;
  std::vector<int32_t> prefix_, suffix_;
  int32_t eod_ = -1, unk_ = -1;
  bool fuse_unk_ = false;
  // Metaspace (a pre-tokenizer: words cut at "▁"; prepend "▁" to the first
  // segment or every one) or the normalizer form (prepend to every segment,
  // one word).
  bool metaspace_ = true, split_ = true;
  enum class Prepend { first, always, never } prepend_ = Prepend::first;

  // encode()'s cache, shared by the threads calling it.
  mutable std::mutex mu_;
  mutable BpeWordCache shared_cache_{this};
};

}  // namespace ptdp
