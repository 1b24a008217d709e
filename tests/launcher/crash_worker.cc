// A worker for launch_test's stdout case: joins the group, prints a line to std::cout without
// flushing it, then aborts (no exit handlers, no stdio flush). The launcher shows the line
// only if stdout was line-buffered (comm/launch_env.cc).
#include <cstdlib>
#include <iostream>

#include "tinyddp/comm/comm.h"

int main() {
  using namespace tinyddp;
  auto pg = comm::init_from_env();
  std::cout << "rank " << pg->rank() << " printed this before it crashed\n";
  std::abort();
}
