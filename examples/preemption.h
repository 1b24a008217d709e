// Stopping for a requeue, as a Slurm job is asked to: SIGUSR1 (sbatch --signal=USR1@60 before
// the time limit, scancel --signal=USR1) or SIGTERM (a preemption, scancel, the time limit)
// asks the training to stop. Each rank notes the signal and goes on; at the next step's loss
// the ranks learn whether any of them got one (the flag rides on the loss's allreduce, so
// they agree on the step without a collective of its own), finish that step, rank 0 writes
// the checkpoint, and every rank exits with kRequeueExitStatus (75, base/exit_status.h). A job started again with
// --resume continues from that step (examples/slurm/train.sbatch requeues itself on it).
// A rank that cannot finish its step is ended by the SIGKILL that follows (Slurm's KillWait,
// the launcher's --grace_period).
#pragma once

#include <string>

#include "tinyddp/base/exit_status.h"
#include "tinyddp/tensor/device.h"

namespace tinyddp::comm {
class ProcessGroup;
}

namespace tinyddp::examples {

// While it lives, SIGUSR1 and SIGTERM are noted rather than fatal; the previous handlers come
// back when it goes. One at a time per process.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGUSR1 or SIGTERM), or 0.
  int received() const;

  // The ranks agreed to stop: the handlers stay after this object goes, until the process
  // exits. srun and the launcher signal each task apart, so a rank may stop because another
  // was signalled before its own signal arrives; arriving after the old handlers were back,
  // it would kill the rank on its way out (a status other than 75: no requeue). The helpers
  // below call it when the ranks agree.
  void keep_until_exit() { keep_ = true; }

 private:
  bool keep_ = false;
};

// A step's loss averaged over `pg`'s ranks (no group: as it is) and whether any rank was asked
// to stop (`signals`: this rank's, or null when the run cannot stop). The flag rides on the
// loss's allreduce as a second element (float64, on `device`), so the ranks agree on the step
// without a collective of its own. When they agree to stop, `signals` keeps its handlers.
struct LossAndStop {
  double loss = 0.0;
  bool stop = false;
};
LossAndStop loss_and_stop_over_ranks(comm::ProcessGroup* pg, tensor::Device device, double loss, StopSignals* signals);

// Whether any rank was asked to stop, for a loop that reduces no figure of its own each step:
// a one-element allreduce (kMax, on `device`). When so, `signals` keeps its handlers.
bool any_rank_stopping(comm::ProcessGroup* pg, tensor::Device device, StopSignals& signals);

// Rank 0's line: "stopping <where> (<signal>): checkpoint <checkpoint> written; exit status 75
// (run again with <resume_with> to go on)"; `signo` 0: another rank got the signal.
std::string stop_message(int signo, const std::string& where, const std::string& checkpoint,
                         const std::string& resume_with);

}  // namespace tinyddp::examples
