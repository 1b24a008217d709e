// StopSignals (preemption.h): the handler only stores the first signal's number.
#include "examples/preemption.h"

#include <csignal>
#include <cstring>

#include <atomic>

#include <fmt/format.h>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/process_group.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::examples {
namespace {

std::atomic<int> received_signal{0};
std::atomic<bool> installed{false};
struct sigaction saved_usr1 {
}, saved_term{};

// Repeated signals change nothing: under a launcher inside srun each worker gets SIGTERM
// twice (from Slurm, which signals every process of the step, and from the launcher passing
// it on). What ends a rank that cannot stop is the SIGKILL that follows (Slurm's KillWait,
// the launcher's --grace_period).
void on_stop_signal(int signo) {
  int expected = 0;
  received_signal.compare_exchange_strong(expected, signo);
}

}  // namespace

StopSignals::StopSignals() {
  TDDP_CHECK(!installed.exchange(true), "StopSignals: one is already installed in this process");
  received_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  ::sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &action, &saved_usr1);
  ::sigaction(SIGTERM, &action, &saved_term);
}

StopSignals::~StopSignals() {
  if (!keep_ && received() == 0) {  // a signal of this process's own: it is on its way out too
    ::sigaction(SIGUSR1, &saved_usr1, nullptr);
    ::sigaction(SIGTERM, &saved_term, nullptr);
  }
  installed = false;
}

int StopSignals::received() const { return received_signal.load(); }

LossAndStop loss_and_stop_over_ranks(comm::ProcessGroup* pg, tensor::Device device, double loss, StopSignals* signals) {
  const double flag = signals != nullptr && signals->received() != 0 ? 1.0 : 0.0;
  LossAndStop result{loss, flag > 0};
  if (pg != nullptr) {
    const tensor::Tensor both = tensor::tensor({loss, flag}, tensor::TensorOptions(tensor::kFloat64).device(device));
    pg->allreduce(both, comm::ReduceOp::kAvg)->wait();
    const std::vector<double> mean = both.to(tensor::kCPU).to_vector<double>();
    result = {mean[0], mean[1] > 0};
  }
  if (result.stop && signals != nullptr) signals->keep_until_exit();
  return result;
}

bool any_rank_stopping(comm::ProcessGroup* pg, tensor::Device device, StopSignals& signals) {
  bool stop = signals.received() != 0;
  if (pg != nullptr) {
    const tensor::Tensor flag =
        tensor::tensor({stop ? 1.0f : 0.0f}, tensor::TensorOptions(tensor::kFloat32).device(device));
    pg->allreduce(flag, comm::ReduceOp::kMax)->wait();
    stop = flag.item<float>() > 0;
  }
  if (stop) signals.keep_until_exit();
  return stop;
}

std::string stop_message(int signo, const std::string& where, const std::string& checkpoint,
                         const std::string& resume_with) {
  return fmt::format("stopping {} ({}): checkpoint {} written; exit status {} (run again with {} to go on)", where,
                     signo != 0 ? ::strsignal(signo) : "another rank was signalled", checkpoint, kRequeueExitStatus,
                     resume_with);
}

}  // namespace tinyddp::examples
