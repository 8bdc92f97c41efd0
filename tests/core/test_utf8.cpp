// valid_utf8: generated samples are printed as valid UTF-8.
#include <gtest/gtest.h>

#include "engine/core/status.h"
#include "engine/core/utf8.h"

using ptdp::valid_utf8;

namespace {
const std::string R = "\xEF\xBF\xBD";  // U+FFFD
}

TEST(Utf8, ValidTextIsUnchanged) {
  for (const std::string &s : {std::string(""), std::string("plain ascii\n"),
                               std::string("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80"),
                               std::string("\xF4\x8F\xBF\xBF"), std::string("a\0b", 3)})
    EXPECT_EQ(valid_utf8(s), s);
}

TEST(Utf8, IllFormedPartsBecomeReplacementCharacters) {
  EXPECT_EQ(valid_utf8("a\x80"
                       "b"),
            "a" + R + "b");          // stray continuation byte
  EXPECT_EQ(valid_utf8("\xC3"), R);  // truncated at the end
  EXPECT_EQ(valid_utf8("\xE6\x97"
                       "x"),
            R + "x");                                        // one maximal subpart, one U+FFFD
  EXPECT_EQ(valid_utf8("\xC0\xAF"), R + R);                  // overlong: C0 never starts one
  EXPECT_EQ(valid_utf8("\xE0\x80\x80"), R + R + R);          // overlong three-byte form
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), R + R + R);          // a surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), R + R + R + R);  // past U+10FFFF
  EXPECT_EQ(valid_utf8("\xFF\xFE"), R + R);
  EXPECT_EQ(valid_utf8("\xF0\x9F\x98"
                       "\xC3\xA9"),
            R + "\xC3\xA9");  // cut emoji, then a good é
}

// Messages quoting a user's bytes: ill-formed bytes become the text \xNN
// (each byte of a maximal subpart), well-formed text stays as it is.
TEST(Utf8, PrintableMessagesEscapeControlCharacters) {
  using ptdp::printable_message;
  EXPECT_EQ(printable_message(std::string("a\0b\x1b[31m\r\x7F\xFF\n\tz", 14)),
            "a\\x00b\\x1B[31m\\x0D\\x7F\\xFF\n\tz");
  EXPECT_EQ(printable_message("caf\xC3\xA9"), "caf\xC3\xA9");
  // C1 controls (NEL U+0085, CSI U+009B: a terminal obeys it) as their bytes;
  // U+00A0 and U+2028 (a line separator: one_line_text's) stay.
  EXPECT_EQ(printable_message("a\xC2\x85" "b\xC2\x9B" "2J\xC2\xA0\xE2\x80\xA8"),
            "a\\xC2\\x85b\\xC2\\x9B2J\xC2\xA0\xE2\x80\xA8");
  EXPECT_EQ(ptdp::one_line_text("a\xE2\x80\xA8" "b\xE2\x80\xA9" "c\xE2\x80\xA6"),
            "a\\xE2\\x80\\xA8b\\xE2\\x80\\xA9c\xE2\x80\xA6");
}

TEST(Utf8, EscapedIllFormedBytesShowWhatWasThere) {
  using ptdp::printable_message;
  EXPECT_EQ(printable_message("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(printable_message("a\xFF"
                                   "b"),
            "a\\xFFb");
  EXPECT_EQ(printable_message("\xE6\x97"
                                   "x"),
            "\\xE6\\x97x");  // a cut character: its two bytes
  EXPECT_EQ(printable_message("\xED\xA0\x80"), "\\xED\\xA0\\x80");  // a surrogate
  EXPECT_EQ(valid_utf8(printable_message("\xC0\xAF\xF4\x90\x80\x80 ok")),
            printable_message("\xC0\xAF\xF4\x90\x80\x80 ok"));  // the result is valid
}

// What the user reads is one line per error or note, whatever names it quotes:
// a path holding a newline split a message in two (a second line that looked
// like a line of its own).
TEST(Utf8, ErrorsAndNotesAreOneLine) {
  const ptdp::Error e(ptdp::Status::io_error, "cannot open 'a\nb\tc'");
  EXPECT_STREQ(e.what(), "cannot open 'a\\x0Ab\\x09c'");
  testing::internal::CaptureStderr();
  ptdp::say("note: removed '", "x\ny", "', ", 3, " files");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "ptdp: note: removed 'x\\x0Ay', 3 files\n");
}
