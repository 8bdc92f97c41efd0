#include "engine/data/tokenizer.h"

#include "engine/core/status.h"
#include "engine/data/bpe_tokenizer.h"
#include "engine/data/sp_bpe_tokenizer.h"

namespace ptdp {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); i++) out[i] = (unsigned char)text[i];
  return out;
}

std::string ByteTokenizer::decode(const int32_t *tokens, size_t n) const {
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n; i++)
    if (tokens[i] >= 0 && tokens[i] < 256) out.push_back((char)tokens[i]);
  return out;
}

std::string vocabulary_fingerprint_text(const Tokenizer &tok) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)vocabulary_fingerprint(tok));
  return buf;
}

const char *tokenizer_names() { return "byte, GPT2BPETokenizer, HuggingFaceTokenizer"; }

bool is_tokenizer_name(const std::string &type) {
  const std::string names = std::string(", ") + tokenizer_names() + ", ";
  return !type.empty() && names.find(", " + type + ", ") != std::string::npos;
}

uint64_t vocabulary_fingerprint(const Tokenizer &tok) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a over (length, bytes) of each id's text
  auto add = [&h](const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ static_cast<const unsigned char *>(p)[i]) * 1099511628211ull;
  };
  for (int32_t id = 0; id < tok.vocab_size(); id++) {
    const std::string text = tok.decode(&id, 1);
    const uint64_t n = text.size();
    add(&n, sizeof n);
    add(text.data(), text.size());
  }
  const int32_t eod = tok.eod();
  add(&eod, sizeof eod);
  return h == 0 ? 1 : h;  // (0 means "not recorded")
}

namespace {

// A tokenizer.json's kind: byte-level BPE (GPT-2's, LLaMA 3's) or
// SentencePiece-style BPE (LLaMA 2's, Mistral's: "▁" for spaces, byte fallback).
// A file with SentencePiece's marks (a Metaspace pre-tokenizer, a normalizer,
// byte fallback) is read as one first; when that reader refuses it, the
// byte-level reader is tried, and the refusal reported is the one of the kind
// the file declares in its pre-tokenizer (a byte-level file with a normalizer
// was refused for its byte_fallback).
std::unique_ptr<Tokenizer> hf_tokenizer(const std::string &path) {
  const auto byte_level = [&] {
    try {
      return std::unique_ptr<Tokenizer>(Gpt2BpeTokenizer::from_tokenizer_json(path, true));
    } catch (const Error &e) {
      // The byte-level BPE reader names itself; the user named HuggingFaceTokenizer.
      const std::string msg = e.what(), own = "GPT2BPETokenizer: ";
      if (msg.compare(0, own.size(), own) != 0) throw;
      throw Error(e.code(), "HuggingFaceTokenizer (read as a byte-level BPE): " + msg.substr(own.size()));
    }
  };
  if (!SpBpeTokenizer::is_its_kind(path)) return byte_level();
  try {
    return SpBpeTokenizer::from_tokenizer_json(path);
  } catch (const Error &) {
    if (!Gpt2BpeTokenizer::declares_byte_level(path)) throw;
    return byte_level();
  }
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec &s) {
  const bool vocab = !s.vocab_file.empty(), merges = !s.merge_file.empty(),
             file = !s.tokenizer_file.empty();
  if (s.type == "byte") {
    if (vocab || merges || file)
      fail(Status::invalid_config, "the byte tokenizer takes no files, but ",
           vocab    ? "vocab_file"
           : merges ? "merge_file"
                    : "tokenizer_file",
           " is set; vocab_file + merge_file or tokenizer_file go with tokenizer_type "
           "GPT2BPETokenizer, tokenizer_file with HuggingFaceTokenizer");
    return std::make_unique<ByteTokenizer>();
  }
  if (s.type == "GPT2BPETokenizer") {
    if (file && (vocab || merges))
      fail(Status::invalid_config,
           "GPT2BPETokenizer takes vocab_file + merge_file or "
           "tokenizer_file, not both");
    if (file) return Gpt2BpeTokenizer::from_tokenizer_json(s.tokenizer_file);
    if (!vocab || !merges)
      fail(Status::invalid_config, "GPT2BPETokenizer needs ",
           vocab    ? "merge_file (merges.txt) with vocab_file"
           : merges ? "vocab_file (vocab.json) with merge_file"
                    : "vocab_file + merge_file (vocab.json, merges.txt) or tokenizer_file "
                      "(a Hugging Face tokenizer.json)");
    return Gpt2BpeTokenizer::from_vocab_merges(s.vocab_file, s.merge_file);
  }
  if (s.type == "HuggingFaceTokenizer") {  // Megatron's name for a tokenizer.json of any kind ptdp has
    if (!file || vocab || merges)
      fail(Status::invalid_config, "HuggingFaceTokenizer takes tokenizer_file (a Hugging Face ",
           "tokenizer.json) ", file ? "alone, not vocab_file or merge_file" : "and none is given");
    return hf_tokenizer(s.tokenizer_file);
  }
  fail(Status::bad_value, "unknown tokenizer '", s.type, "'; allowed: ", tokenizer_names());
}

bool set_tokenizer_option(TokenizerSpec &s, const std::string &key, const std::string &value) {
  if (key == "tokenizer_type")
    s.type = value;
  else if (key == "vocab_file")
    s.vocab_file = value;
  else if (key == "merge_file")
    s.merge_file = value;
  else if (key == "tokenizer_file")
    s.tokenizer_file = value;
  else
    return false;
  return true;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string &name) {
  TokenizerSpec s;
  s.type = name;
  return make_tokenizer(s);
}

}  // namespace ptdp
