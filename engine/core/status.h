// Status codes and the one exception type the engine throws. The C ABI turns
// every ptdp::Error into its code plus ptdp_last_error() text (ARCHITECTURE §6).
#pragma once
#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "engine/core/utf8.h"

namespace ptdp {

// Keep in sync with the PTDP_* status codes of capi/ptdp.h (checked by a test).
enum class Status : int {
  ok = 0,
  invalid_argument = 1,   // NULL handle, bad pointer, nonsensical argument
  unknown_option = 2,     // a config key that does not exist
  bad_value = 3,          // a config value of the wrong type or out of range
  invalid_config = 4,     // values that are fine alone but not together
  wrong_state = 5,        // a call made in the wrong order
  io_error = 6,           // a file could not be opened, read or written
  corrupt_data = 7,       // a file is there but its content is not valid
  buffer_too_small = 8,   // caller buffer too small; the needed size is returned
  out_of_memory = 9,
  internal = 10,
  comm_failure = 11,      // a communicator timed out or a peer rank failed
};

const char *status_string(Status s);

class Error : public std::runtime_error {
 public:
  // The text made one printable line of valid UTF-8 here, for every message
  // at once: it may quote a user's bytes or names holding line breaks, what()
  // is a C string (a NUL would cut it), and an error is one line on stderr.
  Error(Status code, const std::string &msg)
      : std::runtime_error(one_line_text(msg)), code_(code) {}
  Status code() const { return code_; }

 private:
  Status code_;
};

namespace detail {
// A message's piece: a floating-point value in its shortest form that reads
// back as the same value ("got 1.0000001", never "got 1" for a value just
// outside a range's bound); anything else as streamed.
template <class T>
void put_piece(std::ostringstream &os, const T &x) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, x);
    os.write(buf, r.ptr - buf);
  } else {
    os << x;
  }
}
}  // namespace detail

// Builds a message from any streamable pieces: fail(Status::bad_value, "x=", x).
template <class... Args>
[[noreturn]] void fail(Status code, const Args &...args) {
  std::ostringstream os;
  (detail::put_piece(os, args), ...);
  throw Error(code, os.str());
}

// Writes a line for the user to stderr, built as fail() builds a message:
// "ptdp: " and the text made one printable line (a quoted name's line breaks
// as \xNN), in one write, so that lines of several threads or processes do
// not mix (on a pipe, for lines up to PIPE_BUF). say("note: ...") for what a
// run does in the user's stead.
void say_line(const std::string &text);
template <class... Args>
void say(const Args &...args) {
  std::ostringstream os;
  (detail::put_piece(os, args), ...);
  say_line(os.str());
}

}  // namespace ptdp
