// Tokenizers turn text into token ids and back: bytes, or GPT-2's byte-level
// BPE (engine/data/bpe_tokenizer.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ptdp {

// A tokenizer is immutable once made. encode(text) may be called from any
// thread; a tokenizer that caches (GPT-2 BPE) then shares one cache behind a
// lock. A thread that encodes a lot (`ptdp tokenize --workers N`) makes its own
// cache with new_cache() and calls encode_with(text, cache): no lock, same ids.
class Tokenizer {
 public:
  // One thread's encoding state; never used by two threads at once.
  class Cache {
   public:
    virtual ~Cache() = default;
  };

  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int vocab_size() const = 0;
  virtual int32_t eod() const = 0;  // end-of-document token appended to every document
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const int32_t *tokens, size_t n) const = 0;

  // A cache for encode_with; a tokenizer without one returns an empty Cache.
  virtual std::unique_ptr<Cache> new_cache() const { return std::make_unique<Cache>(); }
  // encode(text) with the caller's cache (from this tokenizer's new_cache()).
  virtual std::vector<int32_t> encode_with(std::string_view text, Cache &) const {
    return encode(text);
  }
};

// Bytes 0..255 are tokens 0..255; 256 is end-of-document.
class ByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int vocab_size() const override { return 257; }
  int32_t eod() const override { return 256; }
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const int32_t *tokens, size_t n) const override;
};

// Which tokenizer, with its files (Megatron's flags): "byte" takes none;
// "GPT2BPETokenizer" takes vocab_file + merge_file (vocab.json, merges.txt) or
// tokenizer_file (a Hugging Face tokenizer.json of a GPT-2 byte-level BPE).
struct TokenizerSpec {
  std::string type = "byte";
  std::string vocab_file, merge_file, tokenizer_file;
};

// Names accepted by make_tokenizer, for error messages.
const char *tokenizer_names();
// Whether `type` is one of them.
bool is_tokenizer_name(const std::string &type);

// What a tokenizer's ids mean: a hash of what each id decodes to, in id
// order, and of its end-of-document id. Two tokenizers of one vocabulary size
// whose ids name other tokens (a shuffled vocab.json) differ here; one
// GPT-2 vocabulary given as vocab.json or as tokenizer.json does not.
uint64_t vocabulary_fingerprint(const Tokenizer &tok);
// As a checkpoint records it (kTokenizerVocabularyKey): 16 hex digits.
std::string vocabulary_fingerprint_text(const Tokenizer &tok);
// A checkpoint's record of the tokenizer its ids are (its manifest's training
// options; a ptdp export's safetensors metadata carries both across).
inline constexpr const char *kTokenizerTypeKey = "tokenizer_type";
inline constexpr const char *kTokenizerVocabularyKey = "tokenizer_vocabulary";
// A spec naming files its type does not take, or lacking the files it needs,
// is an error saying which files go with which type.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec &spec);
std::unique_ptr<Tokenizer> make_tokenizer(const std::string &name);  // a type without files

// The tokenizer's keys among the C ABI's "key=value" options: tokenizer_type,
// vocab_file, merge_file, tokenizer_file. Returns false for another key.
bool set_tokenizer_option(TokenizerSpec &s, const std::string &key, const std::string &value);

}  // namespace ptdp
