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

// Walks text: good(part) for each well-formed run of characters, bad(part)
// for each maximal ill-formed subpart, in order; either returning false stops.
template <class Good, class Bad>
void walk(std::string_view text, Good good, Bad bad) {
  size_t i = 0, run = 0;  // the well-formed run goes from `run` to i
  while (i < text.size()) {
    const Lead l = lead((unsigned char)text[i]);
    size_t n = 1;  // bytes of the sequence found well formed so far
    if (l.length > 1)
      for (; n < (size_t)l.length && i + n < text.size(); n++) {
        const unsigned char c = (unsigned char)text[i + n];
        const bool ok = n == 1 ? c >= l.lo && c <= l.hi : c >= 0x80 && c <= 0xBF;
        if (!ok) break;
      }
    if (l.length > 0 && n == (size_t)l.length) {
      i += n;
      continue;
    }
    if (l.length == 0) n = 1;
    if (i > run && !good(text.substr(run, i - run))) return;
    if (!bad(text.substr(i, n))) return;  // the maximal subpart; go on at the byte that broke it
    i += n;
    run = i;
  }
  if (i > run) good(text.substr(run, i - run));
}

// out += "\xNN" for the byte c.
void append_escaped(std::string &out, unsigned char c) {
  static const char hex[] = "0123456789ABCDEF";
  out += "\\x";
  out += hex[c >> 4];
  out += hex[c & 15];
}

// Control characters a message shows as \xNN: NUL would cut a C string short,
// ESC would colour the terminal; newline and tab stay.
bool is_control(unsigned char c) { return (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F; }

}  // namespace

std::string printable_message(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  walk(
      text,
      [&](std::string_view part) {  // (valid UTF-8: a C0 control is one byte, never inside a sequence)
        for (size_t i = 0; i < part.size(); i++) {
          const unsigned char c = (unsigned char)part[i];
          // A C1 control (U+0080..U+009F, bytes C2 80..C2 9F: CSI is one that
          // terminals obey) as its two bytes' \xNN.
          const bool c1 = c == 0xC2 && i + 1 < part.size() && (unsigned char)part[i + 1] <= 0x9F;
          if (c1) {
            append_escaped(out, c);
            append_escaped(out, (unsigned char)part[++i]);
          } else if (is_control(c)) {
            append_escaped(out, c);
          } else {
            out += (char)c;
          }
        }
        return true;
      },
      [&](std::string_view part) {
        for (unsigned char c : part) append_escaped(out, c);
        return true;
      });
  return out;
}

std::string one_line_text(std::string_view text) {
  std::string out;
  const std::string shown = printable_message(text);
  for (size_t i = 0; i < shown.size(); i++) {
    const char c = shown[i];
    // The line and paragraph separators U+2028, U+2029 (E2 80 A8/A9) break a
    // line for some readers: their three bytes as \xNN too.
    const bool separator = shown.compare(i, 2, "\xE2\x80") == 0 && i + 2 < shown.size() &&
                           (shown[i + 2] == '\xA8' || shown[i + 2] == '\xA9');
    if (separator) {
      for (int k = 0; k < 3; k++) append_escaped(out, (unsigned char)shown[i + k]);
      i += 2;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      append_escaped(out, (unsigned char)c);
    } else {
      out += c;
    }
  }
  return out;
}

size_t first_ill_formed_utf8(std::string_view text) {
  size_t first = std::string_view::npos;
  walk(
      text, [](std::string_view) { return true; },
      [&](std::string_view part) { return first = (size_t)(part.data() - text.data()), false; });
  return first;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  walk(
      text, [&](std::string_view part) { return out.append(part), true; },
      [&](std::string_view) { return out += "\xEF\xBF\xBD", true; });  // U+FFFD a subpart
  return out;
}

}  // namespace ptdp
