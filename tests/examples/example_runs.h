// Running an example on 2 ranks under //launcher:launch, and reading what its ranks printed.
#pragma once

#include <regex>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/test_util.h"

namespace tinyddp::testing {

inline CommandResult launch2(const std::string& program_and_args) {
  return run_command("launcher/launch --nproc_per_node 2 -- " + program_and_args);
}

// Every value of the regex's first group, in order of appearance.
inline std::vector<std::string> all_matches(const std::string& text, const std::string& pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

// The pattern's first group matches once per rank, with the same value on both.
inline void require_same_on_both_ranks(const std::string& output, const std::string& pattern) {
  const std::vector<std::string> values = all_matches(output, pattern);
  REQUIRE(values.size() == 2);
  CHECK(values[0] == values[1]);
}

}  // namespace tinyddp::testing
