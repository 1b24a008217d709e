// The launcher's process helpers (processes.h): writing to the console whole, describing how
// a worker ended (exit code or signal), and finding the program to run, with a hint when it
// cannot be found.
#include "tinyddp/launcher/processes.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace tinyddp::launcher {

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed console: the workers' output has nowhere to go
    done += static_cast<size_t>(n);
  }
}

// How a worker ended, in words, and the launcher's exit status for it.
std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), ::strsignal(WTERMSIG(status)));
  }
  return fmt::format("ended with wait status {}", status);
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// The full path `program` runs as (execve does not search PATH; doing it here, before fork,
// keeps the child to async-signal-safe calls).
std::string resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return program;  // execve fails and the error names it
}

namespace {

// Where `program` was looked for: a relative path in the launcher's working directory (under
// `bazel run`, the directory the command was typed in), a bare name on PATH.
std::string lookup_hint(const std::string& program) {
  if (program.find('/') == std::string::npos) {
    const char* path = std::getenv("PATH");
    return fmt::format(" (not found on PATH={}; a program in the current directory needs ./{})",
                       path != nullptr ? path : "", program);
  }
  if (program.front() == '/') return "";
  std::error_code error;
  const std::filesystem::path cwd = std::filesystem::current_path(error);
  return fmt::format(" (looked for {}: a relative path is taken from the directory launch runs in)",
                     (cwd / program).lexically_normal().string());
}

}  // namespace

std::string exec_failure(const std::string& program, const std::string& path, int error) {
  if (error == ENOENT) return std::strerror(error) + lookup_hint(program);
  std::error_code ec;
  if (error == EACCES && std::filesystem::is_directory(path, ec)) {
    return fmt::format("{} is a directory, not a program (name the binary inside it)", path);
  }
  if (error == EACCES && std::filesystem::is_regular_file(path, ec)) {
    return fmt::format("{} (the file is not executable: chmod +x {}, or name its interpreter first)",
                       std::strerror(error), path);
  }
  return std::strerror(error);
}

}  // namespace tinyddp::launcher
