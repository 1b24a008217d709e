// ProcessGroupGloo: rendezvous through our Store, one worker thread executing collectives in
// issue order, and each collective mapped onto Gloo's API. See process_group_gloo.h.
#include "tinyddp/comm/gloo/process_group_gloo.h"

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
#include <cctype>
#include <csignal>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tinyddp/comm/gloo/small_allreduce.h"
#include "tinyddp/comm/flatten.h"
#include "tinyddp/comm/gloo/element_types.h"
#include "tinyddp/comm/gloo/ring_allreduce.h"
#include "tinyddp/tensor/ops.h"

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
  flatten_into(on_host, flat);
  return flat;
}

// CPU tensors, and CUDA tensors staged through the host (any layout: staging makes them dense).
constexpr TensorRules kGlooTensors{/*cpu=*/true, /*cuda=*/true, /*contiguous_only=*/false, /*bool_data=*/false,
                                   "the Gloo backend takes CPU and CUDA tensors"};

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
    : ProcessGroup(rank, size, "gloo", "ProcessGroupGloo", kGlooTensors), store_(std::move(store)),
      options_(std::move(options)) {
  ignore_sigpipe_once();
  TDDP_CHECK(store_ != nullptr, "ProcessGroupGloo: the store is null");
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
      // Every peer's addresses as Gloo's errors print them, so that a failure can name the
      // rank. A pair's error names the peer by one of two addresses, depending on which side
      // connected and when: the address the peer's end had once connected (published here,
      // one per connection), or the one the peer offered in the rendezvous (its value under
      // the mesh's prefix: one address per pair, each Gloo's fixed-size encoding).
      const std::pair<const char*, gloo::Context*> meshes[] = {{"main", context_.get()}, {"small", small.get()}};
      for (const auto& [prefix, mesh] : meshes) {
        for (int peer = 0; peer < size; ++peer) {
          if (peer == rank) continue;
          const auto& own = dynamic_cast<const gloo::transport::tcp::Address&>(mesh->getPair(peer)->address());
          store_->set(fmt::format("tinyddp/gloo-address/{}/{}/{}", prefix, rank, peer), own.str());
        }
      }
      const size_t encoded_size = gloo::transport::tcp::Address().bytes().size();
      const auto add = [this](const std::string& address, int peer) {
        std::vector<int>& ranks = peer_ranks_[address];
        if (std::find(ranks.begin(), ranks.end(), peer) == ranks.end()) ranks.push_back(peer);
      };
      for (int peer = 0; peer < size; ++peer) {
        if (peer == rank) continue;
        for (const char* prefix : {"main", "small"}) {
          const std::vector<uint8_t> text = store_->get(fmt::format("tinyddp/gloo-address/{}/{}/{}", prefix, peer, rank));
          add(std::string(text.begin(), text.end()), peer);
        }
        for (const char* mesh_prefix : {"tinyddp/gloo", "tinyddp/gloo-small"}) {
          // A Gloo that keeps its rendezvous under other keys or in another encoding: skip.
          PrefixStore met(mesh_prefix, store_);
          const std::string key = std::to_string(peer);
          if (!met.check({key})) continue;
          const Bytes offered = met.get(key);
          if (offered.size() % encoded_size != 0) continue;
          for (size_t at = 0; at < offered.size(); at += encoded_size) {
            add(gloo::transport::tcp::Address(std::vector<char>(offered.begin() + at, offered.begin() + at + encoded_size)).str(), peer);
          }
        }
      }
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
  if (size > 1) agree_on_call_check();
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
      queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty() || !chained_.empty(); });
      std::deque<Item>& next = chained_.empty() ? queue_ : chained_;
      if (next.empty()) return;  // stopping, and everything queued has run
      item = std::move(next.front());
      next.pop_front();
    }
    running_marks = &item.marks;
    const uint32_t seq = tag++;
    try {
      if (check_calls_) check_call(item.call, seq);
      item.run(seq);
      item.work->finish();
    } catch (const CollectiveMismatchError& e) {
      item.work->finish(std::make_exception_ptr(
          CollectiveMismatchError(fmt::format("{} failed: {}", item.work->description(), e.what()))));
    } catch (const std::exception& e) {
      item.work->finish(failure(*item.work, e.what()));
    }
    running_marks = nullptr;
  }
}

void ProcessGroupGloo::agree_on_call_check() {
  check_calls_ = options_.check_calls.value_or(call_check_default());
  // Rows travel on the small mesh; a group too large for it (over a thousand ranks) goes unchecked.
  if (!detail::SmallAllreduce::takes(tensor::kInt64, static_cast<int64_t>(size_ * CallSignature::kWords))) check_calls_ = false;
  store_->set(fmt::format("tinyddp/check-calls/{}", rank_), std::string(check_calls_ ? "1" : "0"));
  std::vector<int> on, off;
  for (int r = 0; r < size_; ++r) {
    (store_->get_string(fmt::format("tinyddp/check-calls/{}", r)) == "1" ? on : off).push_back(r);
  }
  TDDP_CHECK(on.empty() || off.empty(),
             "ProcessGroupGloo: ranks disagree on the desync check: on for ranks [{}], off for ranks [{}]; every rank "
             "must set ProcessGroupOptions::check_calls (or TINYDDP_DESYNC_CHECK) alike",
             fmt::join(on, ", "), fmt::join(off, ", "));
  if (check_calls_) call_rows_ = tensor::zeros({static_cast<int64_t>(size_ * CallSignature::kWords)}, tensor::kInt64);
}

void ProcessGroupGloo::check_call(const CallSignature& call, uint64_t seq) {
  constexpr size_t kWords = CallSignature::kWords;
  call_rows_.zero_();
  const CallSignature::Row mine = call.encode(seq);
  std::copy(mine.begin(), mine.end(), call_rows_.data_ptr<int64_t>() + static_cast<size_t>(rank_) * kWords);
  small_allreduce_->run({call_rows_}, ReduceOp::kSum, call_rows_.numel());
  std::vector<CallSignature::Row> rows(static_cast<size_t>(size_));
  for (size_t r = 0; r < rows.size(); ++r) {
    std::copy_n(call_rows_.data_ptr<int64_t>() + r * kWords, kWords, rows[r].begin());
  }
  if (auto mismatch = find_mismatch(rows, "ProcessGroupGloo")) throw CollectiveMismatchError(*mismatch);
}

std::exception_ptr ProcessGroupGloo::failure(const Work& work, const std::string& what) const {
  std::string message = what;
  for (const auto& [address, peers] : peer_ranks_) {
    const std::string label = fmt::format(" (rank {})", fmt::join(peers, " or "));  // "(rank 2)", "(rank 1 or 2)"
    for (size_t at = message.find(address); at != std::string::npos; at = message.find(address, at + 1)) {
      const size_t end = at + address.size();
      // "[ip]:port" followed by a digit is another port; and do not name a rank twice.
      if (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) continue;
      if (message.compare(end, label.size(), label) == 0) continue;
      message.insert(end, label);
    }
  }
  if (message == what && is_timeout(what) && size() > 1) {
    // Gloo's own algorithms time out without saying on whom ("Timed out waiting 1000ms for
    // recv operation"): name the peers this collective waits for, all the others.
    std::vector<int> others;
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) others.push_back(r);
    }
    message += others.size() == 1
                   ? fmt::format(" (waited for rank {}, which did not take part in time)", others.front())
                   : fmt::format(" (waited for ranks {}: one or more did not take part in time)", fmt::join(others, ", "));
  }
  const std::string full = fmt::format("{} failed: {}", work.description(), message);
  return is_timeout(what) ? std::make_exception_ptr(TimeoutError(full)) : std::make_exception_ptr(Error(full));
}

std::shared_ptr<Work> ProcessGroupGloo::enqueue(std::string description, const CallSignature& call,
                                                std::function<void(uint32_t)> run, const std::vector<Tensor>& tensors) {
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
    const bool chained = std::this_thread::get_id() == worker_.get_id();
    // (A chain still running when shutdown began may go on: the worker drains it.)
    TDDP_CHECK(!stopping_ || chained, "ProcessGroupGloo: {} issued while the group is shutting down", work->description());
    (chained ? chained_ : queue_).push_back(Item{work, call, std::move(run), std::move(marks)});
  }
  queue_cv_.notify_one();
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::start_p2p(std::string description, std::function<void()> run) {
  auto work = std::make_shared<Work>(std::move(description));
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  p2p_threads_.emplace_back([this, work, run = std::move(run)] {
    NoGradGuard no_grad;
    try {
      run();
      work->finish();
    } catch (const std::exception& e) {
      work->finish(failure(*work, e.what()));
    }
  });
  return work;
}

std::shared_ptr<Work> ProcessGroupGloo::allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, std::string what) {
  int64_t total = 0;
  for (const Tensor& t : tensors) total += t.numel();
  const CallSignature call{Collective::kAllreduce, tensors[0].dtype(), total, -1, op};
  // CPU tensors only: a CUDA tensor pays its staging copies anyway.
  if (small_allreduce_ && tensors[0].is_cpu() && detail::SmallAllreduce::takes(tensors[0].dtype(), total) && total > 0) {
    return enqueue(std::move(what), call, [this, tensors, op, total](uint32_t) { small_allreduce_->run(tensors, op, total); });
  }
  return enqueue(std::move(what), call, [this, tensors, op, total](uint32_t) {
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
      unflatten_into(staged.buffer, tensors);
    }
  }, tensors);
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast_impl(const Tensor& tensor, int root, std::string what) {
  return enqueue(std::move(what), {Collective::kBroadcast, tensor.dtype(), tensor.numel(), root, std::nullopt},
                 [this, tensor, root](uint32_t tag) {
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

std::shared_ptr<Work> ProcessGroupGloo::allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                                                       std::string what) {
  return enqueue(std::move(what), {Collective::kAllgather, input.dtype(), input.numel(), -1, std::nullopt},
                 [this, outputs, input](uint32_t tag) {
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
    unflatten_into(flat, outputs);
  }, {input});
}

std::shared_ptr<Work> ProcessGroupGloo::gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, int root,
                                                    std::string what) {
  return enqueue(std::move(what), {Collective::kGather, input.dtype(), input.numel(), root, std::nullopt},
                 [this, outputs, input, root](uint32_t tag) {
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
    if (rank_ == root) unflatten_into(flat, outputs);
  }, {input});
}

std::shared_ptr<Work> ProcessGroupGloo::scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, int root,
                                                     std::string what) {
  return enqueue(std::move(what), {Collective::kScatter, output.dtype(), output.numel(), root, std::nullopt},
                 [this, output, inputs, root](uint32_t tag) {
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

std::shared_ptr<Work> ProcessGroupGloo::reduce_impl(const Tensor& tensor, int root, ReduceOp op, std::string what) {
  return enqueue(std::move(what), {Collective::kReduce, tensor.dtype(), tensor.numel(), root, op},
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

std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                                                            ReduceOp op, std::string what) {
  // Gloo has no reduce_scatter with this interface: allreduce every input, keep ours.
  return enqueue(std::move(what), {Collective::kReduceScatter, output.dtype(), output.numel(), -1, op},
                 [this, output, inputs, op](uint32_t tag) {
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

std::shared_ptr<Work> ProcessGroupGloo::barrier_impl(std::string what) {
  return enqueue(std::move(what), {Collective::kBarrier, tensor::kInt64, 0, -1, std::nullopt}, [this](uint32_t tag) {
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

std::shared_ptr<Work> ProcessGroupGloo::send_impl(const Tensor& tensor, int dst, int tag, std::string what) {
  // A copy now: the caller may reuse its tensor at once (from a GPU, after its kernels ran).
  const Tensor data = tensor.is_cpu() ? tensor.contiguous().clone() : tensor.to(tensor::kCPU);
  return start_p2p(std::move(what), [this, data, dst, tag] {
    auto buffer = context_->createUnboundBuffer(data.raw_data_ptr(), data.nbytes());
    buffer->send(dst, kP2PSlotBase + static_cast<uint64_t>(tag));
    buffer->waitSend(options_.timeout);
  });
}

std::shared_ptr<Work> ProcessGroupGloo::recv_impl(const Tensor& tensor, int src, int tag, std::string what) {
  return start_p2p(std::move(what), [this, tensor, src, tag] {
    const Staged staged(tensor);
    auto buffer = context_->createUnboundBuffer(staged.buffer.raw_data_ptr(), staged.buffer.nbytes());
    buffer->recv(src, kP2PSlotBase + static_cast<uint64_t>(tag));
    buffer->waitRecv(options_.timeout);
    staged.write_back();
  });
}

std::shared_ptr<ProcessGroup> ProcessGroupGloo::create_subgroup(int id, int rank, int size) {
  return std::make_shared<ProcessGroupGloo>(std::make_shared<PrefixStore>(fmt::format("tinyddp/group{}", id), store_), rank,
                                            size, options_);
}

}  // namespace tinyddp::comm
