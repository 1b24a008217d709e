// The main() of tinyddp's Google Benchmark binaries: warns when the binary was not built with
// -c opt (such numbers mean nothing), then runs the registered benchmarks.
#pragma once

#include <benchmark/benchmark.h>

#include <iostream>

namespace tinyddp::bench {

inline int run_benchmarks(int argc, char** argv, const char* name) {
#ifndef NDEBUG
  std::cerr << name << ": built without -c opt; these numbers mean nothing (bazel run -c opt //bench:" << name << ")\n";
#else
  (void)name;
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace tinyddp::bench
