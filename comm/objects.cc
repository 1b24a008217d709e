// Integers and bytes through a process group (objects.h): each travels as an int64 tensor on
// the group's device and comes back to the host.
#include "tinyddp/comm/objects.h"

#include <algorithm>
#include <cstring>

#include "tinyddp/tensor/factory.h"

namespace tinyddp::comm {

namespace {
Tensor int_tensor(const std::vector<int64_t>& values, tensor::Device device) {
  return tensor::from_vector(values, tensor::Shape{static_cast<int64_t>(values.size())}).to(device);
}

std::vector<int64_t> host_ints(const Tensor& t) { return t.to(tensor::kCPU).contiguous().to_vector<int64_t>(); }

std::vector<Tensor> gathered(const ProcessGroup& pg, int64_t length, tensor::Device device) {
  std::vector<Tensor> out;
  for (int r = 0; r < pg.size(); ++r)
    out.push_back(tensor::zeros({length}, tensor::TensorOptions(tensor::kInt64).device(device)));
  return out;
}
}  // namespace

int64_t allreduce_int(ProcessGroup& pg, tensor::Device device, int64_t mine, ReduceOp op) {
  const Tensor t = int_tensor({mine}, device);
  pg.allreduce(t, op)->wait();
  return host_ints(t)[0];
}

std::vector<std::vector<int64_t>> allgather_equal_ints(ProcessGroup& pg, tensor::Device device,
                                                       const std::vector<int64_t>& mine) {
  std::vector<Tensor> all = gathered(pg, static_cast<int64_t>(mine.size()), device);
  pg.allgather(all, int_tensor(mine, device))->wait();
  std::vector<std::vector<int64_t>> out;
  for (const Tensor& t : all) out.push_back(host_ints(t));
  return out;
}

std::vector<std::vector<int64_t>> allgather_ints(ProcessGroup& pg, tensor::Device device,
                                                 const std::vector<int64_t>& mine) {
  std::vector<int64_t> length_of;
  for (const auto& l : allgather_equal_ints(pg, device, {static_cast<int64_t>(mine.size())})) length_of.push_back(l[0]);
  const int64_t longest = *std::max_element(length_of.begin(), length_of.end());
  std::vector<int64_t> padded = mine;
  padded.resize(static_cast<size_t>(longest), -1);
  std::vector<std::vector<int64_t>> out = allgather_equal_ints(pg, device, padded);
  for (size_t r = 0; r < out.size(); ++r) out[r].resize(static_cast<size_t>(length_of[r]));
  return out;
}

std::vector<int64_t> broadcast_ints(ProcessGroup& pg, tensor::Device device, const std::vector<int64_t>& values,
                                    int root) {
  const Tensor t = int_tensor(values, device);
  pg.broadcast(t, root)->wait();
  return host_ints(t);
}

std::vector<std::vector<int64_t>> broadcast_int_lists(ProcessGroup& pg, tensor::Device device,
                                                      const std::vector<std::vector<int64_t>>& lists, size_t max_ints,
                                                      int root) {
  std::vector<int64_t> flat;
  if (pg.rank() == root) {
    flat.push_back(static_cast<int64_t>(lists.size()));
    for (const std::vector<int64_t>& list : lists) {
      flat.push_back(static_cast<int64_t>(list.size()));
      flat.insert(flat.end(), list.begin(), list.end());
    }
    TDDP_CHECK(flat.size() <= max_ints, "broadcast_int_lists: {} lists take {} integers, more than the bound {}",
               lists.size(), flat.size(), max_ints);
  }
  flat.resize(max_ints, -1);  // the same length on every rank: one broadcast
  const std::vector<int64_t> agreed = broadcast_ints(pg, device, flat, root);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(agreed.empty() ? 0 : agreed[0]));
  size_t pos = 1;
  for (std::vector<int64_t>& list : out) {
    const auto count = static_cast<size_t>(agreed[pos++]);
    list.assign(agreed.begin() + static_cast<int64_t>(pos), agreed.begin() + static_cast<int64_t>(pos + count));
    pos += count;
  }
  return out;
}

std::vector<std::string> allgather_bytes(ProcessGroup& pg, tensor::Device device, const std::string& bytes) {
  std::vector<int64_t> mine(1 + (bytes.size() + 7) / 8, 0);  // the length, then the bytes in words
  mine[0] = static_cast<int64_t>(bytes.size());
  if (!bytes.empty()) std::memcpy(mine.data() + 1, bytes.data(), bytes.size());
  std::vector<std::string> out;
  for (const std::vector<int64_t>& words : allgather_ints(pg, device, mine)) {
    std::string s(static_cast<size_t>(words[0]), '\0');
    if (!s.empty()) std::memcpy(s.data(), words.data() + 1, s.size());
    out.push_back(std::move(s));
  }
  return out;
}

std::string broadcast_bytes(ProcessGroup& pg, tensor::Device device, const std::string& bytes, int root) {
  const bool mine = pg.rank() == root;
  const auto size =
      static_cast<size_t>(broadcast_ints(pg, device, {mine ? static_cast<int64_t>(bytes.size()) : 0}, root)[0]);
  std::vector<int64_t> words((size + 7) / 8, 0);
  if (mine && size > 0) std::memcpy(words.data(), bytes.data(), size);
  std::string out(size, '\0');
  if (words.empty()) return out;
  const std::vector<int64_t> received = broadcast_ints(pg, device, words, root);
  std::memcpy(out.data(), received.data(), size);
  return out;
}

}  // namespace tinyddp::comm
