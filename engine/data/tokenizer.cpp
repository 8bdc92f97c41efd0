#include "engine/data/tokenizer.h"

#include "engine/core/status.h"

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

const char *tokenizer_names() { return "byte"; }

std::unique_ptr<Tokenizer> make_tokenizer(const std::string &name) {
  if (name == "byte") return std::make_unique<ByteTokenizer>();
  fail(Status::bad_value, "unknown tokenizer '", name, "'; allowed: ", tokenizer_names());
}

}  // namespace ptdp
