// How the launcher starts and describes its workers' processes (internal to launcher/: the
// static launcher, the worker group and the elastic agent): the program's path, why it could
// not run, how a worker ended, and writes to the console.
#pragma once

#include <string>

namespace tinyddp::launcher {

// Writes all of `text` to `fd` (retrying after signals; a closed console drops it).
void write_all(int fd, const std::string& text);
// How a worker ended, in words ("exited with status 1", "was killed by signal 9 (Killed)").
std::string describe(int status);
// The launcher's exit status for a worker's wait status (128 + signal for a signal).
int exit_code(int status);
// The full path `program` runs as (execve does not search PATH; doing it here, before fork,
// keeps the child to async-signal-safe calls).
std::string resolve(const std::string& program);
// Why `program` (run as `path`) could not be run, given execve's errno: the system's words and,
// for a program not found, where it was looked for; for one found but refused, whether it is
// a directory or a file without execute permission.
std::string exec_failure(const std::string& program, const std::string& path, int error);

}  // namespace tinyddp::launcher
