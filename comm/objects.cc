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

std::vector<std::vector<int64_t>> allgather_ints(ProcessGroup& pg, tensor::Device device,
                                                 const std::vector<int64_t>& mine) {
  std::vector<Tensor> lengths = gathered(pg, 1, device);
  pg.allgather(lengths, int_tensor({static_cast<int64_t>(mine.size())}, device))->wait();
  std::vector<int64_t> length_of;
  for (const Tensor& l : lengths) length_of.push_back(host_ints(l)[0]);
  const int64_t longest = *std::max_element(length_of.begin(), length_of.end());
  std::vector<int64_t> padded = mine;
  padded.resize(static_cast<size_t>(longest), -1);
  std::vector<Tensor> all = gathered(pg, longest, device);
  pg.allgather(all, int_tensor(padded, device))->wait();
  std::vector<std::vector<int64_t>> out;
  for (size_t r = 0; r < all.size(); ++r) {
    std::vector<int64_t> values = host_ints(all[r]);
    values.resize(static_cast<size_t>(length_of[r]));
    out.push_back(std::move(values));
  }
  return out;
}

std::vector<int64_t> broadcast_ints(ProcessGroup& pg, tensor::Device device, const std::vector<int64_t>& values,
                                    int root) {
  const Tensor t = int_tensor(values, device);
  pg.broadcast(t, root)->wait();
  return host_ints(t);
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
