#include "engine/core/process_lock.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "engine/core/philox.h"

namespace ptdp {

int bind_process_lock(const std::string &name) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof addr.sun_path - 1);
  std::memcpy(addr.sun_path + 1, name.data(), n);  // sun_path[0] = 0: the abstract namespace
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -2;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&addr), (socklen_t)(offsetof(sockaddr_un, sun_path) + 1 + n)) == 0)
    return fd;
  const int e = errno;
  ::close(fd);
  return e == EADDRINUSE ? -1 : -2;
}

std::string lock_name(const char *kind, const std::string &dir, const std::string &name) {
  struct stat st;
  if (::stat(dir.empty() ? "." : dir.c_str(), &st) != 0) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "ptdp-%s-%llx-%llx-%llx", kind, (unsigned long long)st.st_dev,
                (unsigned long long)st.st_ino, (unsigned long long)(name.empty() ? 0 : fnv1a64(name)));
  return buf;
}

}  // namespace ptdp
