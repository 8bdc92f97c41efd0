#include "engine/core/status.h"

#include <errno.h>
#include <unistd.h>

namespace ptdp {

const char *status_string(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::invalid_argument: return "invalid argument";
    case Status::unknown_option: return "unknown option";
    case Status::bad_value: return "bad value";
    case Status::invalid_config: return "invalid configuration";
    case Status::wrong_state: return "wrong call order";
    case Status::io_error: return "I/O error";
    case Status::corrupt_data: return "corrupt data";
    case Status::buffer_too_small: return "buffer too small";
    case Status::out_of_memory: return "out of memory";
    case Status::internal: return "internal error";
    case Status::comm_failure: return "communication failure";
  }
  return "unknown status code";
}

void say_line(const std::string &text) {
  const std::string line = "ptdp: " + one_line_text(text) + "\n";
  for (size_t at = 0; at < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + at, line.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // (stderr closed or full: nothing else to tell it with)
    at += (size_t)n;
  }
}

}  // namespace ptdp
