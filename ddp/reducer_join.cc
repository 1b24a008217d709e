// The Reducer's side of Join (join.h, distributed_join.cc): the active ranks' count that
// divides this iteration's gradients, and match_backward_collectives, a joined rank's twin of
// one synchronised backward (each bucket's hook on zeros, in bucket order, and the
// used-parameter map), which may also write the others' averages to .grad.
#include "tinyddp/comm/flatten.h"
#include "tinyddp/ddp/reducer.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::ddp {

void Reducer::set_forward_pass_work_handle(std::shared_ptr<comm::Work> work, Tensor active_ranks,
                                           bool use_static_world_size) {
  forward_pass_work_ = std::move(work);
  forward_pass_active_ = std::move(active_ranks);
  use_static_world_size_ = use_static_world_size;
}

void Reducer::match_backward_collectives(bool write_gradients) {
  tensor::NoGradGuard no_grad;
  // The others' synchronised backward, counted as ours (static_graph's first iteration).
  ++num_bwd_calls_;
  const bool static_first = static_graph_first_iteration();
  Tensor used;  // the others' used-parameter map, when they send one
  const auto zero_map = [&] {
    used = tensor::zeros({static_cast<int64_t>(params_.size())},
                         tensor::TensorOptions(tensor::kInt64).device(control_device_));
    pg_->allreduce(used)->wait();
  };
  if (static_first) zero_map();  // delay_all_reduce sends the map before the buckets
  std::vector<GradBucket> zeros;
  zeros.reserve(buckets_.size());  // each hook gets a reference that stays valid
  std::vector<std::shared_ptr<Future>> futures;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    zeros.push_back(make_grad_bucket(b, tensor::zeros_like(buckets_[b].contents)));
    futures.push_back(comm_hook_(zeros.back()));
  }
  std::vector<Tensor> results;
  for (auto& f : futures) results.push_back(f->wait());
  if (dynamic_graph_find_unused()) zero_map();  // the others send it after their last bucket
  if (write_gradients) {
    // The averages into .grad, as finalize_backward would have written them; a parameter no
    // rank used keeps its .grad.
    const Tensor used_on_host = used.defined() ? used.to(tensor::kCPU) : Tensor();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      // The bucket's slots in the hook's result (the zeros buffer, or another tensor).
      const std::vector<Tensor> views = comm::flat_views(results[b], zeros[b].params);
      for (size_t k = 0; k < views.size(); ++k) {
        const size_t i = zeros[b].parameter_indices[k];
        const bool unused = used_on_host.defined() && used_on_host.data_ptr<int64_t>()[i] == 0;
        copy_bucket_to_grad(i, views[k], unused);
      }
    }
  }
  // Take part in the one-time rebuild the others' first iteration leads to (static_graph:
  // their second, the first one being delay_all_reduce's).
  if (should_rebuild_buckets() && !static_first && rebuilt_param_indices_.empty()) {
    for (size_t i = 0; i < params_.size(); ++i) rebuilt_param_indices_.push_back(i);
  }
}

}  // namespace tinyddp::ddp
