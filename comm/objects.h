// Small host values exchanged through a process group's own collectives, as PyTorch's
// broadcast_object_list and all_gather_object: integers and bytes, each rank's own length.
// DDP uses them to agree on its parameters, the rebuilt buckets, the rank a joined model
// comes from and Join's counts; ZeroRedundancyOptimizer to gather its shards' state.
// `device` is where the group takes tensors: the CPU for Gloo, a GPU for NCCL
// (ddp::control_device). Every call is a collective: every rank of the group makes it, in
// the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tinyddp/comm/process_group.h"

namespace tinyddp::comm {

// The reduction over the ranks of one integer each (a count, a flag, the highest rank).
int64_t allreduce_int(ProcessGroup& pg, tensor::Device device, int64_t mine, ReduceOp op = ReduceOp::kSum);

// Every rank's integers, in rank order, where every rank passes as many (one allgather).
std::vector<std::vector<int64_t>> allgather_equal_ints(ProcessGroup& pg, tensor::Device device,
                                                       const std::vector<int64_t>& mine);

// Every rank's integers, in rank order; the lengths may differ (two allgathers: the lengths,
// then the values padded to the longest).
std::vector<std::vector<int64_t>> allgather_ints(ProcessGroup& pg, tensor::Device device,
                                                 const std::vector<int64_t>& mine);

// Rank `root`'s integers on every rank, in one broadcast: every rank passes as many as root
// (the others' values are replaced).
std::vector<int64_t> broadcast_ints(ProcessGroup& pg, tensor::Device device, const std::vector<int64_t>& values,
                                    int root);

// Rank `root`'s lists of integers on every rank, in one broadcast of at most `max_ints`
// integers (the count, then each list's length and values, padded): every rank passes the same
// bound, which the encoding of root's lists must fit (the others' `lists` are ignored).
std::vector<std::vector<int64_t>> broadcast_int_lists(ProcessGroup& pg, tensor::Device device,
                                                      const std::vector<std::vector<int64_t>>& lists, size_t max_ints,
                                                      int root);

// Every rank's bytes, in rank order (each rank's own length).
std::vector<std::string> allgather_bytes(ProcessGroup& pg, tensor::Device device, const std::string& bytes);

// Rank `root`'s bytes on every rank (the others' `bytes` are ignored): the length, then the
// bytes in 8-byte words.
std::string broadcast_bytes(ProcessGroup& pg, tensor::Device device, const std::string& bytes, int root);

}  // namespace tinyddp::comm
