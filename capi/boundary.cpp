#include "capi/boundary.h"

#include <cstring>

#include "engine/core/utf8.h"

namespace ptdp::capi {

// The C enum (capi/ptdp.h, literal: LuaJIT and ctypes read it as text) and
// ptdp::Status must agree, every code.
static_assert(PTDP_OK == (int)Status::ok && PTDP_ERR_INVALID_ARGUMENT == (int)Status::invalid_argument &&
                  PTDP_ERR_UNKNOWN_OPTION == (int)Status::unknown_option &&
                  PTDP_ERR_BAD_VALUE == (int)Status::bad_value &&
                  PTDP_ERR_INVALID_CONFIG == (int)Status::invalid_config &&
                  PTDP_ERR_WRONG_STATE == (int)Status::wrong_state &&
                  PTDP_ERR_IO == (int)Status::io_error &&
                  PTDP_ERR_CORRUPT_DATA == (int)Status::corrupt_data &&
                  PTDP_ERR_BUFFER_TOO_SMALL == (int)Status::buffer_too_small &&
                  PTDP_ERR_OUT_OF_MEMORY == (int)Status::out_of_memory &&
                  PTDP_ERR_INTERNAL == (int)Status::internal &&
                  PTDP_ERR_COMM == (int)Status::comm_failure,
              "status codes out of sync: capi/ptdp.h against engine/core/status.h");

std::string &last_error() {
  thread_local std::string text;
  return text;
}

void require(const void *p, const char *what) {
  if (!p) fail(Status::invalid_argument, what, " must not be NULL");
}

void require_switch(int32_t v, const char *what) {
  if (v != 0 && v != 1) fail(Status::invalid_argument, what, " is 0 or 1, got ", v);
}

std::vector<std::string> strings(const char *const *a, int32_t n, const char *name, bool nonempty) {
  if (nonempty) require(a, name);
  if (nonempty ? n <= 0 : n < 0)
    fail(Status::invalid_argument, "num_", name, " must be ", nonempty ? "positive" : "zero or more",
         ", got ", n);
  if (n > 0 && !a) fail(Status::invalid_argument, name, " must hold num_", name, " (", n, ") strings");
  std::vector<std::string> out;
  for (int32_t i = 0; i < n; i++) {
    if (!a[i]) fail(Status::invalid_argument, name, "[", i, "] must not be NULL");
    out.emplace_back(a[i]);
  }
  return out;
}

void check_buffer(const char *buf, size_t cap) {
  if (!buf && cap > 0)
    fail(Status::invalid_argument, "buffer is NULL but cap is ", cap,
         " (pass cap 0 with a NULL buffer to ask for the size)");
}

void copy_out(const std::string &s, char *buf, size_t cap, size_t *out_len) {
  check_buffer(buf, cap);
  if (out_len) *out_len = s.size();
  if (!buf || cap < s.size() + 1)
    fail(Status::buffer_too_small, "buffer of ", cap, " bytes is too small: ", s.size() + 1,
         " bytes needed (the size without NUL is returned in out_len)");
  std::memcpy(buf, s.c_str(), s.size() + 1);
}

void copy_report(const std::string &s, char *buf, size_t cap, size_t *out_len) {
  copy_out(printable_message(s), buf, cap, out_len);
}

}  // namespace ptdp::capi
