// Test helpers: TINYDDP_SKIP (a skip that scripts/test.sh counts), reading the committed
// PyTorch fixtures, and element access by index for naive reference implementations.
#pragma once

#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tinyddp/tensor/all.h"

// Ends the current test case as skipped: prints a marker line that scripts/test.sh counts
// (Catch2 v2 has no skip of its own, so the case also shows up as passed in Catch's totals).
#define TINYDDP_SKIP(reason)                                                                                         \
  do {                                                                                                               \
    std::cout << "[tinyddp-skip] " << Catch::getResultCapture().getCurrentTestName() << ": " << reason << std::endl; \
    return;                                                                                                          \
  } while (false)

namespace tinyddp::testing {

// Reads "name v1 v2 ..." lines (comments start with '#') from a file in the test's runfiles,
// e.g. "tests/tensor/fixtures/torch_reference.txt". Throws if the file is missing.
std::map<std::string, std::vector<double>> load_fixture(const std::string& path);

// The element of `t` at a multi-index, as double, read through sizes/strides/offset (an
// implementation independent of the library's kernels).
double at(const tensor::Tensor& t, const std::vector<int64_t>& index);

// Every multi-index of `shape` in row-major order.
std::vector<std::vector<int64_t>> all_indices(const tensor::Shape& shape);

// Runs `command` with /bin/sh, stdout and stderr together; returns how it ended.
struct CommandResult {
  int exit_code = -1;  // the shell's exit status (128 + signal for a signal, as shells report)
  std::string output;
  double seconds = 0;
};
CommandResult run_command(const std::string& command);

// `name` in the test's scratch directory ($TEST_TMPDIR, else /tmp).
std::string temp_path(const std::string& name);
// temp_path(name) as an empty directory (what was there is removed): one test's files.
std::string fresh_directory(const std::string& name);
// The whole of a text file ("" if it cannot be read).
std::string read_file(const std::string& path);

// Restores, when it goes out of scope, the intra-op thread count (tensor::set_num_threads) a
// test changes.
struct KeepThreads {
  int saved = tensor::get_num_threads();
  ~KeepThreads() { tensor::set_num_threads(saved); }
};

// `op` on copies of `inputs` on cuda:0 equals `op` on the CPU tensors (within `tol`, relative
// and absolute; NaN where the CPU gives NaN): shape, dtype and device checked too.
void expect_matches_cpu(const std::vector<tensor::Tensor>& inputs,
                        const std::function<tensor::Tensor(const std::vector<tensor::Tensor>&)>& op,
                        const std::string& what, double tol);

// x * 1 (a non-leaf copy, recorded) with `write` applied to it in place: the in-place and
// index-assignment fixtures' cases, whose gradient reaches x through the writes.
tensor::Tensor written_copy(const tensor::Tensor& x, const std::function<void(const tensor::Tensor&)>& write);

// The loss column of an examples' --metrics CSV ("step,loss[,...]"): the second field of
// every row after the header.
std::vector<double> read_losses(const std::string& path);

// Runs `body` under each instruction set the CPU has (tensor/cpu_isa.h: AVX2, and AVX-512 on an
// x86-64-v4 CPU), the set's name in Catch's messages, and puts the chosen one back after.
void for_each_cpu_isa(const std::function<void()>& body);

}  // namespace tinyddp::testing
