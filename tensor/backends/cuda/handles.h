// Internal to tensor/cuda_runtime/ (host code, only under --config=cuda): the checks around cuBLAS and
// cuDNN calls, and the per-device pools of library handles that libraries.cc and dnn_conv.cc
// lease from. A failed call throws an Error naming the call and the library's description of
// the status.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/dtype.h"

namespace tinyddp::tensor::cuda {

#define TDDP_CUBLAS_CHECK(call)                                                                                      \
  do {                                                                                                               \
    const cublasStatus_t tddp_status_ = (call);                                                                      \
    if (tddp_status_ != CUBLAS_STATUS_SUCCESS) {                                                                     \
      throw Error(fmt::format("cuBLAS call {} failed: {} ({}) at {}:{}", #call, cublasGetStatusString(tddp_status_), \
                              cublasGetStatusName(tddp_status_), __FILE__, __LINE__));                               \
    }                                                                                                                \
  } while (false)

#define TDDP_CUDNN_CHECK(call)                                                                                         \
  do {                                                                                                                 \
    const cudnnStatus_t tddp_status_ = (call);                                                                         \
    if (tddp_status_ != CUDNN_STATUS_SUCCESS) {                                                                        \
      throw Error(fmt::format("cuDNN call {} failed: {} (status {}) at {}:{}", #call,                                  \
                              cudnnGetErrorString(tddp_status_), static_cast<int>(tddp_status_), __FILE__, __LINE__)); \
    }                                                                                                                  \
  } while (false)

// Library handles of one kind, per device. A call leases one (creating it the first time
// none is free) and gives it back afterwards; handles live until the process exits.
template <typename Handle>
class HandlePool {
 public:
  explicit HandlePool(std::function<Handle()> create) : create_(std::move(create)) {}

  class Lease {
   public:
    Lease(HandlePool* pool, int device, Handle handle) : pool_(pool), device_(device), handle_(handle) {}
    ~Lease() { pool_->give_back(device_, handle_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Handle get() const { return handle_; }

   private:
    HandlePool* pool_;
    int device_;
    Handle handle_;
  };

  // The caller has made `device` current.
  Lease lease(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Handle>& free = free_[device];
      if (!free.empty()) {
        const Handle handle = free.back();
        free.pop_back();
        return Lease(this, device, handle);
      }
    }
    return Lease(this, device, create_());
  }

 private:
  void give_back(int device, Handle handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[device].push_back(handle);
  }

  std::function<Handle()> create_;
  std::mutex mutex_;
  std::map<int, std::vector<Handle>> free_;
};

HandlePool<cudnnHandle_t>& dnn_handles();

namespace blas {
// cuBLAS's data and compute types for a product of `dtype` (libraries.cc; blas_lt.cc's
// cuBLASLt calls too): float32 uses TF32 only when allow_tf32(). Other dtypes than the four
// floating ones are refused with an error naming the dtype.
std::pair<cudaDataType, cublasComputeType_t> gemm_types(DType dtype);
}  // namespace blas

}  // namespace tinyddp::tensor::cuda
