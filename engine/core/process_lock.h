// Locks between processes without files: an abstract Unix socket bound by
// one holder at a time (nothing is made on disk, and the kernel releases it
// when its holder ends, however it ends). A writer's hold on an output, and
// the output sets put into one directory one at a time.
#pragma once
#include <string>

namespace ptdp {

// Binds the abstract Unix socket `name`: its descriptor, -1 when another
// holds it, -2 when sockets are unavailable.
int bind_process_lock(const std::string &name);

// "ptdp-<kind>-<device>-<inode>[-<name hash>]" of a directory (and a name in
// it); "" when the directory is not there.
std::string lock_name(const char *kind, const std::string &dir, const std::string &name);

}  // namespace ptdp
