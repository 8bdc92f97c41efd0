#include "engine/train/exit_signal.h"

#include <signal.h>
#include <unistd.h>

#include <mutex>

#include "engine/core/status.h"

namespace ptdp {

namespace {

volatile sig_atomic_t received = 0;
std::mutex scopes_mutex;
int scopes = 0;
struct sigaction previous_term, previous_int;

// Async-signal-safe: a flag, write(2), and for the second signal the handler
// that was there before (the launcher's, which removes temporary files), or
// the default action: the process ends as if this handler had not been set.
extern "C" void on_exit_signal(int sig) {
  if (received == 0) {
    received = sig;
    static const char msg[] =
        "\nptdp: signal received: the run ends after this step (saving first when --save is "
        "set); a second signal ends it at once\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    return;
  }
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
  sa.sa_handler = on_exit_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a signal does not fail a read or a write with EINTR
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

}  // namespace ptdp
