#include "engine/train/exit_signal.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "engine/core/status.h"

namespace ptdp {

namespace {

// (Lock-free, so the handler may write it, and atomic: every rank's thread
// reads it, an evaluation's before each batch.)
std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler writes it");
// When the first signal came (CLOCK_MONOTONIC, ns).
long long first_ns = 0;
std::mutex scopes_mutex;
int scopes = 0;
struct sigaction previous_term, previous_int;

long long monotonic_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // (async-signal-safe)
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// The same request delivered twice: `timeout` and `kill -- -PGID` signal the
// process and then its whole group, and a forwarding wrapper (`timeout`, a
// launcher) in a group that was signalled sends its own copy too. The same
// signal sent by a process (kill(2), any sender) within a second of the first
// is not the second request that ends the run at once; a terminal's second
// Ctrl-C (sent by the kernel) is.
bool repeats_first(int sig, const siginfo_t *info) {
  const bool sent = info && (info->si_code == SI_USER || info->si_code == SI_QUEUE);
  return sent && sig == received && monotonic_ns() - first_ns < 1000000000LL;
}

// Async-signal-safe: a flag, write(2), and for the second signal the handler
// that was there before (the launcher's, which removes temporary files), or
// the default action: the process ends as if this handler had not been set.
extern "C" void on_exit_signal(int sig, siginfo_t *info, void *) {
  if (received == 0) {
    received = sig;
    first_ns = monotonic_ns();
    static const char msg[] =
        "\nptdp: signal received: the run ends after this step or evaluation (saving first "
        "when --save is set); a second signal ends it at once\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    return;
  }
  if (repeats_first(sig, info)) return;
  const struct sigaction &before = sig == SIGTERM ? previous_term : previous_int;
  if (before.sa_handler == SIG_IGN || before.sa_handler == SIG_DFL || (before.sa_flags & SA_SIGINFO))
    signal(sig, SIG_DFL);
  else
    sigaction(sig, &before, nullptr);
  raise(sig);
}

}  // namespace

ExitSignalScope::ExitSignalScope() {
  std::lock_guard<std::mutex> lock(scopes_mutex);
  if (scopes++ > 0) return;
  received = 0;
  struct sigaction sa = {};
  sa.sa_sigaction = on_exit_signal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: a signal does not fail a read or a write with EINTR.
  sa.sa_flags = SA_RESTART | SA_SIGINFO;
  if (sigaction(SIGTERM, &sa, &previous_term) != 0 || sigaction(SIGINT, &sa, &previous_int) != 0) {
    scopes--;
    fail(Status::internal, "--exit-signal-handler: cannot install the SIGTERM/SIGINT handlers");
  }
}

ExitSignalScope::~ExitSignalScope() {
  std::lock_guard<std::mutex> lock(scopes_mutex);
  if (--scopes > 0) return;
  sigaction(SIGTERM, &previous_term, nullptr);
  sigaction(SIGINT, &previous_int, nullptr);
  received = 0;
}

int exit_signal_received() { return received; }

std::string exit_signal_name(int sig) {
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGINT) return "SIGINT";
  return "signal " + std::to_string(sig);
}

}  // namespace ptdp
