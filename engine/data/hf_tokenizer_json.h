// Parts of a Hugging Face tokenizer.json that more than one kind of tokenizer
// reads, and the cut at its special tokens (engine/data/bpe_tokenizer,
// sp_bpe_tokenizer).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ptdp {

// A TemplateProcessing post-processor's "single" template, [specials...,
// $A, specials...]: the ids of the special tokens before and after the text
// (from its "special_tokens"). Anything else, a pair-only template, a second
// sequence, a special token without ids, is corrupt_data naming `what`.
std::pair<std::vector<int32_t>, std::vector<int32_t>> template_specials(
    const nlohmann::json &post, const std::string &who, const std::string &what);

// model.merges: "left right" strings (older files) or ["left", "right"]
// pairs, in rank order; anything else is corrupt_data naming the merge.
std::vector<std::pair<std::string, std::string>> parse_merges(const nlohmann::json &merges,
                                                              const std::string &who,
                                                              const std::string &what);

// added_tokens: each one's content and id (lstrip, rstrip or single_word set,
// which ptdp does not apply, are refused by name).
std::vector<std::pair<std::string, int64_t>> parse_added_tokens(const nlohmann::json &tokenizer,
                                                                const std::string &who,
                                                                const std::string &what);

// Cuts text at its special tokens, as Hugging Face's tokenizers does before
// anything else: segment(piece, first) for the text between them (first: no
// special token before it), special(id) for each one found (the earliest; the
// longest of those starting there).
template <class Segment, class Special>
void cut_at_specials(std::string_view text,
                     const std::vector<std::pair<std::string, int32_t>> &specials,
                     Segment segment, Special special) {
  std::vector<size_t> next(specials.size());  // each one's next place, found once
  for (size_t k = 0; k < specials.size(); k++) next[k] = text.find(specials[k].first);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = std::string_view::npos, k_best = 0;
    for (size_t k = 0; k < specials.size(); k++) {
      if (next[k] != std::string_view::npos && next[k] < pos)
        next[k] = text.find(specials[k].first, pos);
      if (next[k] < best || (next[k] == best && next[k] != std::string_view::npos &&
                             specials[k].first.size() > specials[k_best].first.size())) {
        best = next[k];
        k_best = k;
      }
    }
    if (best == std::string_view::npos) {
      segment(text.substr(pos), pos == 0);
      return;
    }
    segment(text.substr(pos, best - pos), pos == 0);
    special(specials[k_best].second);
    pos = best + specials[k_best].first.size();
  }
}

}  // namespace ptdp
