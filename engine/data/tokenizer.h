// Tokenizers turn text into token ids and back. Byte-level now; a GPT-2 BPE
// tokenizer joins later behind the same interface.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ptdp {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;
  virtual int vocab_size() const = 0;
  virtual int32_t eod() const = 0;  // end-of-document token appended to every document
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const int32_t *tokens, size_t n) const = 0;
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

// Names accepted by make_tokenizer, for error messages.
const char *tokenizer_names();
std::unique_ptr<Tokenizer> make_tokenizer(const std::string &name);

}  // namespace ptdp
