// examples/train --deterministic's step (train_exact.h).
#include "examples/train_exact.h"

#include <sstream>
#include <vector>

#include "examples/run_env.h"
#include "tinyddp/base/error.h"
#include "tinyddp/comm/init.h"
#include "tinyddp/comm/store.h"
#include "tinyddp/tensor/factory.h"

namespace tinyddp::examples {

namespace {
constexpr const char* kGridsKey = "deterministic.state";
}  // namespace

ChunkShare chunk_share(int64_t rows, int64_t chunk_size, int rank, int world) {
  TDDP_CHECK(rows % chunk_size == 0,
             "--deterministic: --chunk_size {} does not divide the global batch of {} rows: choose a chunk size that "
             "divides it",
             chunk_size, rows);
  ChunkShare share;
  share.chunk_size = chunk_size;
  share.total = rows / chunk_size;
  TDDP_CHECK(share.total % world == 0,
             "--deterministic: the {} chunks of {} rows do not split over {} {}: every rank takes the same number of "
             "chunks (choose a world size that divides {}, or another --chunk_size)",
             share.total, chunk_size, world_size_variable(), world, share.total);
  share.count = share.total / world;
  share.first = rank * share.count;
  return share;
}

std::shared_ptr<comm::ProcessGroup> world_of_one(std::shared_ptr<comm::ProcessGroup> pg) {
  return pg ? pg : comm::new_process_group("gloo", std::make_shared<comm::HashStore>(), 0, 1);
}

std::shared_ptr<ddp::DistributedDataParallel> deterministic_ddp(std::shared_ptr<nn::Module> model,
                                                                std::shared_ptr<comm::ProcessGroup> pg,
                                                                int64_t chunk_size) {
  return std::make_shared<ddp::DistributedDataParallel>(std::move(model), world_of_one(std::move(pg)),
                                                        ddp::DDPOptions().deterministic(true).chunk_size(chunk_size));
}

tensor::Tensor exact_step(ddp::DistributedDataParallel& ddp, const Batch& batch,
                          const std::function<tensor::Tensor(const tensor::Tensor&, const tensor::Tensor&)>& chunk_loss,
                          ddp::BatchRows rows) {
  const comm::ProcessGroup& pg = ddp.process_group();
  const int64_t global = batch.inputs.size(0) * (rows == ddp::BatchRows::kRank ? pg.size() : 1);
  chunk_share(global, ddp.options().chunk_size(), pg.rank(), pg.size());  // the flags' errors first
  return tensor::full({}, ddp.deterministic_step(batch.inputs, batch.targets, chunk_loss, rows),
                      tensor::TensorOptions().dtype(tensor::kFloat64));
}

tensor::Tensor exact_step(
    nn::Module& sharded, const comm::ProcessGroup& pg, int64_t chunk_size, const Batch& global,
    const std::function<tensor::Tensor(const tensor::Tensor&, const tensor::Tensor&)>& chunk_loss) {
  chunk_share(global.inputs.size(0), chunk_size, pg.rank(), pg.size());  // the flags' errors first
  return tensor::full({}, ddp::deterministic_step(sharded, global.inputs, global.targets, chunk_loss),
                      tensor::TensorOptions().dtype(tensor::kFloat64));
}

void save_grids(nn::Module& sharded, nn::OrderedDict<tensor::Tensor>& extra) {
  extra.insert(kGridsKey, tensor::from_vector(ddp::deterministic_state(sharded)));
}

void load_grids(const nn::OrderedDict<tensor::Tensor>& extra, nn::Module& sharded) {
  const tensor::Tensor* state = extra.find(kGridsKey);
  if (state == nullptr) return;
  TDDP_CHECK(state->dtype() == tensor::kInt64 && state->dim() == 1,
             "the checkpoint's '{}' is {} {}, not a list of int64 (a corrupt checkpoint?)", kGridsKey,
             tensor::dtype_name(state->dtype()), tensor::format_shape(state->sizes()));
  ddp::load_deterministic_state(sharded, state->to_vector<int64_t>());
}

void save_grids(const ddp::DistributedDataParallel& ddp, std::map<std::string, std::string>& metadata) {
  std::ostringstream out;
  const std::vector<int64_t> grids = ddp.deterministic_state();
  for (size_t p = 0; p < grids.size(); ++p) out << (p > 0 ? "," : "") << grids[p];
  metadata[kGridsKey] = out.str();
}

void load_grids(const std::map<std::string, std::string>& metadata, ddp::DistributedDataParallel& ddp) {
  const auto it = metadata.find(kGridsKey);
  if (it == metadata.end()) return;
  std::vector<int64_t> grids;
  std::istringstream in(it->second);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      size_t used = 0;
      grids.push_back(std::stoll(item, &used));
      TDDP_CHECK(used == item.size(), "trailing characters");
    } catch (const std::exception&) {
      throw Error(fmt::format("the checkpoint's '{}' holds '{}', not a list of integers (a corrupt checkpoint?)",
                              kGridsKey, it->second));
    }
  }
  ddp.load_deterministic_state(grids);
}

}  // namespace tinyddp::examples
