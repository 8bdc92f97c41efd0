// A child process whose files may not grow past a limit (RLIMIT_FSIZE, with
// SIGXFSZ ignored so that a write fails with EFBIG, as on a full disk): what a
// writer does when its disk fills, without filling one.
#pragma once
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <functional>

// Runs fn in a child under the limit; returns the child's exit code (fn's
// return value), or -1 when it did not exit.
inline int exit_code_under_file_size_limit(rlim_t bytes, const std::function<int()> &fn) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const struct rlimit limit = {bytes, bytes};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    ::_exit(fn());
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}
