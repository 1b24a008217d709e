// examples/preemption.h's StopSignals in one process: SIGUSR1 and SIGTERM are noted, the first
// one kept; the previous handlers come back when it goes, unless the ranks agreed to stop (or
// this process got a signal), when a signal arriving late must not kill the rank on its way out.
#include <csignal>

#include <catch2/catch.hpp>

#include "examples/preemption.h"

using tinyddp::examples::StopSignals;

namespace {

// The handler now installed for `signo`.
void (*handler_of(int signo))(int) {
  struct sigaction now {};
  ::sigaction(signo, nullptr, &now);
  return now.sa_handler;
}

}  // namespace

TEST_CASE("StopSignals notes the first of SIGUSR1 and SIGTERM and gives the old handlers back",
          "[examples][preemption]") {
  {
    StopSignals signals;
    CHECK(signals.received() == 0);
    CHECK_THROWS_WITH(StopSignals(), Catch::Contains("one is already installed"));
    REQUIRE(::raise(SIGUSR1) == 0);
    REQUIRE(::raise(SIGTERM) == 0);  // a second signal changes nothing
    CHECK(signals.received() == SIGUSR1);
  }
  // This process got a signal: the handlers stay, and a late SIGTERM kills nothing.
  CHECK(handler_of(SIGTERM) != SIG_DFL);
  REQUIRE(::raise(SIGTERM) == 0);
  ::signal(SIGUSR1, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  {
    StopSignals signals;  // nothing received, no stop agreed
    CHECK(signals.received() == 0);
  }
  CHECK(handler_of(SIGUSR1) == SIG_DFL);
  CHECK(handler_of(SIGTERM) == SIG_DFL);
}

TEST_CASE("StopSignals::keep_until_exit: a rank stopped for another's signal survives its own arriving late",
          "[examples][preemption]") {
  {
    StopSignals signals;
    signals.keep_until_exit();  // the ranks agreed to stop; this one has had no signal yet
  }
  CHECK(handler_of(SIGUSR1) != SIG_DFL);
  REQUIRE(::raise(SIGUSR1) == 0);  // would end the process under the default action
  REQUIRE(::raise(SIGTERM) == 0);
  ::signal(SIGUSR1, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  SUCCEED("still alive");
}
