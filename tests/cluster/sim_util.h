// What the tests of the simulated cluster (scripts/sim_cluster.sh) share: whether network
// namespaces can be made here, the script's command line, the cluster's name from its output,
// the check that nothing of it is left, and a job run with a fault injected mid-run.
#pragma once

#include <unistd.h>

#include <regex>
#include <string>

#include <fmt/format.h>

#include "tests/test_util.h"

namespace tinyddp::testing::cluster {

// Why namespaces cannot be made here, or empty when they can.
inline std::string cannot_simulate() {
  if (::geteuid() != 0) return "not root: network namespaces need root";
  const std::string probe = "tdprobe" + std::to_string(::getpid());
  const CommandResult r = run_command("ip netns add " + probe + " && ip netns del " + probe);
  return r.exit_code == 0 ? "" : "cannot create network namespaces: " + r.output;
}

inline std::string sim(const std::string& options, const std::string& program) {
  return "bash scripts/sim_cluster.sh --launch launcher/launch --link_delay scripts/link_delay --logs " +
         temp_path("sim_logs") + " --port 29561 " + options + " -- " + program;
}

// The namespace prefix and bridge the script announced ("namespace tdNNNNn<i>, bridge tdNNNNbr").
inline std::string tag_of(const std::string& output) {
  std::smatch m;
  REQUIRE(std::regex_search(output, m, std::regex(R"(bridge (td[0-9]+)br\))")));
  return m[1];
}

// Nothing named after `tag` is left: no namespace, no bridge.
inline void require_removed(const std::string& tag) {
  CHECK_THAT(run_command("ip netns list").output, !Catch::Contains(tag + "n"));
  CHECK(run_command("ip link show " + tag + "br").exit_code != 0);
}

// The first line of `output` that starts with `prefix` (as "[node 0] [rank 0] train: error: "),
// or empty when there is none.
inline std::string line_starting(const std::string& output, const std::string& prefix) {
  for (size_t at = output.find(prefix); at != std::string::npos; at = output.find(prefix, at + 1)) {
    if (at == 0 || output[at - 1] == '\n') return output.substr(at, output.find('\n', at) - at);
  }
  return "";
}

// Whether a collective's error `line` names the peer it waited for: the ring's "(rank N)" after
// the peer's address, or Gloo's point-to-point timeout "waited for rank N," (which one depends
// on the collective in flight when the fault came).
inline bool names_peer(const std::string& line, int rank) {
  return line.find(fmt::format("(rank {})", rank)) != std::string::npos ||
         line.find(fmt::format("waited for rank {},", rank)) != std::string::npos;
}

// Runs `job` in the background with its output in `out`, runs `action` (shell, with $tag set
// to the cluster's name) 3 s in, or once a node's output matches the grep pattern `when` (at
// most 60 s), and waits up to 30 s for the job to end; a job still running then gets SIGTERM (the
// script removes what it made). Returns the output and "status N".
inline CommandResult run_with_fault(const std::string& job, const std::string& out, const std::string& action,
                                    const std::string& when = "") {
  // The nodes' output reaches `out` when the job ends; while it runs it is in the log folder.
  const std::string logs = temp_path("sim_logs");
  const std::string wait = when.empty() ? "sleep 3; "
                                        : "for i in $(seq 600); do grep -q '" + when + "' " + logs +
                                              "/node*.log 2>/dev/null && break; sleep 0.1; done; ";
  return run_command(fmt::format(
      "rm -f {logs}/node*.log; ({job} > {out} 2>&1; echo $? > {out}.status) & job=$!; {wait}"
      "tag=$(grep -o 'bridge td[0-9]*br' {out} | sed 's/^bridge //; s/br$//')\n{action}\n"
      "for i in $(seq 120); do [ -s {out}.status ] && break; sleep 0.25; done; "
      "[ -s {out}.status ] || {{ echo 'the job did not end: stopping it'; pkill -TERM -P $job; sleep 3; }}; "
      "cat {out}; echo status $(cat {out}.status 2>/dev/null)",
      fmt::arg("logs", logs), fmt::arg("job", job), fmt::arg("out", out), fmt::arg("wait", wait),
      fmt::arg("action", action)));
}

}  // namespace tinyddp::testing::cluster
