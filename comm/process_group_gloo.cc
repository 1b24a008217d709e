// ProcessGroupGloo: rendezvous through our Store, one worker thread executing collectives in
// issue order, and each collective mapped onto Gloo's API. See process_group_gloo.h.
#include "comm/process_group_gloo.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <csignal>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/gloo_small_allreduce.h"
#include "comm/gloo_types.h"
#include "comm/ring_allreduce.h"
#include "tensor/ops.h"

namespace tinyddp::comm {

using tensor::DType;
using tensor::NoGradGuard;
using detail::with_element_type;

namespace {

// Gloo's rendezvous reaches our stores through this adapter.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<comm::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const Bytes value = store_->get(key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<comm::Store> store_;
};

// c = a op b elementwise, for Gloo's reduction callback (compiled here, with optimisation).
template <typename T>
gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  return detail::with_reduce_op(op, [](auto tag) -> gloo::AllreduceOptions::Func {
    constexpr ReduceOp kOp = decltype(tag)::value;
    return [](void* c, const void* a, const void* b, size_t n) {
      T* out = static_cast<T*>(c);
      const T* x = static_cast<const T*>(a);
      const T* y = static_cast<const T*>(b);
      for (size_t i = 0; i < n; ++i) out[i] = detail::combine<kOp>(x[i], y[i]);
    };
  });
}

// The marks of the collective the worker runs now (see enqueue), for host_dense.
thread_local const std::vector<tensor::cuda::StreamMark>* running_marks = nullptr;

// `t`'s elements in a contiguous CPU tensor: t itself when it is one, else a copy. A CUDA
// tensor is copied on a side stream once its device's work queued before the collective has
// run (the mark enqueue recorded), never waiting for the caller's later kernels; without a
// mark (point-to-point), after everything queued on its device so far.
Tensor host_dense(const Tensor& t) {
  if (t.is_cpu()) return t.contiguous();
  if (running_marks != nullptr) {
    for (const tensor::cuda::StreamMark& mark : *running_marks) {
      if (mark.device() == t.device().index) return tensor::cuda::to_host_after(t, mark);
    }
  }
  return t.to(tensor::kCPU);
}

// A contiguous CPU buffer for `t`: t itself when contiguous, else a copy written back later
// (to a GPU: queued on its compute stream, so later kernels there see the result).
struct Staged {
  Tensor original;
  Tensor buffer;
  explicit Staged(const Tensor& t) : original(t), buffer(host_dense(t)) {}
  void write_back() const {
    // To a GPU: queued on its compute stream without waiting (the pinned buffer is kept until
    // the copy ran), so later kernels there see the result.
    if (!buffer.is_same(original)) original.copy_(buffer, /*non_blocking=*/true);
    original.storage().bump_version();
  }
};

std::vector<Tensor> concat(std::vector<Tensor> list, const Tensor& last) {
  list.push_back(last);
  return list;
}

// The tensors of `list` copied end to end into one new flat host buffer.
Tensor flatten_all(const std::vector<Tensor>& list) {
  int64_t total = 0;
  for (const Tensor& t : list) total += t.numel();
  Tensor flat = tensor::empty({total}, list.front().dtype());
  std::vector<Tensor> on_host;
  for (const Tensor& t : list) on_host.push_back(t.is_cpu() ? t : host_dense(t));
  detail::flatten_into(on_host, flat);
  return flat;
}

void check_tensor(const Tensor& t, const char* op, const char* what) {
  TDDP_CHECK(t.defined(), "ProcessGroupGloo {}: {} is an undefined tensor", op, what);
  TDDP_CHECK(t.is_cpu() || t.is_cuda(), "ProcessGroupGloo {}: {} is on {}; the Gloo backend takes CPU and CUDA tensors",
             op, what, t.device().str());
}

void check_like(const Tensor& t, const Tensor& reference, const char* op, const std::string& what) {
  check_tensor(t, op, what.c_str());
  TDDP_CHECK(t.dtype() == reference.dtype() && t.sizes() == reference.sizes(),
             "ProcessGroupGloo {}: {} is {} {} but must be {} {}", op, what, tensor::dtype_name(t.dtype()),
             tensor::format_shape(t.sizes()), tensor::dtype_name(reference.dtype()),
             tensor::format_shape(reference.sizes()));
}

bool is_timeout(const std::string& message) {
  return message.find("imed out") != std::string::npos || message.find("imeout") != std::string::npos;
}

}  // namespace

namespace {
// A write to a connection whose peer died raises SIGPIPE, whose default action kills the
// process; Gloo reports the failure as an error instead once SIGPIPE is ignored (as every
// Python program, PyTorch's included, has it). A handler the program installed is kept.
void ignore_sigpipe_once() {
  static const bool done = [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)done;
}
}  // namespace

ProcessGroupGloo::ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size), store_(std::move(store)), options_(std::move(options)) {
  ignore_sigpipe_once();
  TDDP_CHECK(store_ != nullptr, "ProcessGroupGloo: the store is null");
  TDDP_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroupGloo: rank {} is not in [0, {}) for a group of size {}",
             rank, size, size);
  // Announce this rank first, so that a failed rendezvous can say who never arrived.
  store_->set(fmt::format("tinyddp/joined/{}", rank), std::string("1"));
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options_.bind_address;
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options_.timeout);
    GlooStore rendezvous(std::make_shared<PrefixStore>("tinyddp/gloo", store_));
    context->connectFullMesh(rendezvous, device_);
    context_ = context;
    if (size > 1) {
      // A second mesh for small allreduces, with synchronous connections: see gloo_small_allreduce.h.
      auto small = std::make_shared<gloo::rendezvous::Context>(rank, size);
      small->setTimeout(options_.timeout);
      GlooStore small_rendezvous(std::make_shared<PrefixStore>("tinyddp/gloo-small", store_));
      small->connectFullMesh(small_rendezvous, device_);
      for (int peer = 0; peer < size; ++peer) {
        if (peer != rank) small->getPair(peer)->setSync(/*sync=*/true, /*busyPoll=*/false);
      }
      small_allreduce_ = std::make_unique<detail::SmallAllreduce>(small);
      // Larger allreduces: a ring of plain TCP connections (see ring_allreduce.h), listening
      // on the address this rank's Gloo connections use.
      const auto& pair_address = dynamic_cast<const gloo::transport::tcp::Address&>(context_->getPair((rank + 1) % size)->address());
      ring_allreduce_ = std::make_unique<detail::RingAllreduce>(*store_, "tinyddp/ring", rank, size, pair_address.getSockaddr(),
                                                                options_.timeout);
    }
  } catch (const std::exception& e) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      try {
        if (!store_->check({fmt::format("tinyddp/joined/{}", r)})) missing.push_back(r);
      } catch (const std::exception&) {
      }
    }
    const std::string who = missing.empty() ? "every rank joined the store" : fmt::format("ranks [{}] never joined", fmt::join(missing, ", "));
    const std::string message = fmt::format("ProcessGroupGloo: rank {} of {} could not connect to the group within {} ms: {} ({})",
                                            rank, size, options_.timeout.count(), who, e.what());
    if (!missing.empty() || is_timeout(e.what())) throw TimeoutError(message);
    throw Error(message);
  }
  // The worker stages CUDA tensors: it works on its creator's device from its start
  // (tensor/cuda/device_guard.h), never binding GPU 0 by default.
  worker_ = std::thread([this, device = tensor::cuda::current_device()] {
    tensor::cuda::adopt_device(device);
    worker_loop();
  });
}

ProcessGroupGloo::~ProcessGroupGloo() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  for (std::thread& t : p2p_threads_) t.join();
}

void ProcessGroupGloo::worker_loop() {
  NoGradGuard no_grad;  // collectives write into tensors (parameters too) without recording
  uint32_t tag = 0;
  while (true) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    running_marks = &item.marks;
    try {
      item.run(tag++);
      item.work->finish();
    } catch (const std::exception& e) {
      const std::string message = fmt::format("{} failed: {}", item.work->description(), e.what());
      item.work->finish(is_timeout(e.what()) ? std::make_exception_ptr(TimeoutError(message))
                                              : std::make_exception_ptr(Error(message)));
    }
    running_marks = nullptr;
  }
}

std::shared_ptr<Work> ProcessGroupGloo::enqueue(std::string description, std::function<void(uint32_t)> run,
                                                const std::vector<Tensor>& tensors) {
  auto work = std::make_shared<Work>(std::move(description));
  std::vector<tensor::cuda::StreamMark> marks;
  for (const Tensor& t : tensors) {
    if (!t.defined() || !t.is_cuda()) continue;
    const int device = t.device().index;
    const bool marked = std::any_of(marks.begin(), marks.end(), [&](const auto& m) { return m.device() == device; });
    if (!marked) marks.push_back(tensor::cuda::StreamMark::record(device));
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    TDDP_CHECK(!stopping_, "ProcessGroupGloo: {} issued while the group is shutting down", work->description());
    queue_.push_back(Item{work, std::move(run), std::move(marks)});
  }
  queue_cv_.notify_one();
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::start_p2p(std::string description, std::function<void()> run) {
  auto work = std::make_shared<Work>(std::move(description));
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  p2p_threads_.emplace_back([work, run = std::move(run)] {
    NoGradGuard no_grad;
    try {
      run();
      work->finish();
    } catch (const std::exception& e) {
      const std::string message = fmt::format("{} failed: {}", work->description(), e.what());
      work->finish(is_timeout(e.what()) ? std::make_exception_ptr(TimeoutError(message))
                                        : std::make_exception_ptr(Error(message)));
    }
  });
  return work;
}

std::string ProcessGroupGloo::describe(const char* op, const Tensor& t, const std::string& extra) const {
  return fmt::format("{} (rank {} of {}, {} x {}{}{})", op, rank_, size_, t.numel(), tensor::dtype_name(t.dtype()),
                     extra.empty() ? "" : ", ", extra);
}

std::shared_ptr<Work> ProcessGroupGloo::allreduce(const std::vector<Tensor>& tensors, ReduceOp op) {
  TDDP_CHECK(!tensors.empty(), "ProcessGroupGloo allreduce: no tensors given");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], "allreduce", fmt::format("tensor {}", i).c_str());
    TDDP_CHECK(tensors[i].dtype() == tensors[0].dtype(), "ProcessGroupGloo allreduce: tensors of different dtypes ({} and {})",
               tensor::dtype_name(tensors[0].dtype()), tensor::dtype_name(tensors[i].dtype()));
  }
  TDDP_CHECK(op != ReduceOp::kAvg || tensors[0].is_floating_point(),
             "ProcessGroupGloo allreduce: avg needs floating-point tensors, got {}", tensor::dtype_name(tensors[0].dtype()));
  with_element_type(tensors[0].dtype(), "allreduce", [](auto) {});
  int64_t total = 0;
  for (const Tensor& t : tensors) total += t.numel();
  const std::string what = fmt::format("allreduce (rank {} of {}, {} tensor(s), {} x {}, {})", rank_, size_, tensors.size(),
                                       total, tensor::dtype_name(tensors[0].dtype()), reduce_op_name(op));
  // CPU tensors only: a CUDA tensor pays its staging copies anyway.
  if (small_allreduce_ && tensors[0].is_cpu() && detail::SmallAllreduce::takes(tensors[0].dtype(), total) && total > 0) {
    return enqueue(what, [this, tensors, op, total](uint32_t) { small_allreduce_->run(tensors, op, total); });
  }
  return enqueue(what, [this, tensors, op, total](uint32_t) {
    const bool single = tensors.size() == 1;
    const Staged staged(single ? tensors[0] : flatten_all(tensors));
    if (total > 0 && ring_allreduce_) {  // a group of one holds the result already
      with_element_type(tensors[0].dtype(), "allreduce", [&](auto tag_type) {
        using T = decltype(tag_type);
        ring_allreduce_->run(staged.buffer.raw_data_ptr(), static_cast<size_t>(total), sizeof(T), reduce_function<T>(op),
                             options_.timeout);
      });
      if (op == ReduceOp::kAvg) staged.buffer.div_(static_cast<double>(size_));
    }
    if (single) {
      staged.write_back();
    } else {
      detail::unflatten_into(staged.buffer, tensors);
    }
  }, tensors);
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast(const Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast", "tensor");
  TDDP_CHECK(root >= 0 && root < size_, "ProcessGroupGloo broadcast: root {} is not a rank of this group of {}", root, size_);
  with_element_type(tensor.dtype(), "broadcast", [](auto) {});
  return enqueue(describe("broadcast", tensor, fmt::format("root {}", root)), [this, tensor, root](uint32_t tag) {
    const Staged staged(tensor);
    if (tensor.numel() > 0) {
      with_element_type(tensor.dtype(), "broadcast", [&](auto tag_type) {
        using T = decltype(tag_type);
        gloo::BroadcastOptions opts(context_);
        opts.setOutput<T>(static_cast<T*>(staged.buffer.raw_data_ptr()), static_cast<size_t>(tensor.numel()));
        opts.setRoot(root);
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        gloo::broadcast(opts);
      });
    }
    staged.write_back();
  }, {tensor});
}

std::shared_ptr<Work> ProcessGroupGloo::allgather(const std::vector<Tensor>& outputs, const Tensor& input) {
  check_tensor(input, "allgather", "input");
  TDDP_CHECK(static_cast<int>(outputs.size()) == size_, "ProcessGroupGloo allgather: {} outputs given for a group of {}",
             outputs.size(), size_);
  for (size_t r = 0; r < outputs.size(); ++r) check_like(outputs[r], input, "allgather", fmt::format("output {}", r));
  with_element_type(input.dtype(), "allgather", [](auto) {});
  return enqueue(describe("allgather", input), [this, outputs, input](uint32_t tag) {
    const Tensor in = host_dense(input);
    const Tensor flat = tensor::empty({input.numel() * size_}, input.dtype());
    if (input.numel() > 0) {
      with_element_type(input.dtype(), "allgather", [&](auto tag_type) {
        using T = decltype(tag_type);
        gloo::AllgatherOptions opts(context_);
        opts.setInput<T>(static_cast<T*>(in.raw_data_ptr()), static_cast<size_t>(input.numel()));
        opts.setOutput<T>(static_cast<T*>(flat.raw_data_ptr()), static_cast<size_t>(flat.numel()));
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        gloo::allgather(opts);
      });
    }
    detail::unflatten_into(flat, outputs);
  }, {input});
}

std::shared_ptr<Work> ProcessGroupGloo::gather(const std::vector<Tensor>& outputs, const Tensor& input, int root) {
  check_tensor(input, "gather", "input");
  TDDP_CHECK(root >= 0 && root < size_, "ProcessGroupGloo gather: root {} is not a rank of this group of {}", root, size_);
  if (rank_ == root) {
    TDDP_CHECK(static_cast<int>(outputs.size()) == size_, "ProcessGroupGloo gather: the root needs {} outputs, got {}",
               size_, outputs.size());
    for (size_t r = 0; r < outputs.size(); ++r) check_like(outputs[r], input, "gather", fmt::format("output {}", r));
  } else {
    TDDP_CHECK(outputs.empty(), "ProcessGroupGloo gather: only the root (rank {}) passes outputs", root);
  }
  with_element_type(input.dtype(), "gather", [](auto) {});
  return enqueue(describe("gather", input, fmt::format("root {}", root)), [this, outputs, input, root](uint32_t tag) {
    const Tensor in = host_dense(input);
    const Tensor flat = rank_ == root ? tensor::empty({input.numel() * size_}, input.dtype()) : Tensor();
    if (input.numel() > 0) {
      with_element_type(input.dtype(), "gather", [&](auto tag_type) {
        using T = decltype(tag_type);
        gloo::GatherOptions opts(context_);
        opts.setInput<T>(static_cast<T*>(in.raw_data_ptr()), static_cast<size_t>(input.numel()));
        if (rank_ == root) opts.setOutput<T>(static_cast<T*>(flat.raw_data_ptr()), static_cast<size_t>(flat.numel()));
        opts.setRoot(root);
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        gloo::gather(opts);
      });
    }
    if (rank_ == root) detail::unflatten_into(flat, outputs);
  }, {input});
}

std::shared_ptr<Work> ProcessGroupGloo::scatter(const Tensor& output, const std::vector<Tensor>& inputs, int root) {
  check_tensor(output, "scatter", "output");
  TDDP_CHECK(root >= 0 && root < size_, "ProcessGroupGloo scatter: root {} is not a rank of this group of {}", root, size_);
  if (rank_ == root) {
    TDDP_CHECK(static_cast<int>(inputs.size()) == size_, "ProcessGroupGloo scatter: the root needs {} inputs, got {}",
               size_, inputs.size());
    for (size_t r = 0; r < inputs.size(); ++r) check_like(inputs[r], output, "scatter", fmt::format("input {}", r));
  } else {
    TDDP_CHECK(inputs.empty(), "ProcessGroupGloo scatter: only the root (rank {}) passes inputs", root);
  }
  with_element_type(output.dtype(), "scatter", [](auto) {});
  return enqueue(describe("scatter", output, fmt::format("root {}", root)), [this, output, inputs, root](uint32_t tag) {
    const Staged staged(output);
    std::vector<Tensor> dense;
    for (const Tensor& t : inputs) dense.push_back(host_dense(t));
    if (output.numel() > 0) {
      with_element_type(output.dtype(), "scatter", [&](auto tag_type) {
        using T = decltype(tag_type);
        gloo::ScatterOptions opts(context_);
        if (rank_ == root) {
          std::vector<T*> pointers;
          for (const Tensor& t : dense) pointers.push_back(static_cast<T*>(t.raw_data_ptr()));
          opts.setInputs<T>(pointers, static_cast<size_t>(output.numel()));
        }
        opts.setOutput<T>(static_cast<T*>(staged.buffer.raw_data_ptr()), static_cast<size_t>(output.numel()));
        opts.setRoot(root);
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        gloo::scatter(opts);
      });
    }
    staged.write_back();
  }, concat(inputs, output));
}

std::shared_ptr<Work> ProcessGroupGloo::reduce(const Tensor& tensor, int root, ReduceOp op) {
  check_tensor(tensor, "reduce", "tensor");
  TDDP_CHECK(root >= 0 && root < size_, "ProcessGroupGloo reduce: root {} is not a rank of this group of {}", root, size_);
  TDDP_CHECK(op != ReduceOp::kAvg || tensor.is_floating_point(),
             "ProcessGroupGloo reduce: avg needs floating-point tensors, got {}", tensor::dtype_name(tensor.dtype()));
  with_element_type(tensor.dtype(), "reduce", [](auto) {});
  return enqueue(describe("reduce", tensor, fmt::format("root {}, {}", root, reduce_op_name(op))),
                 [this, tensor, root, op](uint32_t tag) {
                   const Staged staged(tensor);
                   // Gloo's reduce leaves partial sums in non-root buffers: reduce a copy there.
                   const Tensor buffer = rank_ == root ? staged.buffer : staged.buffer.clone();
                   if (tensor.numel() > 0) {
                     with_element_type(tensor.dtype(), "reduce", [&](auto tag_type) {
                       using T = decltype(tag_type);
                       gloo::ReduceOptions opts(context_);
                       opts.setOutput<T>(static_cast<T*>(buffer.raw_data_ptr()), static_cast<size_t>(tensor.numel()));
                       opts.setReduceFunction(reduce_function<T>(op));
                       opts.setRoot(root);
                       opts.setTag(tag);
                       opts.setTimeout(options_.timeout);
                       gloo::reduce(opts);
                     });
                   }
                   if (rank_ == root) {
                     if (op == ReduceOp::kAvg) staged.buffer.div_(static_cast<double>(size_));
                     staged.write_back();
                   }
                 }, {tensor});
}

std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                       ReduceOp op) {
  check_tensor(output, "reduce_scatter", "output");
  TDDP_CHECK(static_cast<int>(inputs.size()) == size_, "ProcessGroupGloo reduce_scatter: {} inputs given for a group of {}",
             inputs.size(), size_);
  for (size_t r = 0; r < inputs.size(); ++r) check_like(inputs[r], output, "reduce_scatter", fmt::format("input {}", r));
  TDDP_CHECK(op != ReduceOp::kAvg || output.is_floating_point(),
             "ProcessGroupGloo reduce_scatter: avg needs floating-point tensors, got {}", tensor::dtype_name(output.dtype()));
  with_element_type(output.dtype(), "reduce_scatter", [](auto) {});
  // Gloo has no reduce_scatter with this interface: allreduce every input, keep ours.
  return enqueue(describe("reduce_scatter", output, reduce_op_name(op)), [this, output, inputs, op](uint32_t tag) {
    const Tensor flat = flatten_all(inputs);
    if (flat.numel() > 0) {
      with_element_type(output.dtype(), "reduce_scatter", [&](auto tag_type) {
        using T = decltype(tag_type);
        gloo::AllreduceOptions opts(context_);
        opts.setOutput<T>(static_cast<T*>(flat.raw_data_ptr()), static_cast<size_t>(flat.numel()));
        opts.setReduceFunction(reduce_function<T>(op));
        opts.setTag(tag);
        opts.setTimeout(options_.timeout);
        gloo::allreduce(opts);
      });
    }
    Tensor mine = flat.narrow(0, output.numel() * rank_, output.numel()).view(output.sizes());
    if (op == ReduceOp::kAvg) mine = tensor::div(mine, static_cast<double>(size_));
    output.copy_(mine);
  }, inputs);
}

std::shared_ptr<Work> ProcessGroupGloo::barrier() {
  return enqueue(fmt::format("barrier (rank {} of {})", rank_, size_), [this](uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout);
    gloo::barrier(opts);
  });
}

namespace {
// Point-to-point slots live far from the collectives' tags.
constexpr uint64_t kP2PSlotBase = uint64_t{1} << 40;
}  // namespace

std::shared_ptr<Work> ProcessGroupGloo::send(const Tensor& tensor, int dst, int tag) {
  check_tensor(tensor, "send", "tensor");
  TDDP_CHECK(dst >= 0 && dst < size_ && dst != rank_, "ProcessGroupGloo send: destination {} is not another rank of this group of {}",
             dst, size_);
  TDDP_CHECK(tag >= 0, "ProcessGroupGloo send: tag must be >= 0, got {}", tag);
  // A copy now: the caller may reuse its tensor at once (from a GPU, after its kernels ran).
  const Tensor data = tensor.is_cpu() ? tensor.contiguous().clone() : tensor.to(tensor::kCPU);
  return start_p2p(describe("send", tensor, fmt::format("to {}, tag {}", dst, tag)), [this, data, dst, tag] {
    auto buffer = context_->createUnboundBuffer(data.raw_data_ptr(), data.nbytes());
    buffer->send(dst, kP2PSlotBase + static_cast<uint64_t>(tag));
    buffer->waitSend(options_.timeout);
  });
}

std::shared_ptr<Work> ProcessGroupGloo::recv(const Tensor& tensor, int src, int tag) {
  check_tensor(tensor, "recv", "tensor");
  TDDP_CHECK(src >= 0 && src < size_ && src != rank_, "ProcessGroupGloo recv: source {} is not another rank of this group of {}",
             src, size_);
  TDDP_CHECK(tag >= 0, "ProcessGroupGloo recv: tag must be >= 0, got {}", tag);
  return start_p2p(describe("recv", tensor, fmt::format("from {}, tag {}", src, tag)), [this, tensor, src, tag] {
    const Staged staged(tensor);
    auto buffer = context_->createUnboundBuffer(staged.buffer.raw_data_ptr(), staged.buffer.nbytes());
    buffer->recv(src, kP2PSlotBase + static_cast<uint64_t>(tag));
    buffer->waitRecv(options_.timeout);
    staged.write_back();
  });
}

std::shared_ptr<ProcessGroup> ProcessGroupGloo::new_group(const std::vector<int>& ranks) {
  TDDP_CHECK(!ranks.empty(), "new_group: the rank list is empty");
  for (size_t i = 0; i < ranks.size(); ++i) {
    TDDP_CHECK(ranks[i] >= 0 && ranks[i] < size_, "new_group: rank {} is not in this group of {}", ranks[i], size_);
    TDDP_CHECK(i == 0 || ranks[i] > ranks[i - 1], "new_group: ranks must be sorted and unique, got [{}]", fmt::join(ranks, ", "));
  }
  const int id = groups_created_++;  // the same on every rank: new_group is called in the same order
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  auto store = std::make_shared<PrefixStore>(fmt::format("tinyddp/group{}", id), store_);
  return std::make_shared<ProcessGroupGloo>(store, static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()),
                                            options_);
}

}  // namespace tinyddp::comm
