// Creating the process group of a job: init_process_group("gloo") / init_from_env() read the
// variables the launcher (and torchrun) set: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT. Rank 0 hosts the TCPStore unless the launcher does (TINYDDP_STORE_HOSTED=1);
// TINYDDP_STORE_PREFIX, when set, namespaces every key (the launcher gives each restart its
// own); a world of one needs no network at all.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "tinyddp/comm/process_group.h"

namespace tinyddp::comm {

struct InitOptions {
  // Unset ones come from the environment.
  InitOptions& rank(int v) {
    rank_ = v;
    return *this;
  }  // env RANK
  InitOptions& world_size(int v) {
    world_size_ = v;
    return *this;
  }  // env WORLD_SIZE
  // env MASTER_ADDR, default 127.0.0.1
  InitOptions& master_addr(std::string v) {
    master_addr_ = std::move(v);
    return *this;
  }
  // env MASTER_PORT (required when world_size > 1)
  InitOptions& master_port(int v) {
    master_port_ = v;
    return *this;
  }
  // Whether this process runs the TCPStore server: by default rank 0, unless the environment
  // says TINYDDP_STORE_HOSTED=1 (the launcher runs it).
  InitOptions& host_store(bool v) {
    host_store_ = v;
    return *this;
  }
  InitOptions& timeout(Millis v) {
    timeout_ = v;
    return *this;
  }
  // The address this rank's transport binds to and its peers connect to: env
  // TINYDDP_BIND_ADDR, else 127.0.0.1 when the master is on loopback, else this host's source
  // address on its route to MASTER_ADDR (as `ip route get` shows it). A loopback address for a
  // master on another host is an error naming both.
  InitOptions& bind_address(std::string v) {
    bind_address_ = std::move(v);
    return *this;
  }
  std::optional<int> rank() const { return rank_; }
  std::optional<int> world_size() const { return world_size_; }
  const std::optional<std::string>& master_addr() const { return master_addr_; }
  std::optional<int> master_port() const { return master_port_; }
  std::optional<bool> host_store() const { return host_store_; }
  Millis timeout() const { return timeout_; }
  const std::optional<std::string>& bind_address() const { return bind_address_; }

 private:
  std::optional<int> rank_;
  std::optional<int> world_size_;
  std::optional<std::string> master_addr_;
  std::optional<int> master_port_;
  std::optional<bool> host_store_;
  Millis timeout_{60000};
  std::optional<std::string> bind_address_;
};

// Joins the job's group with `backend` ("gloo": CPU tensors, and CUDA tensors staged through
// the host; "nccl": CUDA tensors, one GPU per rank, needs a CUDA build and a GPU), makes it
// the default group, and returns it. Errors name the variable or value that is wrong.
std::shared_ptr<ProcessGroup> init_process_group(const std::string& backend = "gloo", const InitOptions& options = {});
// A group of `size` ranks over `store` with `backend` ("gloo" or "nccl"), checked for desync as
// init_process_group's is (a ProcessGroupWrapper around the backend, unless the group has one
// rank), without making it the default group: for a program that hosts its own store, or for
// several groups on one. Gloo's ranks agree on the check when the group is made; NCCL's at the
// first collective, as its constructor waits for no rank.
std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend, std::shared_ptr<Store> store, int rank,
                                                int size, const ProcessGroupOptions& options = {});
// init_process_group("gloo") with everything from the environment.
std::shared_ptr<ProcessGroup> init_from_env();

// The group made by the last init_process_group (throws if there is none).
std::shared_ptr<ProcessGroup> default_group();
bool is_initialized();
// Drops the default group (its connections close when the last user lets go).
void destroy_process_group();

// LOCAL_RANK from the environment (0 when unset): which device a rank uses on its node.
int local_rank();

}  // namespace tinyddp::comm
