// Text for people: a generated sample is whatever bytes the model picked (a
// byte tokenizer can end inside a character), and an error message may quote
// a file's bytes, so both are made valid UTF-8 before they are returned or
// printed.
#pragma once
#include <string>
#include <string_view>

namespace ptdp {

// `text` with every ill-formed part replaced by U+FFFD (one per maximal
// subpart, as Unicode's "substitution of maximal subparts" recommends): well
// formed means RFC 3629, so no overlong forms, surrogates or code points past
// U+10FFFF. Valid text comes back unchanged.
std::string valid_utf8(std::string_view text);

// A message for a terminal, valid UTF-8 that still shows what was there: each
// ill-formed byte (a user's bytes an error quotes) and each control character
// (NUL would cut a C string short, ESC would colour the terminal, a C1 CSI
// too; newline and tab stay) written as the four characters \xNN per byte.
std::string printable_message(std::string_view text);

// A user's text quoted inside a one-line message: as printable_message, and a
// newline, carriage return, tab or Unicode line separator (U+2028, U+2029)
// written as \xNN too (a key ending in a newline broke the message across
// two lines).
std::string one_line_text(std::string_view text);

// The offset of the first ill-formed byte of `text`, or npos when it is valid.
size_t first_ill_formed_utf8(std::string_view text);

}  // namespace ptdp
