// A node's worker group (worker_group.h): spawn every local worker, then one poll loop that
// copies their output line by line, reaps them, and stops the group on the first failure, on
// SIGINT/SIGTERM, or when the PeerWatch says the other nodes want it stopped.
#include "tinyddp/launcher/worker_group.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "tinyddp/base/error.h"
#include "tinyddp/base/exit_status.h"
#include "tinyddp/launcher/processes.h"

extern char** environ;

namespace tinyddp::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// Signals reach the poll loop through this pipe (the handler only writes the signal number).
int signal_pipe[2] = {-1, -1};

void on_signal(int signo) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] const ssize_t n = ::write(signal_pipe[1], &byte, 1);
  errno = saved;
}

// One output stream of a worker: its pipe and the part of a line not yet printed.
struct Stream {
  int fd = -1;
  int console = 1;  // 1 for the worker's stdout, 2 for its stderr
  std::string pending;
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream streams[2];
  std::unique_ptr<std::ofstream> log_file;
};

class Attempt {
 public:
  Attempt(const LaunchConfig& options, const GroupSpec& spec, const CoreShare& share, PeerWatch* watch,
          std::ostream& log)
      : options_(options), spec_(spec), share_(share), watch_(watch), log_(log) {}

  ~Attempt() {
    for (Worker& w : workers_) {
      for (Stream& s : w.streams) {
        if (s.fd >= 0) ::close(s.fd);
      }
    }
  }

  // Starts the workers and runs until all have ended.
  void run() {
    for (int local = 0; local < options_.nproc_per_node; ++local) {
      spawn(local);
      if (failed_rank_ >= 0) break;  // could not even start it
    }
    if (failed_rank_ >= 0) stop(SIGTERM);
    loop();
  }

  GroupResult result() const {
    // Stopped for a requeue: some worker exited with kRequeueExitStatus and none failed.
    const bool requeue =
        requeued_ && failed_rank_ < 0 && std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) {
          return !w.running && WIFEXITED(w.status) &&
                 (WEXITSTATUS(w.status) == 0 || WEXITSTATUS(w.status) == kRequeueExitStatus);
        });
    return {failed_rank_, failed_status_, interrupted_by_, peer_reason_, requeue};
  }

 private:
  // The worker's log file under --log_dir (attempt_<k>/rank_<r>.log), when one is asked for.
  void open_log(Worker& w) {
    if (options_.log_dir.empty()) return;
    const std::filesystem::path dir =
        std::filesystem::path(options_.log_dir) / fmt::format("attempt_{}", spec_.attempt);
    std::filesystem::create_directories(dir);
    const std::filesystem::path file = dir / fmt::format("rank_{}.log", w.rank);
    w.log_file = std::make_unique<std::ofstream>(file);
    TDDP_CHECK(w.log_file->good(), "launch: cannot write the log file {}", file.string());
  }

  // The launcher's environment with the worker's variables (torchrun's and tinyddp's) set, as
  // "KEY=value" strings for execve.
  std::vector<std::string> environment(int rank, int local) const {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      const size_t eq = entry.find('=');
      if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(local);
    env["WORLD_SIZE"] = std::to_string(spec_.world_size);
    env["LOCAL_WORLD_SIZE"] = std::to_string(options_.nproc_per_node);
    env["GROUP_RANK"] = std::to_string(spec_.group_rank);
    env["MASTER_ADDR"] = spec_.master_addr;
    env["MASTER_PORT"] = std::to_string(spec_.master_port);
    env["TINYDDP_STORE_HOSTED"] = "1";
    env["TINYDDP_STORE_PREFIX"] = spec_.store_prefix;
    env["TINYDDP_RESTART_COUNT"] = std::to_string(spec_.restarts);
    env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(spec_.restarts);
    env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(options_.max_restarts);
    env["TORCHELASTIC_RUN_ID"] = spec_.run_id;
    if (env.find("OMP_NUM_THREADS") == env.end()) env["OMP_NUM_THREADS"] = "1";
    if (env.find("TINYDDP_NUM_THREADS") == env.end()) env["TINYDDP_NUM_THREADS"] = std::to_string(share_.threads);
    std::vector<std::string> strings;
    for (const auto& [key, value] : env) strings.push_back(key + "=" + value);
    return strings;
  }

  void spawn(int local) {
    Worker& w = workers_.emplace_back();
    w.rank = spec_.first_rank + local;
    open_log(w);
    // Everything the child needs is built before fork: after it, only async-signal-safe calls.
    std::vector<std::string> env_strings = environment(w.rank, local);
    cpu_set_t bind;
    CPU_ZERO(&bind);
    const bool bound = static_cast<size_t>(local) < share_.cpus.size();
    if (bound) {
      for (const int cpu : share_.cpus[static_cast<size_t>(local)]) CPU_SET(cpu, &bind);
    }
    std::vector<char*> envp;
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = options_.program;
    const std::string path = resolve(args[0]);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    int out[2], err[2], status_pipe[2];
    TDDP_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0 && ::pipe2(status_pipe, O_CLOEXEC) == 0,
               "launch: pipe: {}", std::strerror(errno));
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    TDDP_CHECK(pid >= 0, "launch: fork: {}", std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);                     // a group of its own: stopping it reaches its children too
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // and it dies if the launcher is killed outright
      if (::getppid() != parent) ::_exit(1);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int signo : {SIGINT, SIGTERM, SIGUSR1, SIGCHLD, SIGPIPE}) ::sigaction(signo, &dfl, nullptr);
      sigset_t none;
      ::sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      if (bound) ::sched_setaffinity(0, sizeof(bind), &bind);  // --cpu_bind: its own cores
      ::execve(path.c_str(), argv.data(), envp.data());
      const int error = errno;
      [[maybe_unused]] const ssize_t n = ::write(status_pipe[1], &error, sizeof(error));
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here, so that the group exists before we might signal it
    ::close(out[1]);
    ::close(err[1]);
    ::close(status_pipe[1]);
    int exec_error = 0;
    ssize_t n;
    do {
      n = ::read(status_pipe[0], &exec_error, sizeof(exec_error));
    } while (n < 0 && errno == EINTR);
    ::close(status_pipe[0]);
    w.pid = pid;
    w.running = true;
    w.streams[0].fd = out[0];
    w.streams[0].console = 1;
    w.streams[1].fd = err[0];
    w.streams[1].console = 2;
    if (n == static_cast<ssize_t>(sizeof(exec_error))) {
      log_ << fmt::format("launch: cannot run '{}' for rank {}: {}", options_.program[0], w.rank,
                          exec_failure(options_.program[0], path, exec_error))
           << std::endl;
      record_failure(w, 127 << 8);
    }
  }

  void record_failure(const Worker& w, int status) {
    if (failed_rank_ >= 0 || interrupted_by_ != 0) return;
    failed_rank_ = w.rank;
    failed_status_ = status;
    if (watch_) watch_->report(fmt::format("rank {} {}", w.rank, describe(status)));
  }

  // Sends `signo` to every running worker's process group.
  void signal_workers(int signo) {
    for (const Worker& w : workers_) {
      if (w.running) ::kill(-w.pid, signo);
    }
  }

  // Sends `signo` to the workers, once; SIGKILL follows after the grace period.
  void stop(int signo) {
    if (stopping_) return;
    stopping_ = true;
    kill_at_ = Clock::now() + options_.grace_period;
    signal_workers(signo);
  }

  void emit(Worker& w, Stream& s, const std::string& line) {
    if (w.log_file) {
      *w.log_file << line << '\n';
      w.log_file->flush();
    }
    if (!w.log_file || options_.tee) write_all(s.console, fmt::format("[rank {}] {}\n", w.rank, line));
  }

  // Reads what is there; prints complete lines; on end of file prints the rest and closes.
  void drain(Worker& w, Stream& s) {
    char buffer[65536];
    const ssize_t n = ::read(s.fd, buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      if (!s.pending.empty()) emit(w, s, s.pending);
      s.pending.clear();
      ::close(s.fd);
      s.fd = -1;
      return;
    }
    s.pending.append(buffer, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = s.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      emit(w, s, s.pending.substr(start, nl - start));
    }
    s.pending.erase(0, start);
    if (s.pending.size() > 65536) {  // a very long line without newline: print it in pieces
      emit(w, s, s.pending);
      s.pending.clear();
    }
  }

  void reap() {
    for (Worker& w : workers_) {
      if (!w.running) continue;
      int status = 0;
      const pid_t got = ::waitpid(w.pid, &status, WNOHANG);
      if (got != w.pid) continue;
      w.running = false;
      w.status = status;
      ::kill(-w.pid, SIGKILL);  // whatever it left behind in its group goes with it
      // Status 75 is a requeue when a signal reached this launcher from outside (srun signals
      // every process of the step). When the launcher stops the workers for its own reasons
      // (a failure, the other nodes, a new round), those given --checkpoint still stop after
      // a step and exit 75, and so do the ranks of other nodes, which agree on the stop: that
      // is a stop as asked here, and a failure on a node that asked nothing (as a rank failing
      // in its collectives was), so the job restarts or forms its new round as before.
      if (WIFEXITED(status) && WEXITSTATUS(status) == kRequeueExitStatus && (interrupted_by_ != 0 || got_usr1_)) {
        // Not a failure: the ranks agreed to stop after a step (examples/preemption.h); the
        // others stop at the same step, or fail in their collectives if they cannot.
        if (!requeued_)
          log_ << fmt::format("launch: rank {} stopped for a requeue (status {})", w.rank, kRequeueExitStatus)
               << std::endl;
        requeued_ = true;
        continue;
      }
      if (status != 0 && !stopping_) {
        log_ << fmt::format("launch: rank {} (pid {}) {}; stopping the other workers", w.rank, w.pid, describe(status))
             << std::endl;
        record_failure(w, status);
        stop(SIGTERM);
      }
    }
  }

  void on_signal_byte(int signo) {
    if (signo == SIGCHLD) return;  // reap() runs every round anyway
    if (signo == kPeerWoke) {
      if (failed_rank_ >= 0 || interrupted_by_ != 0 || stopping_) return;
      // A byte an earlier attempt's watch wrote after this node had failed on its own is
      // stale: only this attempt's watch, having a reason, counts.
      const std::string reason = watch_ != nullptr ? watch_->stop_reason() : std::string();
      if (reason.empty()) return;
      peer_reason_ = reason;
      log_ << fmt::format("launch: {}; stopping this node's workers", peer_reason_) << std::endl;
      stop(SIGTERM);
      return;
    }
    if (signo == SIGUSR1) {
      // Slurm's early warning (sbatch --signal=USR1@60, scancel --signal=USR1): the workers
      // decide what to do (stop after a step for a requeue); nothing is stopped here.
      log_ << fmt::format("launch: got {}; passing it to the workers", ::strsignal(signo)) << std::endl;
      got_usr1_ = true;
      signal_workers(SIGUSR1);
      return;
    }
    if (interrupted_by_ == 0 && failed_rank_ < 0) {
      interrupted_by_ = signo;
      log_ << fmt::format("launch: got {}; passing it to the workers", ::strsignal(signo)) << std::endl;
    }
    stop(signo);
  }

  void loop() {
    std::optional<Clock::time_point> all_exited_at;
    while (true) {
      std::vector<pollfd> fds{{signal_pipe[0], POLLIN, 0}};
      std::vector<std::pair<Worker*, Stream*>> owners{{nullptr, nullptr}};
      for (Worker& w : workers_) {
        for (Stream& s : w.streams) {
          if (s.fd < 0) continue;
          fds.push_back({s.fd, POLLIN, 0});
          owners.emplace_back(&w, &s);
        }
      }
      const bool any_running = std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; });
      if (!any_running) {
        if (fds.size() == 1) return;
        // Every worker has exited; a pipe still open belongs to a process that escaped its
        // group. Give the output a moment to arrive, then stop reading.
        if (!all_exited_at) all_exited_at = Clock::now();
        if (Clock::now() - *all_exited_at > std::chrono::seconds(2)) return;
      }
      const int ready = ::poll(fds.data(), fds.size(), 50);
      if (ready < 0 && errno != EINTR) throw Error(fmt::format("launch: poll: {}", std::strerror(errno)));
      if (ready > 0) {
        if (fds[0].revents & POLLIN) {
          unsigned char signals[64];
          const ssize_t n = ::read(signal_pipe[0], signals, sizeof(signals));
          for (ssize_t i = 0; i < n; ++i) on_signal_byte(signals[i]);
        }
        for (size_t i = 1; i < fds.size(); ++i) {
          if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) drain(*owners[i].first, *owners[i].second);
        }
      }
      reap();
      if (stopping_ && !killed_ && Clock::now() >= kill_at_) {
        killed_ = true;
        for (const Worker& w : workers_) {
          if (w.running) {
            log_ << fmt::format("launch: rank {} (pid {}) did not stop within {} ms; killing it", w.rank, w.pid,
                                options_.grace_period.count())
                 << std::endl;
            ::kill(-w.pid, SIGKILL);
          }
        }
      }
    }
  }

  const LaunchConfig& options_;
  const GroupSpec& spec_;
  const CoreShare& share_;
  PeerWatch* watch_;
  std::ostream& log_;
  std::vector<Worker> workers_;
  bool stopping_ = false;
  bool requeued_ = false;  // a worker exited with kRequeueExitStatus after a signal from outside
  bool got_usr1_ = false;
  bool killed_ = false;
  Clock::time_point kill_at_;
  int failed_rank_ = -1;
  int failed_status_ = 0;
  int interrupted_by_ = 0;
  std::string peer_reason_;
};

}  // namespace

int wake_fd() { return signal_pipe[1]; }

SignalScope::SignalScope() {
  TDDP_CHECK(::pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "launch: pipe: {}", std::strerror(errno));
  struct sigaction action {};
  action.sa_handler = on_signal;
  ::sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signo : {SIGINT, SIGTERM, SIGUSR1, SIGCHLD}) ::sigaction(signo, &action, &saved_[signo]);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &saved_[SIGPIPE]);
}

SignalScope::~SignalScope() {
  for (auto& [signo, action] : saved_) ::sigaction(signo, &action, nullptr);
  ::close(signal_pipe[0]);
  ::close(signal_pipe[1]);
  signal_pipe[0] = signal_pipe[1] = -1;
}

GroupResult run_group(const LaunchConfig& options, const GroupSpec& spec, const CoreShare& share, PeerWatch* watch,
                      std::ostream& log) {
  Attempt group(options, spec, share, watch, log);
  group.run();
  return group.result();
}

}  // namespace tinyddp::launcher
