#include "engine/core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/core/status.h"

namespace ptdp {

namespace {

const char *kind_of(mode_t m) {
  return S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket" : S_ISCHR(m) || S_ISBLK(m) ? "a device"
                                                                                        : "not a file";
}

}  // namespace

MappedFile::MappedFile(const std::string &path, const std::string &what, const std::string &context,
                       const std::string &hint) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    fail(Status::io_error, context, "cannot open ", what, ": ", std::strerror(errno), hint);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail(Status::io_error, context, "cannot stat ", what, ": ", std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail(Status::io_error, context, what, " is a directory, not a file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(Status::io_error, context, what, " is not a regular file (", kind_of(st.st_mode), ")");
  }
  size_ = (size_t)st.st_size;
  if (size_ > 0) {
    void *p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail(Status::io_error, context, "cannot map ", what, ": ", std::strerror(e));
    }
    data_ = static_cast<const unsigned char *>(p);
  }
  ::close(fd);  // the mapping stays
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char *>(data_), size_);
}

MappedFile::MappedFile(MappedFile &&o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile &MappedFile::operator=(MappedFile &&o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<unsigned char *>(data_), size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

std::string read_small_file(const std::string &path, const std::string &what,
                            const std::string &context, size_t max_bytes) {
  const MappedFile map(path, what, context);
  if (map.size() > max_bytes)
    fail(Status::io_error, context, what, " is ", map.size(), " bytes; at most ", max_bytes,
         " are read from such a file");
  if (map.size() > 0) return std::string(reinterpret_cast<const char *>(map.data()), map.size());
  // A regular file whose size says 0 may still have bytes (/proc's): read them.
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(Status::io_error, context, "cannot open ", what, ": ", std::strerror(errno));
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      fail(Status::io_error, context, "cannot read ", what, ": ", std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, (size_t)n);
    if (out.size() > max_bytes) {
      ::close(fd);
      fail(Status::io_error, context, what, " has more than ", max_bytes,
           " bytes; at most that many are read from such a file");
    }
  }
  ::close(fd);
  return out;
}

}  // namespace ptdp
