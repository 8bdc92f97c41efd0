// Words seen before and their ids, for the BPE tokenizers (bpe_tokenizer,
// sp_bpe_tokenizer): text repeats its words, and merging is the slow part. One
// cache a thread (Tokenizer::new_cache); encode() shares one behind a lock.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/status.h"
#include "engine/data/tokenizer.h"

namespace ptdp {

struct BpeWordCache final : Tokenizer::Cache {
  static constexpr size_t kMaxWord = 256;        // longer words are merged every time
  static constexpr size_t kMaxEntries = 1 << 20;  // then the cache starts over

  // owner: the tokenizer whose ids it holds (another's would be wrong ids).
  explicit BpeWordCache(const Tokenizer *owner) : owner(owner) {}
  const Tokenizer *const owner;

  // Appends the ids of `word` to out: the cached ones, or merge(word, ids)'s
  // (kept for next time when the word is short enough).
  template <class Merge>
  void encode(std::string_view word, std::vector<int32_t> &out, Merge merge) {
    const bool cacheable = word.size() <= kMaxWord;
    if (cacheable) {
      key_.assign(word.data(), word.size());
      auto it = ids_.find(key_);
      if (it != ids_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids;
    merge(word, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
      if (ids_.size() >= kMaxEntries) ids_.clear();
      ids_.emplace(key_, std::move(ids));
    }
  }

 private:
  std::unordered_map<std::string, std::vector<int32_t>> ids_;
  std::string key_;  // the lookup key, its buffer reused
};

// The cache tokenizer t's encode_with was given, or an error: a cache of
// another tokenizer, even of the same kind, holds other ids.
inline BpeWordCache &bpe_word_cache(Tokenizer::Cache &cache, const Tokenizer &t) {
  auto *words = dynamic_cast<BpeWordCache *>(&cache);
  if (!words || words->owner != &t)
    fail(Status::invalid_argument, t.name(),
         "::encode_with: the cache is not from this tokenizer's new_cache()");
  return *words;
}

}  // namespace ptdp
