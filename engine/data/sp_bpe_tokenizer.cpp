#include "engine/data/sp_bpe_tokenizer.h"

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/core/json_text.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/data/bpe_merge.h"
#include "engine/data/hf_tokenizer_json.h"

namespace ptdp {

namespace {

using json = nlohmann::json;
constexpr int64_t kMaxVocab = 1 << 24;
const std::string kSpace = "\u2581";  // "▁", SentencePiece's space

std::string read_text(const std::string &path) {
  return read_small_file(path, "tokenizer file '" + path + "'", "HuggingFaceTokenizer: ");
}

// The length of the UTF-8 character at s[i] (1 for a byte that starts none).
size_t char_len(std::string_view s, size_t i) {
  const unsigned char c = (unsigned char)s[i];
  const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + len > s.size()) return 1;
  for (size_t k = 1; k < len; k++)
    if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 1;
  return len;
}

std::string replaced_spaces(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == ' ')
      out += kSpace;
    else
      out.push_back(c);
  }
  return out;
}

bool is_normalizer_form(const json &n) {  // Sequence [Prepend "▁", Replace " " -> "▁"]
  if (!n.is_object() || n.value("type", "") != "Sequence" || !n.contains("normalizers")) return false;
  const json &s = n["normalizers"];
  return s.is_array() && s.size() == 2 && s[0].is_object() && s[1].is_object() &&
         s[0].value("type", "") == "Prepend" && s[0].value("prepend", "") == kSpace &&
         s[1].value("type", "") == "Replace" && s[1].contains("pattern") &&
         s[1]["pattern"].is_object() && s[1]["pattern"].value("String", "") == " " &&
         s[1].value("content", "") == kSpace;
}

}  // namespace

bool SpBpeTokenizer::is_its_kind(const std::string &path) {
  try {
    const json j = parse_json_or_discard(read_text(path));
    if (!j.is_object()) return false;
    const json pre = j.value("pre_tokenizer", json()), norm = j.value("normalizer", json());
    const bool fallback = j.contains("model") && j["model"].is_object() &&
                          j["model"].value("byte_fallback", false);
    return (pre.is_object() && pre.value("type", "") == "Metaspace") || norm.is_object() || fallback;
  } catch (const json::exception &) {
    return false;
  }
}

std::unique_ptr<SpBpeTokenizer> SpBpeTokenizer::from_tokenizer_json(const std::string &path) {
  const std::string what = "tokenizer file '" + path + "'";
  const json j = parse_json_text(read_text(path), "HuggingFaceTokenizer: " + what);
  auto unsupported = [&](const std::string &part, const json &v, const char *allowed) {
    fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, ": ", part, " is ", json_excerpt(v),
         "; a SentencePiece-style BPE has ", allowed);
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, " has no \"model\" object");
  const json &m = j["model"];
  auto t = std::unique_ptr<SpBpeTokenizer>(new SpBpeTokenizer());
  t->files_.emplace_back(path, "tokenizer file");
  if (m.value("type", "BPE") != "BPE") unsupported("model.type", m["type"], "\"BPE\"");
  if (!m.value("byte_fallback", false)) unsupported("model.byte_fallback", m.value("byte_fallback", json()), "true");
  for (const char *k : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null()) unsupported(std::string("model.") + k, m[k], "null");
  if (m.value("ignore_merges", false)) unsupported("model.ignore_merges", m["ignore_merges"], "false");
  const json pre = j.value("pre_tokenizer", json()), norm = j.value("normalizer", json());
  if (pre.is_object() && pre.value("type", "") == "Metaspace" && norm.is_null()) {
    if (pre.value("replacement", "") != kSpace) unsupported("pre_tokenizer", pre, "replacement \"▁\"");
    const std::string scheme = pre.value("prepend_scheme", "always");
    if (scheme != "first" && scheme != "always" && scheme != "never")
      unsupported("pre_tokenizer", pre, "prepend_scheme first, always or never");
    t->prepend_ = scheme == "first" ? Prepend::first : scheme == "always" ? Prepend::always : Prepend::never;
    t->split_ = pre.value("split", true);
  } else if (pre.is_null() && is_normalizer_form(norm)) {
    t->metaspace_ = false;
  } else {
    unsupported("its pre_tokenizer and normalizer", json{{"pre_tokenizer", pre}, {"normalizer", norm}},
                "a Metaspace pre-tokenizer, or a normalizer Sequence [Prepend \"▁\", Replace \" \" -> "
                "\"▁\"] without one");
  }
  // The vocabulary, then the merges by rank.
  if (!m.contains("vocab") || !m["vocab"].is_object() || !m.contains("merges") || !m["merges"].is_array())
    fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what,
         ": model needs \"vocab\" (an object) and \"merges\" (a list)");
  auto add_piece = [&](const std::string &piece, int64_t id, bool special) {
    if (id < 0 || id >= kMaxVocab)
      fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, ": '", piece, "' has id ", id,
           "; ids must be in [0, ", kMaxVocab, ")");
    if ((size_t)id >= t->pieces_.size()) t->pieces_.resize(id + 1);
    if (!t->pieces_[id].empty() && t->pieces_[id] != piece)
      fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, ": '", t->pieces_[id], "' and '",
           piece, "' have the same id ", id);
    t->pieces_[id] = piece;
    if (special) {
      t->specials_.emplace_back(piece, (int32_t)id);
    } else if (!t->ids_.emplace(piece, (int32_t)id).second && t->ids_[piece] != id) {
      fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, ": '", piece, "' appears twice");
    }
  };
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer())
      fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, ": token '", it.key(),
           "' has a ", it.value().type_name(), " for its id; ids are integers");
    if (it.key().empty()) fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, ": an empty token");
    add_piece(it.key(), it.value().get<int64_t>(), false);
  }
  for (int b = 0; b < 256; b++) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = t->ids_.find(name);
    if (it == t->ids_.end())
      fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, " lacks the byte token ", name,
           ": byte fallback needs all 256");
    t->byte_id_[b] = it->second;
  }
  int32_t rank = 0;
  for (const auto &[a, b] : parse_merges(m["merges"], "HuggingFaceTokenizer", what)) {
    auto ia = t->ids_.find(a), ib = t->ids_.find(b), im = t->ids_.find(a + b);
    if (ia == t->ids_.end() || ib == t->ids_.end() || im == t->ids_.end())
      fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, ": merge ", rank + 1, " '", a, " ",
           b, "' is not two tokens of the vocabulary whose join is one");
    t->merges_[bpe_pair(ia->second, ib->second)] = {rank++, im->second};
  }
  for (const auto &[content, id] : parse_added_tokens(j, "HuggingFaceTokenizer", what))
    add_piece(content, id, true);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = t->ids_.find(m["unk_token"].get<std::string>());
    for (const auto &[content, id] : t->specials_)
      if (content == m["unk_token"].get<std::string>()) t->unk_ = id;
    if (t->unk_ < 0 && it != t->ids_.end()) t->unk_ = it->second;
  }
  t->fuse_unk_ = m.value("fuse_unk", false);
  const json post = j.value("post_processor", json());
  if (post.is_object() && post.value("type", "") == "TemplateProcessing") {
    std::tie(t->prefix_, t->suffix_) = template_specials(post, "HuggingFaceTokenizer", what);
    for (const auto *ids : {&t->prefix_, &t->suffix_})
      for (int32_t id : *ids)
        if ((size_t)id >= t->pieces_.size() || t->pieces_[id].empty())
          fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what, ": the post_processor adds id ",
               id, ", which is no token");
  } else if (!post.is_null()) {
    unsupported("post_processor", post, "none or TemplateProcessing");
  }
  for (const auto &[content, id] : t->specials_)
    if (content == "</s>") t->eod_ = id;
  if (t->eod_ < 0 && t->ids_.count("</s>")) t->eod_ = t->ids_["</s>"];
  if (t->eod_ < 0)
    fail(Status::corrupt_data, "HuggingFaceTokenizer: ", what,
         " has no </s> token (the end-of-document token)");
  return t;
}

std::vector<int32_t> SpBpeTokenizer::encode(std::string_view text) const {
  std::lock_guard<std::mutex> lock(mu_);
  return encode_cached(text, shared_cache_);
}

std::unique_ptr<Tokenizer::Cache> SpBpeTokenizer::new_cache() const {
  return std::make_unique<BpeWordCache>(this);
}

std::vector<int32_t> SpBpeTokenizer::encode_with(std::string_view text, Cache &cache) const {
  return encode_cached(text, bpe_word_cache(cache, *this));
}

std::vector<int32_t> SpBpeTokenizer::encode_cached(std::string_view text, BpeWordCache &cache) const {
  std::vector<int32_t> out(prefix_);
  cut_at_specials(
      text, specials_,
      [&](std::string_view piece, bool first) { encode_segment(piece, first, cache, out); },
      [&](int32_t id) { out.push_back(id); });
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

void SpBpeTokenizer::encode_segment(std::string_view text, bool first, BpeWordCache &cache,
                                    std::vector<int32_t> &out) const {
  if (text.empty()) return;
  auto word = [&](std::string_view w) {
    cache.encode(w, out, [&](std::string_view x, std::vector<int32_t> &ids) { merge_word(x, ids); });
  };
  std::string s = replaced_spaces(text);
  if (!metaspace_) {  // the normalizer: "▁" before every segment, one word
    word(kSpace + s);
    return;
  }
  // Metaspace: "▁" before the first segment (or every one), unless it starts with one.
  const bool prepend = prepend_ == Prepend::always || (prepend_ == Prepend::first && first);
  if (prepend && s.compare(0, kSpace.size(), kSpace) != 0) s = kSpace + s;
  if (!split_) {
    word(s);
    return;
  }
  // Words begin at each "▁" (it joins the word after it).
  size_t start = 0;
  for (size_t i = char_len(s, 0); i + kSpace.size() <= s.size();) {
    if (s.compare(i, kSpace.size(), kSpace) == 0) {
      if (i > start) word(std::string_view(s).substr(start, i - start));
      start = i;
      i += kSpace.size();
    } else {
      i += char_len(s, i);
    }
  }
  word(std::string_view(s).substr(start));
}

// One symbol per character, merged; a character outside the vocabulary is its
// bytes' tokens.
void SpBpeTokenizer::merge_word(std::string_view word, std::vector<int32_t> &ids) const {
  for (size_t i = 0; i < word.size();) {
    const size_t len = char_len(word, i);
    auto it = ids_.find(std::string(word.substr(i, len)));
    if (it != ids_.end()) {
      ids.push_back(it->second);
    } else {
      for (size_t k = 0; k < len; k++) ids.push_back(byte_id_[(unsigned char)word[i + k]]);
    }
    i += len;
  }
  bpe_merge(ids, merges_);
}

std::string SpBpeTokenizer::decode(const int32_t *tokens, size_t n) const {
  std::string out;
  for (size_t i = 0; i < n; i++) {
    if (tokens[i] < 0 || (size_t)tokens[i] >= pieces_.size()) continue;  // the model's padding
    const std::string &p = pieces_[tokens[i]];
    unsigned byte = 0;
    if (p.size() == 6 && std::sscanf(p.c_str(), "<0x%2X>", &byte) == 1 && byte_id_[byte] == tokens[i])
      out.push_back((char)byte);
    else
      out += p;
  }
  // "▁" is a space; the one prepended to the text is not the text's.
  std::string text;
  for (size_t i = 0; i < out.size();) {
    if (out.compare(i, kSpace.size(), kSpace) == 0) {
      text.push_back(' ');
      i += kSpace.size();
    } else {
      text.push_back(out[i++]);
    }
  }
  if (!text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

}  // namespace ptdp
