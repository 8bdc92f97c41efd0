#include "checkpoints/disk_bandwidth.h"

#include <sys/statvfs.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "engine/core/output_file.h"
#include "engine/core/temp_files.h"
#include "engine/core/status.h"

namespace ptdp {

namespace {
constexpr size_t kChunk = 16 << 20;  // bytes per write()/read()

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void release_page_cache(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

DiskBandwidth measure_disk_bandwidth(const std::string &dir, int64_t bytes) {
  if (bytes < (1 << 20))
    fail(Status::invalid_argument, "measure_disk_bandwidth needs at least 1 MiB, got ", bytes);
  // Never among a checkpoint's files (rotation would keep that checkpoint
  // for a file no save made), as no writer's.
  refuse_inside_checkpoint(dir, "measure_disk_bandwidth directory", true);
  // Never the whole disk (a shared machine's other jobs write there too): at
  // most half of what is free under dir.
  struct statvfs vfs;
  if (::statvfs(dir.c_str(), &vfs) != 0)
    fail(Status::io_error, "measure_disk_bandwidth: cannot read the free space of '", dir, "': ",
         std::strerror(errno));
  const double free_bytes = (double)vfs.f_bavail * (double)vfs.f_frsize;
  if ((double)bytes > free_bytes / 2)
    fail(Status::invalid_argument, "measure_disk_bandwidth: ", bytes, " bytes is more than half ",
         "of the ", (int64_t)free_bytes, " bytes free under '", dir, "'; give at most ",
         (int64_t)(free_bytes / 2));
  // A fresh file of its own (never a file, link or FIFO already there).
  std::string path;
  int fd = create_temp_file(dir + "/ptdp_disk_bandwidth", &path);
  std::vector<char> buf(kChunk);
  for (size_t i = 0; i < buf.size(); i++) buf[i] = (char)(i * 2654435761u >> 13);  // not zeros
  auto io_fail = [&](const char *what) {
    const int e = errno;
    remove_temp_file(path);
    fail(Status::io_error, "cannot ", what, " '", path, "': ", std::strerror(e));
  };
  DiskBandwidth bw;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t left = bytes; left > 0;) {
    const ssize_t n = ::write(fd, buf.data(), (size_t)std::min<int64_t>(left, kChunk));
    if (n <= 0) {
      ::close(fd);
      io_fail("write");
    }
    left -= n;
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    io_fail("fsync");
  }
  ::close(fd);
  bw.write_gbps = (double)bytes / seconds_since(t0) / 1e9;
  release_page_cache(path);
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) io_fail("open");
  t0 = std::chrono::steady_clock::now();
  int64_t got = 0;
  for (ssize_t n; (n = ::read(fd, buf.data(), kChunk)) != 0; got += n)
    if (n < 0) {
      ::close(fd);
      io_fail("read");
    }
  bw.read_gbps = (double)got / seconds_since(t0) / 1e9;
  ::close(fd);
  remove_temp_file(path);
  if (got != bytes) fail(Status::io_error, "read back ", got, " of ", bytes, " bytes of '", path, "'");
  return bw;
}

}  // namespace ptdp
