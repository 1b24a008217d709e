// Convolution through cuDNN (libraries.h, namespace dnn): forward, backward data and backward
// filter on contiguous NCHW tensors. Each call describes its tensors and the convolution to
// cuDNN, takes the algorithm for its shape from a cache (filled the first time a shape is seen,
// from cuDNN's heuristics: the best-ranked algorithm that supports the shape), and runs it with
// a workspace borrowed from the caching allocator on the device's compute stream.
#include <array>
#include <climits>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "tinyddp/tensor/backends/cuda/handles.h"
#include "tinyddp/tensor/backends/cuda/libraries.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/cuda_runtime/device_guard.h"
#include "tinyddp/tensor/cuda_runtime/runtime.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor::cuda::dnn {

namespace {

std::optional<cudnnDataType_t> dnn_type(DType dtype) {
  switch (dtype) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kFloat16: return CUDNN_DATA_HALF;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: return std::nullopt;
  }
}

// A cuDNN descriptor destroyed with its owner (also when the owner's constructor throws after
// creating it).
template <typename D, cudnnStatus_t (*kDestroy)(D)>
struct Owned {
  D d = nullptr;
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() {
    if (d != nullptr) kDestroy(d);
  }
};

struct TensorDesc : Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor> {
  TensorDesc(cudnnDataType_t type, const Tensor& t) {
    TDDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    TDDP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type, static_cast<int>(t.size(0)),
                                                static_cast<int>(t.size(1)), static_cast<int>(t.size(2)),
                                                static_cast<int>(t.size(3))));
  }
};

struct FilterDesc : Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor> {
  FilterDesc(cudnnDataType_t type, const Tensor& w) {
    TDDP_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    TDDP_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, type, CUDNN_TENSOR_NCHW, static_cast<int>(w.size(0)),
                                                static_cast<int>(w.size(1)), static_cast<int>(w.size(2)),
                                                static_cast<int>(w.size(3))));
  }
};

// The math cuDNN may use: TF32 tensor cores for float32 only when cudnn_allow_tf32(), tensor
// cores for the 16-bit types, plain FMA otherwise.
cudnnMathType_t math_type(cudnnDataType_t type) {
  if (type == CUDNN_DATA_FLOAT) return cudnn_allow_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  if (type == CUDNN_DATA_HALF || type == CUDNN_DATA_BFLOAT16) return CUDNN_TENSOR_OP_MATH;
  return CUDNN_DEFAULT_MATH;
}

struct ConvDesc : Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor> {
  ConvDesc(cudnnDataType_t type, const Window2d& w, int64_t groups) {
    TDDP_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    // float64 computes in float64; float32 and the 16-bit types accumulate in float32.
    const cudnnDataType_t compute = type == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    TDDP_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        d, static_cast<int>(w.ph), static_cast<int>(w.pw), static_cast<int>(w.sh), static_cast<int>(w.sw),
        static_cast<int>(w.dh), static_cast<int>(w.dw), CUDNN_CROSS_CORRELATION, compute));
    TDDP_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, static_cast<int>(groups)));
    TDDP_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math_type(type)));
  }
};

enum class Pass { kForward, kBackwardData, kBackwardFilter };

// One call's descriptors: x [N, C, H, W], weight [O, C/g, kh, kw], y (the output) [N, O, OH, OW].
struct Call {
  cudnnDataType_t type;
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  Call(cudnnDataType_t t, const Tensor& xt, const Tensor& wt, const Tensor& yt, const Window2d& win, int64_t groups)
      : type(t), x(t, xt), y(t, yt), w(t, wt), conv(t, win, groups) {}
};

// The algorithm chosen for one shape, with the math it runs in and its workspace.
struct Choice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

// pass, dtype, device, math; x's and w's sizes; stride, padding, dilation; groups.
using Key = std::array<int64_t, 19>;

Key make_key(Pass pass, cudnnDataType_t type, int device, const Tensor& x, const Tensor& w, const Window2d& win,
             int64_t groups) {
  return {static_cast<int64_t>(pass),
          static_cast<int64_t>(type),
          device,
          static_cast<int64_t>(math_type(type)),
          x.size(0),
          x.size(1),
          x.size(2),
          x.size(3),
          w.size(0),
          w.size(1),
          w.size(2),
          w.size(3),
          win.sh,
          win.sw,
          win.ph,
          win.pw,
          win.dh,
          win.dw,
          groups};
}

// cuDNN's ranking for one pass (`rank(count, &returned, perf)`): the first algorithm that ran
// the shape without error, in the math cuDNN ranked it with, except that float32 keeps to FMA
// when TF32 is off. nullopt when none applies.
template <typename Perf, typename Rank>
std::optional<Choice> best_ranked(cudnnDataType_t type, Rank&& rank) {
  constexpr int kRequested = 16;  // more than any pass has algorithms
  std::array<Perf, kRequested> perf{};
  int returned = 0;
  TDDP_CUDNN_CHECK(rank(kRequested, &returned, perf.data()));
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    Choice c;
    c.algo = static_cast<int>(perf[i].algo);
    c.math = type == CUDNN_DATA_FLOAT && !cudnn_allow_tf32() ? CUDNN_FMA_MATH : perf[i].mathType;
    return c;
  }
  return std::nullopt;
}

// The cached choice for this call's shape, chosen (and its workspace sized) on first use.
std::optional<Choice> choose(Pass pass, cudnnHandle_t handle, const Call& call, const Key& key) {
  static std::mutex mutex;
  static std::map<Key, std::optional<Choice>> cache;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::optional<Choice> choice;
  if (pass == Pass::kForward) {
    choice = best_ranked<cudnnConvolutionFwdAlgoPerf_t>(call.type, [&](int n, int* got, auto* perf) {
      return cudnnGetConvolutionForwardAlgorithm_v7(handle, call.x.d, call.w.d, call.conv.d, call.y.d, n, got, perf);
    });
  } else if (pass == Pass::kBackwardData) {
    choice = best_ranked<cudnnConvolutionBwdDataAlgoPerf_t>(call.type, [&](int n, int* got, auto* perf) {
      return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, call.w.d, call.y.d, call.conv.d, call.x.d, n, got,
                                                         perf);
    });
  } else {
    choice = best_ranked<cudnnConvolutionBwdFilterAlgoPerf_t>(call.type, [&](int n, int* got, auto* perf) {
      return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, call.x.d, call.y.d, call.conv.d, call.w.d, n, got,
                                                           perf);
    });
  }
  if (choice) {
    TDDP_CUDNN_CHECK(cudnnSetConvolutionMathType(call.conv.d, choice->math));
    if (pass == Pass::kForward) {
      TDDP_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle, call.x.d, call.w.d, call.conv.d, call.y.d,
                                                               static_cast<cudnnConvolutionFwdAlgo_t>(choice->algo),
                                                               &choice->workspace));
    } else if (pass == Pass::kBackwardData) {
      TDDP_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
          handle, call.w.d, call.y.d, call.conv.d, call.x.d, static_cast<cudnnConvolutionBwdDataAlgo_t>(choice->algo),
          &choice->workspace));
    } else {
      TDDP_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          handle, call.x.d, call.y.d, call.conv.d, call.w.d, static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice->algo),
          &choice->workspace));
    }
  }
  const std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, choice);
  return choice;
}

// Whether cuDNN's 4-D descriptors (int sizes and strides) can describe these tensors.
bool fits(const std::vector<const Tensor*>& tensors) {
  for (const Tensor* t : tensors) {
    if (t->dim() != 4 || !t->is_contiguous() || t->numel() > INT_MAX || t->numel() == 0) return false;
  }
  return true;
}

// Runs `pass` for x, w, y (one of them the output, written with beta = 0). false: cuDNN does
// not apply, nothing written.
bool run(Pass pass, const Tensor& x, const Tensor& w, const Tensor& y, const Window2d& win, int64_t groups) {
  const std::optional<cudnnDataType_t> type = dnn_type(x.dtype());
  if (!type || !fits({&x, &w, &y})) return false;
  const int device = x.device().index;
  DeviceGuard guard(device);
  const auto handle = dnn_handles().lease(device);
  TDDP_CUDNN_CHECK(cudnnSetStream(handle.get(), compute_stream(device)));
  const Call call(*type, x, w, y, win, groups);
  const std::optional<Choice> choice =
      choose(pass, handle.get(), call, make_key(pass, *type, device, x, w, win, groups));
  if (!choice) return false;
  TDDP_CUDNN_CHECK(cudnnSetConvolutionMathType(call.conv.d, choice->math));
  // The workspace: int64 elements from the caching allocator, in use on the compute stream only.
  const int64_t words = static_cast<int64_t>((choice->workspace + 7) / 8);
  const Tensor workspace = words > 0 ? empty({words}, TensorOptions(kInt64).device(x.device())) : Tensor();
  void* const ws = words > 0 ? workspace.raw_data_ptr() : nullptr;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool dbl = *type == CUDNN_DATA_DOUBLE;
  const void* one = dbl ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = dbl ? static_cast<const void*>(&zero_d) : &zero_f;
  switch (pass) {
    case Pass::kForward:
      TDDP_CUDNN_CHECK(cudnnConvolutionForward(handle.get(), one, call.x.d, x.raw_data_ptr(), call.w.d,
                                               w.raw_data_ptr(), call.conv.d,
                                               static_cast<cudnnConvolutionFwdAlgo_t>(choice->algo), ws,
                                               choice->workspace, zero, call.y.d, y.raw_data_ptr()));
      break;
    case Pass::kBackwardData:
      TDDP_CUDNN_CHECK(cudnnConvolutionBackwardData(handle.get(), one, call.w.d, w.raw_data_ptr(), call.y.d,
                                                    y.raw_data_ptr(), call.conv.d,
                                                    static_cast<cudnnConvolutionBwdDataAlgo_t>(choice->algo), ws,
                                                    choice->workspace, zero, call.x.d, x.raw_data_ptr()));
      break;
    case Pass::kBackwardFilter:
      TDDP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle.get(), one, call.x.d, x.raw_data_ptr(), call.y.d,
                                                      y.raw_data_ptr(), call.conv.d,
                                                      static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice->algo), ws,
                                                      choice->workspace, zero, call.w.d, w.raw_data_ptr()));
      break;
  }
  return true;
}

}  // namespace

bool conv_forward(const Tensor& out, const Tensor& x, const Tensor& weight, const Window2d& w, int64_t groups) {
  return run(Pass::kForward, x, weight, out, w, groups);
}

bool conv_backward_data(const Tensor& grad_x, const Tensor& grad_out, const Tensor& weight, const Window2d& w,
                        int64_t groups) {
  return run(Pass::kBackwardData, grad_x, weight, grad_out, w, groups);
}

bool conv_backward_filter(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& x, const Window2d& w,
                          int64_t groups) {
  return run(Pass::kBackwardFilter, x, grad_weight, grad_out, w, groups);
}

}  // namespace tinyddp::tensor::cuda::dnn
