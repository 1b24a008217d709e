// Bucket assignment: which parameters' gradients travel together in one allreduce.
// Parameters are taken in the given order (reverse registration order at first: the order
// in which backward usually produces their gradients), grouped by dtype and device, and a
// bucket is closed once it holds at least its cap of bytes: the first bucket of each group is
// capped small (so communication starts early), the rest at bucket_cap_mb. A parameter is
// never split: one larger than the cap closes the bucket it joins (so it shares its bucket
// only with parameters that came before it). For the initial assignment buckets are then ordered by
// their first parameter; the rebuild keeps them in the order they closed (as PyTorch does
// when it rebuilds along the gradients' arrival order).
#pragma once

#include <cstddef>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::ddp {

struct BucketAssignment {
  std::vector<std::vector<size_t>> buckets;  // parameter indices per bucket, in fill order
  std::vector<size_t> bytes;                 // bytes per bucket
};

BucketAssignment assign_buckets(const std::vector<tensor::Tensor>& params, const std::vector<size_t>& order,
                                size_t first_bucket_cap_bytes, size_t bucket_cap_bytes,
                                bool sort_by_first_parameter = true);

// The default order: last registered parameter first.
std::vector<size_t> reverse_order(size_t count);

}  // namespace tinyddp::ddp
