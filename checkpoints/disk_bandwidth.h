// The raw sequential bandwidth of the disk under a directory, the baseline the
// checkpoint benchmark compares save and load with: one file written with
// large write() calls and fsynced, its pages released from the page cache,
// then read back with large read() calls. Same conditions as a checkpoint:
// commit_checkpoint fsyncs and releases the cache of what it wrote.
#pragma once
#include <cstdint>
#include <string>

namespace ptdp {

struct DiskBandwidth {
  double write_gbps = 0, read_gbps = 0;  // 1e9 bytes per second
};

// Writes, reads and removes a file of `bytes` (>= 1 MiB) in `dir`; throws
// io_error naming the file on any failure.
DiskBandwidth measure_disk_bandwidth(const std::string &dir, int64_t bytes);

// Drops a file's pages from the page cache (after fsync they are clean), so
// that the next read comes from the disk. Best effort.
void release_page_cache(const std::string &path);

}  // namespace ptdp
