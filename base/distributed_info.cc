// base/distributed_info.h: one value behind a mutex (init_process_group may run on any thread).
#include "tinyddp/base/distributed_info.h"

#include <mutex>

namespace tinyddp::base {

namespace {
std::mutex& info_mutex() {
  static std::mutex m;
  return m;
}
std::optional<DistributedInfo>& info_value() {
  static std::optional<DistributedInfo> value;
  return value;
}
}  // namespace

void set_distributed_info(std::optional<DistributedInfo> info) {
  std::lock_guard<std::mutex> lock(info_mutex());
  info_value() = info;
}

std::optional<DistributedInfo> distributed_info() {
  std::lock_guard<std::mutex> lock(info_mutex());
  return info_value();
}

}  // namespace tinyddp::base
