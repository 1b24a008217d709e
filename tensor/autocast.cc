// Autocast's per-thread state and the casts ops ask for (autocast.h).
#include "tinyddp/tensor/autocast.h"

#include <unordered_map>
#include <utility>

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/grad_mode.h"

namespace tinyddp::tensor {

namespace {

struct DeviceState {
  bool enabled;
  DType dtype;
};

struct State {
  DeviceState cpu{false, kBFloat16}, cuda{false, kFloat16};
  int nesting = 0;  // scopes open, enabled or not
  bool cache_enabled = true;
  // float32 leaf -> its cast: the source is held so that its TensorImpl (the key) is not
  // freed and reused while the entry exists.
  std::unordered_map<const TensorImpl*, std::pair<Tensor, Tensor>> cache;
};

thread_local State state;

DeviceState& device_state(DeviceType device_type) { return device_type == DeviceType::kCPU ? state.cpu : state.cuda; }

void check_supported(DeviceType device_type, DType dtype) {
  if (device_type == DeviceType::kCPU) {
    TDDP_CHECK(dtype == kBFloat16,
               "autocast: on the CPU only bfloat16 is supported (as PyTorch's CPU autocast), got {}",
               dtype_name(dtype));
  } else {
    TDDP_CHECK(is_16bit_float(dtype), "autocast: on CUDA only bfloat16 and float16 are supported, got {}",
               dtype_name(dtype));
  }
}

// t as `dtype`, from the cache where PyTorch would cache it: a lower-precision cast of a
// float32 leaf that requires grad (a parameter), while the graph is being recorded.
Tensor cast(const Tensor& t, DType dtype, bool lower_precision) {
  const bool cacheable = lower_precision && state.cache_enabled && t.dtype() == kFloat32 && t.requires_grad() &&
                         !t.autograd_meta()->has_grad_fn() && GradMode::is_enabled();
  if (!cacheable) return t.to(dtype);
  auto it = state.cache.find(t.impl());
  if (it == state.cache.end() || it->second.second.dtype() != dtype) {
    it = state.cache.insert_or_assign(t.impl(), std::make_pair(t, t.to(dtype))).first;
  }
  return it->second.second;
}

}  // namespace

Autocast::Autocast(DeviceType device_type, DType dtype, bool enabled, bool cache_enabled) : device_type_(device_type) {
  if (enabled) check_supported(device_type, dtype);
  DeviceState& d = device_state(device_type);
  previous_enabled_ = d.enabled;
  previous_dtype_ = d.dtype;
  previous_cache_enabled_ = state.cache_enabled;
  d.enabled = enabled;
  if (enabled) d.dtype = dtype;
  state.cache_enabled = cache_enabled;
  ++state.nesting;
}

Autocast::~Autocast() {
  if (--state.nesting == 0) state.cache.clear();
  DeviceState& d = device_state(device_type_);
  d.enabled = previous_enabled_;
  d.dtype = previous_dtype_;
  state.cache_enabled = previous_cache_enabled_;
}

bool is_autocast_enabled(DeviceType device_type) { return device_state(device_type).enabled; }

DType get_autocast_dtype(DeviceType device_type) { return device_state(device_type).dtype; }

void clear_autocast_cache() { state.cache.clear(); }

namespace detail {

bool autocast_args(CastPolicy policy, std::initializer_list<Tensor*> args) {
  if (state.nesting == 0) return false;
  const Tensor* first = nullptr;
  for (const Tensor* t : args) {
    if (t->defined()) {
      first = t;
      break;
    }
  }
  if (first == nullptr) return false;
  const DeviceType device_type = first->device().type;
  const DeviceState& d = device_state(device_type);
  if (!d.enabled) return false;
  const bool lower = policy == CastPolicy::kLowerPrecision;
  const DType target = lower ? d.dtype : kFloat32;
  bool changed = false;
  for (Tensor* t : args) {
    if (!t->defined() || !t->is_floating_point() || t->dtype() == kFloat64 || t->dtype() == target ||
        t->device().type != device_type) {
      continue;
    }
    *t = cast(*t, target, lower);
    changed = true;
  }
  return changed;
}

}  // namespace detail
}  // namespace tinyddp::tensor
