#include "engine/core/utf8.h"

namespace ptdp {

namespace {
// The range of the second byte after lead byte c, and the sequence length
// (0: c cannot start a sequence). Later bytes are always 80..BF.
struct Lead {
  int length;
  unsigned char lo, hi;
};
Lead lead(unsigned char c) {
  if (c < 0x80) return {1, 0, 0};
  if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};  // no overlong three-byte forms
  if (c == 0xED) return {3, 0x80, 0x9F};  // no surrogates
  if (c >= 0xE1 && c <= 0xEF) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};  // no overlong four-byte forms
  if (c == 0xF4) return {4, 0x80, 0x8F};  // nothing past U+10FFFF
  if (c >= 0xF1 && c <= 0xF3) return {4, 0x80, 0xBF};
  return {0, 0, 0};
}

// text with each maximal ill-formed subpart replaced by bad(subpart).
template <class F>
std::string replace_ill_formed(std::string_view text, F bad) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const Lead l = lead((unsigned char)text[i]);
    size_t good = 1;  // bytes of the sequence found well formed so far
    if (l.length > 1)
      for (; good < (size_t)l.length && i + good < text.size(); good++) {
        const unsigned char c = (unsigned char)text[i + good];
        const bool ok = good == 1 ? c >= l.lo && c <= l.hi : c >= 0x80 && c <= 0xBF;
        if (!ok) break;
      }
    if (l.length > 0 && good == (size_t)l.length) {
      out.append(text.substr(i, good));
    } else {
      if (l.length == 0) good = 1;
      out += bad(text.substr(i, good));  // the maximal subpart, then go on at the byte that broke it
    }
    i += good;
  }
  return out;
}
}  // namespace

std::string printable_message(std::string_view text) {
  const std::string valid = escape_ill_formed_utf8(text);
  std::string out;
  out.reserve(valid.size());
  static const char hex[] = "0123456789ABCDEF";
  for (unsigned char c : valid) {  // controls are one byte, never inside a UTF-8 sequence
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F)
      out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
    else
      out += (char)c;
  }
  return out;
}

size_t first_ill_formed_utf8(std::string_view text) {
  size_t first = std::string_view::npos;
  replace_ill_formed(text, [&](std::string_view part) {  // parts come in order
    if (first == std::string_view::npos) first = (size_t)(part.data() - text.data());
    return std::string();
  });
  return first;
}

std::string valid_utf8(std::string_view text) {
  return replace_ill_formed(text, [](std::string_view) { return std::string("\xEF\xBF\xBD"); });
}

std::string escape_ill_formed_utf8(std::string_view text) {
  return replace_ill_formed(text, [](std::string_view part) {
    static const char hex[] = "0123456789ABCDEF";
    std::string e;
    for (unsigned char c : part) e += std::string("\\x") + hex[c >> 4] + hex[c & 15];
    return e;
  });
}

}  // namespace ptdp
