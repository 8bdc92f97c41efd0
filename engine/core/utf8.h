// Text for people: a generated sample is whatever bytes the model picked (a
// byte tokenizer can end inside a character), so it is made valid UTF-8
// before it is returned or printed.
#pragma once
#include <string>
#include <string_view>

namespace ptdp {

// `text` with every ill-formed part replaced by U+FFFD (one per maximal
// subpart, as Unicode's "substitution of maximal subparts" recommends): well
// formed means RFC 3629, so no overlong forms, surrogates or code points past
// U+10FFFF. Valid text comes back unchanged.
std::string valid_utf8(std::string_view text);

}  // namespace ptdp
