// What every C entry point shares: the thread's last error, the
// exception-to-status guard, and the argument checks of pointers, string
// arrays and caller-owned text buffers (capi/ptdp.cpp, capi/ptdp_tools.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "capi/ptdp.h"
#include "engine/core/status.h"
#include "engine/core/utf8.h"

namespace ptdp::capi {

// The text ptdp_last_error returns on this thread.
std::string &last_error();

// ptdp::Error's messages are printable already (made so where they are made);
// this covers the rest, a library's exception text say, for every entry point.
// Never throws: it runs inside guard's handlers (out of memory: no message).
inline ptdp_status set_error(Status code, const std::string &msg) noexcept {
  try {
    last_error() = printable_message(msg);
  } catch (...) {
    last_error().clear();
  }
  return (ptdp_status)code;
}

// Runs f, turning every exception into a status code and ptdp_last_error text.
template <class F>
ptdp_status guard(F &&f) {
  try {
    f();
    last_error().clear();
    return PTDP_OK;
  } catch (const Error &e) {
    return set_error(e.code(), e.what());
  } catch (const std::bad_alloc &) {
    // (Printed after the status's name: "out of memory: out of memory" said nothing.)
    return set_error(Status::out_of_memory, "a host allocation failed (the machine's memory or the "
                     "process's limit, ulimit -v, is too small for this model and layout)");
  } catch (const std::filesystem::filesystem_error &e) {
    // A path the system refused (a link loop, a name too long, no permission)
    // is the caller's input, not ptdp's fault: an I/O error naming the path.
    return set_error(Status::io_error, "cannot use '" + e.path1().string() + "': " + e.code().message());
  } catch (const std::exception &e) {
    return set_error(Status::internal, std::string("internal error: ") + e.what());
  } catch (...) {
    return set_error(Status::internal, "internal error: unknown exception");
  }
}

// invalid_argument naming `what` when p is NULL.
void require(const void *p, const char *what);

// invalid_argument naming `what` unless v is 0 or 1 (a switch: 2 or -1 had
// been read as 1, and may mean something else in a later version).
void require_switch(int32_t v, const char *what);

// A C array argument of n strings: every one non-NULL, at least one when
// `nonempty` (inputs), any number otherwise (options; NULL when n = 0).
std::vector<std::string> strings(const char *const *a, int32_t n, const char *name, bool nonempty);

// A caller's text buffer: NULL only with cap 0 (asking for the size).
// Checked on entry, before any work is done for the text.
void check_buffer(const char *buf, size_t cap);

// Copies s into the caller's buffer (NUL-terminated) or reports the size needed.
void copy_out(const std::string &s, char *buf, size_t cap, size_t *out_len);
// The same for a report for people (a checkpoint's inspection, a plan): the
// bytes it quotes from files shown as \xNN, as errors show them
// (printable_message), never raw on a terminal.
void copy_report(const std::string &s, char *buf, size_t cap, size_t *out_len);

}  // namespace ptdp::capi
