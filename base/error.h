// tinyddp's exception type and the TDDP_CHECK macro used at every API boundary.
// Messages name the operation, the offending argument and the shapes/dtypes/devices involved.
#pragma once

// Every tinyddp header includes this one, so a program built without C++17 (Bazel's default
// toolchain compiles with -std=c++0x) stops here with the fix rather than deep inside a header.
#if __cplusplus < 201703L
#error \
    "tinyddp needs C++17 or later: build with tinyddp_cc_binary/tinyddp_cc_library from @tinyddp//:defs.bzl (C++20), or add copts = [\"-std=c++20\"]"
#endif

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace tinyddp {

// Every error tinyddp raises on bad input. Derives from std::runtime_error so callers that
// only know the standard library can still catch it.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A blocking call that gave up after its timeout (a store wait, a collective, a Work::wait).
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& message) : Error(message) {}
};

}  // namespace tinyddp

// TDDP_CHECK(cond, "fmt {}", args...): throws tinyddp::Error with the formatted message when
// cond is false. The message is only formatted on failure.
#define TDDP_CHECK(cond, ...)                             \
  do {                                                    \
    if (!(cond)) {                                        \
      throw ::tinyddp::Error(::fmt::format(__VA_ARGS__)); \
    }                                                     \
  } while (false)
