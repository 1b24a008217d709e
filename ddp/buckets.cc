// assign_buckets (buckets.h): parameters in the given order into buckets, each closed once it
// holds at least the cap's bytes (the first bucket's own, smaller cap; the parameter that
// reaches the cap is in it, so a bucket can be larger), one dtype and device per bucket.
#include "tinyddp/ddp/buckets.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

namespace tinyddp::ddp {

std::vector<size_t> reverse_order(size_t count) {
  std::vector<size_t> order(count);
  std::iota(order.rbegin(), order.rend(), size_t{0});
  return order;
}

BucketAssignment assign_buckets(const std::vector<tensor::Tensor>& params, const std::vector<size_t>& order,
                                size_t first_bucket_cap_bytes, size_t bucket_cap_bytes, bool sort_by_first_parameter) {
  TDDP_CHECK(order.size() == params.size(), "assign_buckets: order has {} entries for {} parameters", order.size(),
             params.size());
  struct Open {
    std::vector<size_t> params;
    size_t bytes = 0;
    bool first = true;  // still the group's first bucket
  };
  // Open buckets by (dtype, device type, device index); closed buckets with the position (in
  // `order`) of their first parameter, for the final ordering.
  std::map<std::tuple<int, int, int>, Open> open;
  std::vector<std::pair<size_t, Open>> closed;
  std::vector<size_t> position(params.size());
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = k;
  for (size_t index : order) {
    const tensor::Tensor& p = params.at(index);
    const auto key = std::make_tuple(static_cast<int>(p.dtype()), static_cast<int>(p.device().type), p.device().index);
    Open& bucket = open[key];
    bucket.params.push_back(index);
    bucket.bytes += p.nbytes();
    const size_t cap = bucket.first ? first_bucket_cap_bytes : bucket_cap_bytes;
    if (bucket.bytes >= cap) {
      closed.emplace_back(position[bucket.params.front()], bucket);
      bucket = Open{{}, 0, false};
    }
  }
  for (auto& [key, bucket] : open) {
    if (!bucket.params.empty()) closed.emplace_back(position[bucket.params.front()], bucket);
  }
  if (sort_by_first_parameter) {
    std::stable_sort(closed.begin(), closed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  BucketAssignment result;
  for (auto& [first, bucket] : closed) {
    result.buckets.push_back(bucket.params);
    result.bytes.push_back(bucket.bytes);
  }
  return result;
}

}  // namespace tinyddp::ddp
