// StopSignals (preemption.h): the handler only stores the signal number; a second SIGTERM
// while one is pending puts the default action back and raises it.
#include "examples/preemption.h"

#include <csignal>
#include <cstring>

#include <atomic>

#include <fmt/format.h>

#include "tinyddp/base/error.h"

namespace tinyddp::examples {
namespace {

std::atomic<int> received_signal{0};
std::atomic<bool> installed{false};
struct sigaction saved_usr1 {
}, saved_term{};

void on_stop_signal(int signo) {
  int expected = 0;
  if (received_signal.compare_exchange_strong(expected, signo)) return;
  if (signo != SIGTERM) return;  // a repeated SIGUSR1 changes nothing
  struct sigaction fatal {};     // a second SIGTERM: no more waiting for the step
  fatal.sa_handler = SIG_DFL;
  ::sigemptyset(&fatal.sa_mask);
  ::sigaction(SIGTERM, &fatal, nullptr);
  ::raise(SIGTERM);
}

}  // namespace

StopSignals::StopSignals() {
  TDDP_CHECK(!installed.exchange(true), "StopSignals: one is already installed in this process");
  received_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  ::sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &action, &saved_usr1);
  ::sigaction(SIGTERM, &action, &saved_term);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGUSR1, &saved_usr1, nullptr);
  ::sigaction(SIGTERM, &saved_term, nullptr);
  installed = false;
}

int StopSignals::received() const { return received_signal.load(); }

std::string stop_message(int signo, int64_t steps_done, int64_t steps, const std::string& checkpoint) {
  return fmt::format(
      "stopping after step {} of {} ({}): checkpoint {} written; exit status {} (run again with --resume to go on)",
      steps_done, steps, signo != 0 ? ::strsignal(signo) : "another rank was signalled", checkpoint,
      kRequeueExitStatus);
}

}  // namespace tinyddp::examples
