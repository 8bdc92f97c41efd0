// SIGTERM and SIGINT as a request to end a run cleanly (--exit-signal-handler,
// as a cluster's scheduler asks a preempted job to stop): the first signal is
// recorded for the trainer to act on after its step (or at an evaluation's
// next batch); a second one ends the
// process at once, as it would without the handler. A copy of the first sent
// by any process within a second (`timeout` signals the process, then its
// group; a wrapper in a signalled group forwards it) is the same request.
#pragma once

#include <string>

namespace ptdp {

// Handlers for SIGTERM and SIGINT while an ExitSignalScope lives (scopes nest;
// the handlers found before the first come back after the last).
class ExitSignalScope {
 public:
  ExitSignalScope();
  ~ExitSignalScope();
  ExitSignalScope(const ExitSignalScope &) = delete;
  ExitSignalScope &operator=(const ExitSignalScope &) = delete;
};

// The first signal received while a scope lives (0 = none); cleared when the
// last scope ends.
int exit_signal_received();

// "SIGTERM", "SIGINT" (as an exit reason names them).
std::string exit_signal_name(int sig);

}  // namespace ptdp
