// CPU tensors through a group that takes device tensors only (NCCL): the group host_staged
// returns takes CPU tensors in every collective, copies them to `device`, runs the wrapped
// group's collective there, and its Work's wait() copies the results back before it returns.
// For code whose state lives on the host and whose collectives are small next to its work:
// the deterministic option's integer sums (ddp/exact_sum.h), whose int64 sums NCCL then adds.
// The copies are made on every call, so a caller that is fast on NCCL keeps its tensors on
// the device instead.
#pragma once

#include <memory>

#include "tinyddp/comm/process_group.h"

namespace tinyddp::comm {

// `pg` itself when it takes CPU tensors (Gloo); else stage_through(pg, device).
std::shared_ptr<ProcessGroup> host_staged(std::shared_ptr<ProcessGroup> pg, const tensor::Device& device);

// Always the staging group over `pg`, whatever pg takes: each CPU tensor is copied to a tensor
// of its own on `device` (the CPU as well, which tests use to check the copies) and back.
// Its collectives are pg's; new_group is refused (make subgroups from pg).
std::shared_ptr<ProcessGroup> stage_through(std::shared_ptr<ProcessGroup> pg, const tensor::Device& device);

}  // namespace tinyddp::comm
