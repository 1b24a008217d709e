// The exit status by which a worker says "I stopped on purpose, run me again": after SIGUSR1
// or SIGTERM (a Slurm preemption or time limit), every rank finishes a step, rank 0 writes a
// checkpoint and every rank exits with it (examples/preemption.h). The launcher passes it on
// as its own status rather than counting a failure, and so does srun; Slurm requeues a job
// ending with it when slurm.conf says RequeueExit=75 (examples/slurm/train.sbatch runs
// scontrol requeue itself). sysexits.h's EX_TEMPFAIL: a temporary failure, try again later.
#pragma once

namespace tinyddp {

inline constexpr int kRequeueExitStatus = 75;

}  // namespace tinyddp
