#include "engine/data/bpe_tokenizer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/json_text.h"
#include "engine/core/mapped_file.h"
#include "engine/core/status.h"
#include "engine/data/bpe_merge.h"
#include "engine/data/bpe_unicode.h"
#include "engine/data/hf_tokenizer_json.h"

namespace ptdp {

namespace {

constexpr int64_t kMaxVocab = 1 << 24;

// GPT-2's byte alphabet: a printable byte stands for itself; the others
// (controls, space, 0x7F..0xA0, 0xAD) for U+0100 onwards, in byte order, so
// that every token of vocab.json is printable text.
struct ByteAlphabet {
  uint32_t cp_of[256];
  int16_t byte_of[512];  // code point -> byte, -1 when none
  ByteAlphabet() {
    std::fill(byte_of, byte_of + 512, (int16_t)-1);
    int n = 0;
    for (int b = 0; b < 256; b++) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      cp_of[b] = printable ? b : 256 + n++;
      byte_of[cp_of[b]] = (int16_t)b;
    }
  }
};
const ByteAlphabet kAlphabet;

// Decodes the UTF-8 character at s[i]: its length, and its code point in cp.
// A byte that does not start a valid sequence is one character of its own,
// with a code point no class holds.
size_t utf8_next(std::string_view s, size_t i, uint32_t &cp) {
  const unsigned char c = (unsigned char)s[i];
  size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 1) {
    cp = c;
    return 1;
  }
  if (len == 0 || c < 0xC2 || c > 0xF4 || i + len > s.size()) {
    cp = 0xFFFFFFFF;
    return 1;
  }
  cp = c & (0x7F >> len);
  for (size_t k = 1; k < len; k++) {
    const unsigned char d = (unsigned char)s[i + k];
    if ((d & 0xC0) != 0x80) {
      cp = 0xFFFFFFFF;
      return 1;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  return len;
}

UnicodeClass class_at(std::string_view s, size_t i, size_t &len) {
  uint32_t cp;
  len = utf8_next(s, i, cp);
  return unicode_class(cp);
}

std::string read_file(const std::string &path, const char *what) {
  return read_small_file(path, std::string(what) + " '" + path + "'", "GPT2BPETokenizer: ");
}

nlohmann::json parse_json(const std::string &text, const std::string &what) {
  return parse_json_text(text, "GPT2BPETokenizer: " + what);
}

// A vocabulary object {"token": id, ...} as a list.
std::vector<std::pair<std::string, int64_t>> vocab_of(const nlohmann::json &j,
                                                      const std::string &what) {
  if (!j.is_object())
    fail(Status::corrupt_data, "GPT2BPETokenizer: ", what,
         " must be a JSON object of token: id, got ", j.is_array() || j.is_object() ? "an " : "a ", j.type_name());
  std::vector<std::pair<std::string, int64_t>> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it.value().is_number_integer())
      fail(Status::corrupt_data, "GPT2BPETokenizer: ", what, ": token '", it.key(), "' has a ",
           it.value().type_name(), " for its id; ids are integers");
    out.emplace_back(it.key(), it.value().get<int64_t>());
  }
  return out;
}

bool null_or(const nlohmann::json &obj, const char *key, const nlohmann::json &allowed) {
  if (!obj.contains(key) || obj[key].is_null()) return true;
  return obj[key] == allowed;
}

}  // namespace

UnicodeClass unicode_class(uint32_t cp) {
  // ASCII from a table made once; the rest by binary search over the ranges.
  static const auto ascii = [] {
    std::vector<UnicodeClass> t(128, kOther);
    for (int i = 0; i < kNumUnicodeRanges && kUnicodeRanges[i].lo < 128; i++)
      for (uint32_t c = kUnicodeRanges[i].lo; c <= kUnicodeRanges[i].hi && c < 128; c++)
        t[c] = kUnicodeRanges[i].cls;
    return t;
  }();
  if (cp < 128) return ascii[cp];
  int lo = 0, hi = kNumUnicodeRanges - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    if (cp < kUnicodeRanges[mid].lo)
      hi = mid - 1;
    else if (cp > kUnicodeRanges[mid].hi)
      lo = mid + 1;
    else
      return kUnicodeRanges[mid].cls;
  }
  return kOther;
}

size_t bpe_pretoken_end(std::string_view s, size_t i) {
  const size_t n = s.size();
  // 's 't 're 've 'm 'll 'd (lower case only, as GPT-2's regex)
  if (s[i] == '\'' && i + 1 < n) {
    const char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  size_t len;
  UnicodeClass cls = class_at(s, i, len);
  size_t j = i + len;
  // ` ?X+`: a space joins the run of letters, numbers or other characters after it.
  if (s[i] == ' ' && j < n) {
    size_t len2;
    const UnicodeClass next = class_at(s, j, len2);
    if (next != kSpace) {
      cls = next;
      j += len2;
    }
  }
  if (cls != kSpace) {
    while (j < n && class_at(s, j, len) == cls) j += len;
    return j;
  }
  // Whitespace: `\s+(?!\S)` keeps the last space of a run for the word after
  // it (when the run has two or more); at the end of the text the run is whole.
  size_t last = i;
  while (j < n && class_at(s, j, len) == kSpace) {
    last = j;
    j += len;
  }
  if (j == n || last == i) return j;
  return last;
}

size_t llama3_pretoken_end(std::string_view s, size_t i) {
  const size_t n = s.size();
  auto lower = [](char c) { return (char)(c >= 'A' && c <= 'Z' ? c + 32 : c); };
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (s[i] == '\'' && i + 1 < n) {
    const char a = lower(s[i + 1]), b = i + 2 < n ? lower(s[i + 2]) : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  auto newline = [&](size_t k) { return s[k] == '\r' || s[k] == '\n'; };
  size_t len, len2;
  const UnicodeClass cls = class_at(s, i, len);
  const size_t j = i + len;
  auto run = [&](size_t k, UnicodeClass c) {  // the end of a run of class c from k
    while (k < n && class_at(s, k, len2) == c) k += len2;
    return k;
  };
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cls == kLetter) return run(j, kLetter);
  if (!newline(i) && cls != kNumber && j < n && class_at(s, j, len2) == kLetter)
    return run(j, kLetter);
  // \p{N}{1,3}
  if (cls == kNumber) {
    size_t k = j;
    for (int d = 1; d < 3 && k < n && class_at(s, k, len2) == kNumber; d++) k += len2;
    return k;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t k = s[i] == ' ' && j < n && class_at(s, j, len2) == kOther ? j : i;
  if (class_at(s, k, len2) == kOther) {
    k = run(k, kOther);
    while (k < n && newline(k)) k++;
    return k;
  }
  // Whitespace: \s*[\r\n]+ (up to the run's last line break), else
  // \s+(?!\S) (the run but its last character, before a non-space), else \s+.
  size_t end = j, last_break = newline(i) ? j : 0, last = i;
  while (end < n && class_at(s, end, len2) == kSpace) {
    last = end;
    end += len2;
    if (newline(last)) last_break = end;
  }
  if (last_break) return last_break;
  if (end == n || last == i) return end;
  return last;
}

void Gpt2BpeTokenizer::build(const std::vector<std::pair<std::string, int64_t>> &vocab,
                             const std::vector<std::pair<std::string, std::string>> &merges,
                             const std::string &what) {
  // Vocabulary strings are in GPT-2's byte alphabet: back to bytes.
  auto to_bytes = [&](const std::string &tok, std::string &out) {
    out.clear();
    for (size_t i = 0; i < tok.size();) {
      uint32_t cp;
      i += utf8_next(tok, i, cp);
      if (cp >= 512 || kAlphabet.byte_of[cp] < 0) return false;
      out.push_back((char)kAlphabet.byte_of[cp]);
    }
    return true;
  };
  std::string bytes;
  std::vector<const std::string *> owner;  // id -> its token, to refuse an id given twice
  for (const auto &[tok, id] : vocab) {
    if (id < 0 || id >= kMaxVocab)
      fail(Status::corrupt_data, "GPT2BPETokenizer: ", what, ": token '", tok, "' has id ", id,
           "; ids must be in [0, ", kMaxVocab, ")");
    if (!to_bytes(tok, bytes))
      fail(
          Status::corrupt_data, "GPT2BPETokenizer: ", what, ": token '", tok,
          "' has a character outside GPT-2's byte alphabet (is this a byte-level BPE vocabulary?)");
    if ((size_t)id >= token_bytes_.size()) token_bytes_.resize(id + 1);
    if (!ids_.emplace(bytes, (int32_t)id).second)
      fail(Status::corrupt_data, "GPT2BPETokenizer: ", what, ": token '", tok, "' appears twice");
    // Two tokens with one id would decode one as the other.
    if ((size_t)id >= owner.size()) owner.resize(id + 1);
    if (owner[id])
      fail(Status::corrupt_data, "GPT2BPETokenizer: ", what, ": tokens '", *owner[id], "' and '",
           tok, "' have the same id ", id);
    owner[id] = &tok;
    token_bytes_[id] = bytes;
  }
  for (int b = 0; b < 256; b++) {
    auto it = ids_.find(std::string(1, (char)b));
    if (it == ids_.end()) {
      std::string c;
      const uint32_t cp = kAlphabet.cp_of[b];
      c.push_back(cp < 0x80 ? (char)cp : (char)(0xC0 | (cp >> 6)));
      if (cp >= 0x80) c.push_back((char)(0x80 | (cp & 0x3F)));
      fail(Status::corrupt_data, "GPT2BPETokenizer: ", what, " lacks the token '", c, "' of byte ",
           b, ": a byte-level vocabulary holds all 256 bytes");
    }
    byte_id_[b] = it->second;
  }
  std::string left, right;
  for (size_t r = 0; r < merges.size(); r++) {
    const auto &[a, b] = merges[r];
    auto ia = to_bytes(a, left) ? ids_.find(left) : ids_.end();
    auto ib = to_bytes(b, right) ? ids_.find(right) : ids_.end();
    if (ia == ids_.end() || ib == ids_.end())
      fail(Status::corrupt_data, "GPT2BPETokenizer: merge ", r + 1, " '", a, " ", b,
           "' names the token '", ia == ids_.end() ? a : b, "', which is not in the vocabulary");
    auto im = ids_.find(left + right);
    if (im == ids_.end())
      fail(Status::corrupt_data, "GPT2BPETokenizer: merge ", r + 1, " '", a, " ", b, "' makes '",
           a + b, "', which is not in the vocabulary");
    // A repeated merge keeps its last rank, as GPT-2's and Hugging Face's code.
    merges_[bpe_pair(ia->second, ib->second)] = {(int32_t)r, im->second};
  }
}

void Gpt2BpeTokenizer::add_special(const std::string &content, int64_t id,
                                   const std::string &what) {
  if (content.empty())
    fail(Status::corrupt_data, "GPT2BPETokenizer: ", what, ": an empty added token");
  if (id < 0 || id >= kMaxVocab)
    fail(Status::corrupt_data, "GPT2BPETokenizer: ", what, ": added token '", content, "' has id ",
         id, "; ids must be in [0, ", kMaxVocab, ")");
  // An id already given to other bytes (a vocabulary token or another added
  // token) would decode them as this token.
  if ((size_t)id < token_bytes_.size() && token_bytes_[id] != content) {
    const auto v = ids_.find(token_bytes_[id]);
    const bool taken = (v != ids_.end() && v->second == id) ||
                       std::any_of(specials_.begin(), specials_.end(),
                                   [&](const auto &s) { return s.second == id; });
    if (taken)
      fail(Status::corrupt_data, "GPT2BPETokenizer: ", what, ": added token '", content,
           "' has id ", id, ", which is already the id of another token");
  }
  if ((size_t)id >= token_bytes_.size()) token_bytes_.resize(id + 1);
  token_bytes_[id] = content;
  specials_.emplace_back(content, (int32_t)id);
  if (content == "<|endoftext|>") eod_ = (int32_t)id;
}

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_vocab_merges(
    const std::string &vocab_file, const std::string &merge_file) {
  const std::string vtext = read_file(vocab_file, "vocab file");
  const std::string mtext = read_file(merge_file, "merge file");
  const std::string vwhat = "vocab file '" + vocab_file + "'";
  const auto vocab = vocab_of(parse_json(vtext, vwhat), vwhat);
  // merges.txt: "#version: ..." first, then "left right" a line, best first.
  std::vector<std::pair<std::string, std::string>> merges;
  std::istringstream in(mtext);
  std::string line;
  for (int lineno = 1; std::getline(in, line); lineno++) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (lineno == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string::npos)
      fail(Status::corrupt_data, "GPT2BPETokenizer: merge file '", merge_file, "' line ", lineno,
           ": expected two tokens separated by one space, got '", line, "'");
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  auto t = std::unique_ptr<Gpt2BpeTokenizer>(new Gpt2BpeTokenizer());
  t->files_.emplace_back(vocab_file, "vocab file");
  t->files_.emplace_back(merge_file, "merge file");
  t->build(vocab, merges, vwhat);
  // As Megatron's GPT2BPETokenizer: <|endoftext|> of the vocabulary ends documents.
  auto it = t->ids_.find("<|endoftext|>");
  if (it == t->ids_.end())
    fail(Status::corrupt_data, "GPT2BPETokenizer: ", vwhat,
         " has no <|endoftext|> token (the end-of-document token)");
  t->add_special("<|endoftext|>", it->second, vwhat);
  return t;
}

namespace {

const char *kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// LLaMA 3's pre-tokenizer: Split by its regex (Isolated), then ByteLevel without a regex.
bool is_llama3_pre_tokenizer(const nlohmann::json &pre) {
  if (!pre.is_object() || pre.value("type", "") != "Sequence" || !pre.contains("pretokenizers"))
    return false;
  const nlohmann::json &seq = pre["pretokenizers"];
  if (!seq.is_array() || seq.size() != 2 || !seq[0].is_object() || !seq[1].is_object()) return false;
  const nlohmann::json &split = seq[0], &bl = seq[1];
  return split.value("type", "") == "Split" && split.contains("pattern") &&
         split["pattern"].is_object() && split["pattern"].value("Regex", "") == kLlama3Regex &&
         split.value("behavior", "") == "Isolated" && !split.value("invert", false) &&
         bl.value("type", "") == "ByteLevel" && !bl.value("add_prefix_space", false) &&
         !bl.value("use_regex", true);
}

}  // namespace

bool Gpt2BpeTokenizer::declares_byte_level(const std::string &path) {
  try {
    const nlohmann::json j = parse_json(read_file(path, "tokenizer file"), "tokenizer file");
    const nlohmann::json pre = j.is_object() ? j.value("pre_tokenizer", nlohmann::json()) : nlohmann::json();
    return (pre.is_object() && pre.value("type", "") == "ByteLevel") || is_llama3_pre_tokenizer(pre);
  } catch (const std::exception &) {
    return false;
  }
}

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_tokenizer_json(const std::string &path,
                                                                        bool any_byte_level) {
  const std::string what = "tokenizer file '" + path + "'";
  const nlohmann::json j = parse_json(read_file(path, "tokenizer file"), what);
  auto unsupported = [&](const std::string &part, const nlohmann::json &v, const char *allowed) {
    fail(Status::corrupt_data, "GPT2BPETokenizer: ", what, ": ", part, " is ", json_excerpt(v),
         "; a GPT-2 byte-level BPE has ", allowed);
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    fail(Status::corrupt_data, "GPT2BPETokenizer: ", what,
         " has no \"model\" object (is it a Hugging Face tokenizer.json?)");
  const nlohmann::json &m = j["model"];
  if (!null_or(m, "type", "BPE")) unsupported("model.type", m["type"], "\"BPE\"");
  if (!null_or(j, "normalizer", nullptr)) unsupported("normalizer", j["normalizer"], "none");
  const nlohmann::json pre = j.value("pre_tokenizer", nlohmann::json());
  const bool llama3 = any_byte_level && is_llama3_pre_tokenizer(pre);
  if (!llama3 && (!pre.is_object() || pre.value("type", "") != "ByteLevel" ||
                  pre.value("add_prefix_space", false) || !pre.value("use_regex", true)))
    unsupported("pre_tokenizer", pre,
                any_byte_level
                    ? "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": "
                      "true} (GPT-2's) or LLaMA 3's Split + ByteLevel"
                    : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": "
                      "true} (another kind of tokenizer.json: tokenizer_type HuggingFaceTokenizer)");
  const nlohmann::json post = j.value("post_processor", nlohmann::json());
  const bool template_post = any_byte_level && post.is_object() &&
                             post.value("type", "") == "TemplateProcessing";
  if (!post.is_null() && post.value("type", "") != "ByteLevel" && !template_post)
    unsupported("post_processor", post,
                any_byte_level ? "none, ByteLevel or TemplateProcessing" : "none or ByteLevel");
  if (!null_or(m, "dropout", nullptr)) unsupported("model.dropout", m["dropout"], "null");
  if (!null_or(m, "continuing_subword_prefix", ""))
    unsupported("model.continuing_subword_prefix", m["continuing_subword_prefix"], "null");
  if (!null_or(m, "end_of_word_suffix", ""))
    unsupported("model.end_of_word_suffix", m["end_of_word_suffix"], "null");
  if (!m.contains("vocab") || !m.contains("merges") || !m["merges"].is_array())
    fail(Status::corrupt_data, "GPT2BPETokenizer: ", what,
         ": model needs \"vocab\" (an object) and \"merges\" (a list)");
  const auto vocab = vocab_of(m["vocab"], what + " model.vocab");
  const auto merges = parse_merges(m["merges"], "GPT2BPETokenizer", what);
  auto t = std::unique_ptr<Gpt2BpeTokenizer>(new Gpt2BpeTokenizer());
  t->files_.emplace_back(path, "tokenizer file");
  t->build(vocab, merges, what + " model.vocab");
  t->ignore_merges_ = m.value("ignore_merges", false);
  if (any_byte_level) t->name_ = "HuggingFaceTokenizer";
  if (llama3) t->pretoken_end_ = llama3_pretoken_end;
  for (const auto &[content, id] : parse_added_tokens(j, t->name_, what))
    t->add_special(content, id, what);
  if (template_post) {
    const auto [prefix, suffix] = template_specials(post, t->name_, what);
    for (const int32_t id : prefix) t->check_template_id(id, what);
    for (const int32_t id : suffix) t->check_template_id(id, what);
    t->prefix_ = prefix;
    t->suffix_ = suffix;
  }
  // The end-of-document token: GPT-2's <|endoftext|>, LLaMA 3's <|end_of_text|>.
  for (const char *eod : {"<|endoftext|>", "<|end_of_text|>"}) {
    if (t->eod_ >= 0) break;
    for (const auto &[content, id] : t->specials_)
      if (content == eod) t->eod_ = id;
    auto it = t->ids_.find(eod);
    if (t->eod_ < 0 && it != t->ids_.end()) t->eod_ = it->second;
  }
  if (t->eod_ < 0)
    fail(Status::corrupt_data, t->name_, ": ", what,
         " has no <|endoftext|> or <|end_of_text|> token (the end-of-document token)");
  return t;
}

void Gpt2BpeTokenizer::check_template_id(int32_t id, const std::string &what) const {
  // An id the post-processor adds must be a token (an added one, usually).
  if ((size_t)id >= token_bytes_.size() || token_bytes_[id].empty())
    fail(Status::corrupt_data, name_, ": ", what, ": the post_processor adds id ", id,
         ", which is no token of the vocabulary");
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  std::lock_guard<std::mutex> lock(mu_);
  return encode_cached(text, shared_cache_);
}

std::unique_ptr<Tokenizer::Cache> Gpt2BpeTokenizer::new_cache() const {
  return std::make_unique<BpeWordCache>(this);
}

std::vector<int32_t> Gpt2BpeTokenizer::encode_with(std::string_view text, Cache &cache) const {
  return encode_cached(text, bpe_word_cache(cache, *this));
}

std::vector<int32_t> Gpt2BpeTokenizer::encode_cached(std::string_view text,
                                                     BpeWordCache &cache) const {
  std::vector<int32_t> out(prefix_);
  out.reserve(text.size() / 3);
  cut_at_specials(
      text, specials_, [&](std::string_view piece, bool) { encode_segment(piece, cache, out); },
      [&](int32_t id) { out.push_back(id); });
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

void Gpt2BpeTokenizer::encode_segment(std::string_view text, BpeWordCache &cache,
                                      std::vector<int32_t> &out) const {
  for (size_t i = 0; i < text.size();) {
    const size_t end = pretoken_end_(text, i);
    cache.encode(text.substr(i, end - i), out,
                 [&](std::string_view word, std::vector<int32_t> &ids) { merge_word(word, ids); });
    i = end;
  }
}

void Gpt2BpeTokenizer::merge_word(std::string_view word, std::vector<int32_t> &ids) const {
  if (ignore_merges_) {
    auto it = ids_.find(std::string(word));
    if (it != ids_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  for (const char c : word) ids.push_back(byte_id_[(unsigned char)c]);
  bpe_merge(ids, merges_);
}

std::string Gpt2BpeTokenizer::decode(const int32_t *tokens, size_t n) const {
  std::string out;
  for (size_t i = 0; i < n; i++)
    if (tokens[i] >= 0 && (size_t)tokens[i] < token_bytes_.size()) out += token_bytes_[tokens[i]];
  return out;
}

}  // namespace ptdp
