// ProcessGroupGloo's collectives, each mapped onto Gloo's API (or tinyddp's own allreduce
// paths) and queued for the worker (process_group_gloo.cc); tensors are staged through host
// buffers (staging.h).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>

#include "tinyddp/comm/flatten.h"
#include "tinyddp/comm/gloo/process_group_gloo.h"
#include "tinyddp/comm/gloo/small_allreduce.h"
#include "tinyddp/comm/gloo/staging.h"
#include "tinyddp/comm/transport/tcp_ring.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::comm {

using detail::flatten_all;
using detail::host_dense;
using detail::reduce_function;
using detail::Staged;
using detail::with_element_type;

namespace {
std::vector<Tensor> concat(std::vector<Tensor> list, const Tensor& last) {
  list.push_back(last);
  return list;
}
}  // namespace

std::shared_ptr<Work> ProcessGroupGloo::allreduce_impl(const std::vector<Tensor>& tensors, ReduceOp op, Call call) {
  const int64_t total = call.signature->numel;
  // CPU tensors only: a CUDA tensor pays its staging copies anyway. Two ranks exchange their
  // values in one message each way (pair_allreduce, up to kPairMaxBytes); more use the small
  // mesh (up to 64 KiB).
  const bool small =
      size_ == 2 ? takes_pair(tensors[0].dtype(), total) : detail::SmallAllreduce::takes(tensors[0].dtype(), total);
  if (size_ > 1 && tensors[0].is_cpu() && small && total > 0) {
    if (size_ == 2) {
      std::shared_ptr<CallHook> hook = call.hook;
      return enqueue(
          std::move(call),
          [this, tensors, op, total, hook](uint32_t) { pair_allreduce(tensors, op, total, hook.get()); }, {},
          /*carries_hook=*/true);
    }
    return enqueue(std::move(call),
                   [this, tensors, op, total](uint32_t) { small_allreduce_->run(tensors, op, total); });
  }
  return enqueue(
      std::move(call),
      [this, tensors, op, total](uint32_t) {
        const bool single = tensors.size() == 1;
        const Staged staged(single ? tensors[0] : flatten_all(tensors));
        if (total > 0 && tcp_ring_) {  // a group of one holds the result already
          with_element_type(tensors[0].dtype(), "allreduce", [&](auto tag_type) {
            using T = decltype(tag_type);
            tcp_ring_->allreduce(staged.buffer.raw_data_ptr(), static_cast<size_t>(total), sizeof(T),
                                 reduce_function<T>(op), options_.timeout());
          });
          if (op == ReduceOp::kAvg) staged.buffer.div_(static_cast<double>(size_));
        }
        if (single) {
          staged.write_back();
        } else {
          unflatten_into(staged.buffer, tensors);
        }
      },
      tensors);
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast_impl(const Tensor& tensor, int root, Call call) {
  return enqueue(std::move(call),
                 [this, tensor, root](uint32_t tag) {
                   const Staged staged(tensor);
                   if (tensor.numel() > 0) {
                     with_element_type(tensor.dtype(), "broadcast", [&](auto tag_type) {
                       using T = decltype(tag_type);
                       gloo::BroadcastOptions opts(context_);
                       opts.setOutput<T>(static_cast<T*>(staged.buffer.raw_data_ptr()),
                                         static_cast<size_t>(tensor.numel()));
                       opts.setRoot(root);
                       opts.setTag(tag);
                       opts.setTimeout(options_.timeout());
                       gloo::broadcast(opts);
                     });
                   }
                   staged.write_back();
                 },
                 {tensor});
}

std::shared_ptr<Work> ProcessGroupGloo::allgather_impl(const std::vector<Tensor>& outputs, const Tensor& input,
                                                       Call call) {
  return enqueue(std::move(call),
                 [this, outputs, input](uint32_t tag) {
                   const Tensor in = host_dense(input);
                   // Outputs that lie end to end (one tensor's rows) are filled in place.
                   const Tensor in_place = tcp_ring_ ? end_to_end_view(outputs) : Tensor();
                   const Tensor flat =
                       in_place.defined() ? in_place : tensor::empty({input.numel() * size_}, input.dtype());
                   if (input.numel() > 0 && tcp_ring_) {
                     // The ring's allgather half: this rank's block in place, the others
                     // passed around the ring (the thread that asked moves the bytes, not
                     // Gloo's event loop: tcp_ring.h says why).
                     const Tensor mine = flat.narrow(0, input.numel() * rank_, input.numel());
                     if (!same_elements(mine, in)) mine.copy_(in.reshape({-1}));  // (in place: it is there)
                     tcp_ring_->allgather(flat.raw_data_ptr(), static_cast<size_t>(input.numel()), in.element_size(),
                                          options_.timeout());
                   } else if (input.numel() > 0) {
                     with_element_type(input.dtype(), "allgather", [&](auto tag_type) {
                       using T = decltype(tag_type);
                       gloo::AllgatherOptions opts(context_);
                       opts.setInput<T>(static_cast<T*>(in.raw_data_ptr()), static_cast<size_t>(input.numel()));
                       opts.setOutput<T>(static_cast<T*>(flat.raw_data_ptr()), static_cast<size_t>(flat.numel()));
                       opts.setTag(tag);
                       opts.setTimeout(options_.timeout());
                       gloo::allgather(opts);
                     });
                   }
                   if (!in_place.defined()) unflatten_into(flat, outputs);
                 },
                 {input});
}

std::shared_ptr<Work> ProcessGroupGloo::gather_impl(const std::vector<Tensor>& outputs, const Tensor& input, int root,
                                                    Call call) {
  return enqueue(std::move(call),
                 [this, outputs, input, root](uint32_t tag) {
                   const Tensor in = host_dense(input);
                   const Tensor flat = rank_ == root ? tensor::empty({input.numel() * size_}, input.dtype()) : Tensor();
                   if (input.numel() > 0) {
                     with_element_type(input.dtype(), "gather", [&](auto tag_type) {
                       using T = decltype(tag_type);
                       gloo::GatherOptions opts(context_);
                       opts.setInput<T>(static_cast<T*>(in.raw_data_ptr()), static_cast<size_t>(input.numel()));
                       if (rank_ == root)
                         opts.setOutput<T>(static_cast<T*>(flat.raw_data_ptr()), static_cast<size_t>(flat.numel()));
                       opts.setRoot(root);
                       opts.setTag(tag);
                       opts.setTimeout(options_.timeout());
                       gloo::gather(opts);
                     });
                   }
                   if (rank_ == root) unflatten_into(flat, outputs);
                 },
                 {input});
}

std::shared_ptr<Work> ProcessGroupGloo::scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs, int root,
                                                     Call call) {
  return enqueue(
      std::move(call),
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
            opts.setTimeout(options_.timeout());
            gloo::scatter(opts);
          });
        }
        staged.write_back();
      },
      concat(inputs, output));
}

std::shared_ptr<Work> ProcessGroupGloo::reduce_impl(const Tensor& tensor, int root, ReduceOp op, Call call) {
  return enqueue(std::move(call),
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
                       opts.setTimeout(options_.timeout());
                       gloo::reduce(opts);
                     });
                   }
                   if (rank_ == root) {
                     if (op == ReduceOp::kAvg) staged.buffer.div_(static_cast<double>(size_));
                     staged.write_back();
                   }
                 },
                 {tensor});
}

std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter_impl(const Tensor& output, const std::vector<Tensor>& inputs,
                                                            ReduceOp op, Call call) {
  // The ring's reduce-scatter half: each rank sends (W - 1) / W of the inputs, half an
  // allreduce's traffic. (Gloo has no reduce_scatter with this interface; a group of one has
  // no ring, and allreduces its single input.) In place (process_group.h), the ring runs on
  // the inputs' own buffer: neither the copy of the inputs nor the one into output.
  return enqueue(
      std::move(call),
      [this, output, inputs, op](uint32_t tag) {
        const Tensor whole = tcp_ring_ && same_elements(output, inputs[rank_]) ? end_to_end_view(inputs) : Tensor();
        const Tensor flat = whole.defined() ? whole : flatten_all(inputs);
        if (flat.numel() > 0 && tcp_ring_) {
          with_element_type(output.dtype(), "reduce_scatter", [&](auto tag_type) {
            using T = decltype(tag_type);
            tcp_ring_->reduce_scatter(flat.raw_data_ptr(), static_cast<size_t>(output.numel()), sizeof(T),
                                      reduce_function<T>(op), options_.timeout());
          });
        } else if (flat.numel() > 0) {
          with_element_type(output.dtype(), "reduce_scatter", [&](auto tag_type) {
            using T = decltype(tag_type);
            gloo::AllreduceOptions opts(context_);
            opts.setOutput<T>(static_cast<T*>(flat.raw_data_ptr()), static_cast<size_t>(flat.numel()));
            opts.setReduceFunction(reduce_function<T>(op));
            opts.setTag(tag);
            opts.setTimeout(options_.timeout());
            gloo::allreduce(opts);
          });
        }
        Tensor mine = flat.narrow(0, output.numel() * rank_, output.numel()).view(output.sizes());
        if (op == ReduceOp::kAvg) mine = tensor::div(mine, static_cast<double>(size_));
        if (!whole.defined() || op == ReduceOp::kAvg) output.copy_(mine);
      },
      inputs);
}

std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter_widened_impl(const Tensor& sums, const Tensor& values,
                                                                    const Widen& widen, Call call) {
  if (!tcp_ring_) return nullptr;
  return enqueue(std::move(call),
                 [this, sums, values, widen](uint32_t) {
                   const int64_t block = sums.numel() / size_;
                   tcp_ring_->reduce_scatter_widened(values.raw_data_ptr(), values.element_size(),
                                                     sums.narrow(0, block * rank_, block).raw_data_ptr(),
                                                     sums.element_size(), static_cast<size_t>(block), widen,
                                                     options_.timeout());
                 },
                 {sums, values});
}

std::shared_ptr<Work> ProcessGroupGloo::barrier_impl(Call call) {
  return enqueue(std::move(call), [this](uint32_t tag) {
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(options_.timeout());
    gloo::barrier(opts);
  });
}

namespace {
// Point-to-point slots live far from the collectives' tags.
constexpr uint64_t kP2PSlotBase = uint64_t{1} << 40;
}  // namespace

std::shared_ptr<Work> ProcessGroupGloo::send_impl(const Tensor& tensor, int dst, int tag, Call call) {
  // A copy now: the caller may reuse its tensor at once (from a GPU, after its kernels ran).
  const Tensor data = tensor.is_cpu() ? tensor.contiguous().clone() : tensor.to(tensor::kCPU);
  return start_p2p(std::move(call.what), [this, data, dst, tag] {
    auto buffer = context_->createUnboundBuffer(data.raw_data_ptr(), data.nbytes());
    buffer->send(dst, kP2PSlotBase + static_cast<uint64_t>(tag));
    buffer->waitSend(options_.timeout());
  });
}

std::shared_ptr<Work> ProcessGroupGloo::recv_impl(const Tensor& tensor, int src, int tag, Call call) {
  return start_p2p(std::move(call.what), [this, tensor, src, tag] {
    const Staged staged(tensor);
    auto buffer = context_->createUnboundBuffer(staged.buffer.raw_data_ptr(), staged.buffer.nbytes());
    buffer->recv(src, kP2PSlotBase + static_cast<uint64_t>(tag));
    buffer->waitRecv(options_.timeout());
    staged.write_back();
  });
}

}  // namespace tinyddp::comm
