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

// The same, each ill-formed byte written as the four characters \xNN instead:
// for messages that quote a user's bytes (an error naming a file's bad line),
// which stay valid UTF-8 and still show what was there.
std::string escape_ill_formed_utf8(std::string_view text);

// A message for a terminal: escape_ill_formed_utf8, and the control
// characters as \xNN too (NUL would cut a C string short, ESC would colour the
// terminal), but for newline and tab.
std::string printable_message(std::string_view text);

// The offset of the first ill-formed byte of `text`, or npos when it is valid.
size_t first_ill_formed_utf8(std::string_view text);

}  // namespace ptdp
