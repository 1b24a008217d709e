// A small residual CNN trained with DDP and resumed from a checkpoint, written as a PyTorch
// user writes it, line by line from the PyTorch script in
// tests/examples/fixtures/make_resnet_bce_fixture.py: BasicBlocks with `out += identity` and
// ReLU(inplace=true), options structs (Conv2dOptions(c, c, 3).padding(1).bias(false)), a
// ModuleList of blocks, torchvision's initialisation (kaiming_normal_ fan_out over modules()),
// binary_cross_entropy_with_logits, AdamW under OneCycleLR(epochs, steps_per_epoch), a
// DistributedSampler and DataLoader over a TensorDataset, and at the end of every epoch a
// checkpoint written by rank 0 (model, optimizer, scheduler, epoch) from which --resume
// continues as if never stopped. tests/examples/resnet_bce_test.cc holds a run to PyTorch's
// DDP run of the script step by step, and a stopped-and-resumed run to an uninterrupted one.
//   bazel run -c opt //examples:resnet_bce                  (forks 2 ranks)
//   launch --nproc_per_node 2 -- bazel-bin/examples/resnet_bce --epochs 3 --checkpoint ck.safetensors
#include <CLI/CLI.hpp>

#include "examples/example_util.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"

namespace F = tinyddp::nn::functional;
namespace t = tinyddp::tensor;
using namespace tinyddp;
using tensor::Tensor;

namespace {

struct Config {
  int64_t epochs = 3, samples = 64, batch_size = 8;
  int64_t stop_epoch = -1;  // stop (as if preempted) after this many epochs; -1: train all
  double lr = 0.01, weight_decay = 0.01;
  uint64_t seed = 7;
  int nproc = 2;
  std::string checkpoint, resume, metrics, save;
};

struct BasicBlock : nn::Module {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // none when the shapes agree
  BasicBlock(int64_t cin, int64_t cout, int64_t stride) : Module("BasicBlock") {
    conv1 = register_module(
        "conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(cin, cout, 3).stride(stride).padding(1).bias(false)));
    bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(cout));
    relu = register_module("relu", std::make_shared<nn::ReLU>(/*inplace=*/true));
    conv2 =
        register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(cout, cout, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(cout));
    if (stride != 1 || cin != cout) {
      downsample = register_module(
          "downsample", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                            std::make_shared<nn::Conv2d>(nn::Conv2dOptions(cin, cout, 1).stride(stride).bias(false)),
                            std::make_shared<nn::BatchNorm2d>(cout)}));
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor identity = x;
    Tensor out = relu->forward(bn1->forward(conv1->forward(x)));
    out = bn2->forward(conv2->forward(out));
    if (downsample) identity = downsample->forward(x);
    out += identity;
    return relu->forward(out);
  }
};

struct ResNet : nn::Module {
  std::shared_ptr<nn::Sequential> stem;
  std::shared_ptr<nn::ModuleList> blocks;
  std::shared_ptr<nn::AdaptiveAvgPool2d> pool;
  std::shared_ptr<nn::Linear> fc;
  ResNet() : Module("ResNet") {
    stem = register_module("stem", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                                       std::make_shared<nn::Conv2d>(nn::Conv2dOptions(3, 8, 3).padding(1).bias(false)),
                                       std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(true)}));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    blocks->append(std::make_shared<BasicBlock>(8, 8, 1));
    blocks->append(std::make_shared<BasicBlock>(8, 16, 2));
    pool = register_module("pool", std::make_shared<nn::AdaptiveAvgPool2d>(1));
    fc = register_module("fc", std::make_shared<nn::Linear>(16, 1));
    for (const auto& m : modules(/*include_self=*/false)) {  // self is not yet held by a shared_ptr
      if (auto* conv = dynamic_cast<nn::Conv2d*>(m.get())) {
        nn::init::kaiming_normal_(conv->weight, 0.0, "fan_out", "relu");
      } else if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m.get())) {
        nn::init::constant_(bn->weight, 1);
        nn::init::constant_(bn->bias, 0);
      }
    }
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = stem->forward(input);
    for (const auto& block : *blocks) x = block->forward(x);
    return fc->forward(pool->forward(x).flatten(1)).squeeze(1);
  }
};

// Random 3x8x8 images; the label says whether channel 0 is brighter than channel 2.
std::shared_ptr<nn::TensorDataset> make_dataset(const Config& c) {
  t::Generator g(c.seed);
  const Tensor images = t::randn({c.samples, 3, 8, 8}, {}, &g);
  const Tensor labels = (images.select(1, 0).mean({1, 2}) > images.select(1, 2).mean({1, 2})).to(t::kFloat);
  return std::make_shared<nn::TensorDataset>(std::vector<Tensor>{images, labels});
}

int train(int rank, const Config& c) {
  auto pg = comm::init_from_env();
  auto dataset = make_dataset(c);
  auto sampler =
      std::make_shared<nn::DistributedSampler>(*dataset, std::nullopt, std::nullopt, /*shuffle=*/true, c.seed);
  nn::DataLoader loader(dataset, nn::DataLoaderOptions(c.batch_size).sampler(sampler));
  t::manual_seed(c.seed);
  auto model = std::make_shared<ResNet>();
  nn::AdamW optimizer(model->parameters(), nn::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  nn::OneCycleLR scheduler(optimizer, c.lr, c.epochs, loader.size());
  int64_t start_epoch = 0;
  if (!c.resume.empty()) {  // every rank loads the same file: model, optimizer, scheduler
    const nn::TrainingCheckpoint checkpoint = nn::load_checkpoint(c.resume, *model, optimizer);
    scheduler.load_state_dict(checkpoint.extra);
    start_epoch = checkpoint.step + 1;
  }
  ddp::DistributedDataParallel ddp_model(model, pg);
  std::FILE* metrics = rank == 0 && !c.metrics.empty() ? std::fopen(c.metrics.c_str(), "w") : nullptr;
  if (metrics) std::fprintf(metrics, "step,loss,lr\n");
  const int64_t stop_epoch = c.stop_epoch < 0 ? c.epochs : std::min(c.stop_epoch, c.epochs);
  for (int64_t epoch = start_epoch; epoch < stop_epoch; ++epoch) {
    sampler->set_epoch(epoch);
    int64_t step = epoch * loader.size();
    double last_loss = 0;
    for (const nn::Example& batch : loader) {
      const Tensor &x = batch[0], &y = batch[1];
      const double lr = optimizer.lr();
      optimizer.zero_grad();
      const Tensor loss = F::binary_cross_entropy_with_logits(ddp_model(x), y);
      loss.backward();
      optimizer.step();
      scheduler.step();
      const Tensor mean = loss.detach().clone();  // the loss averaged over the ranks, for the log
      comm::all_reduce(mean);
      const double value = mean.item<double>() / pg->size();
      last_loss = value;
      if (metrics) std::fprintf(metrics, "%lld,%.9g,%.9g\n", static_cast<long long>(step++), value, lr);
    }
    if (rank == 0) fmt::print("epoch {}: last loss {:.4f}\n", epoch, last_loss);
    if (rank == 0 && !c.checkpoint.empty()) {
      nn::save_checkpoint(c.checkpoint, *model, optimizer, epoch, scheduler.state_dict());
    }
  }
  if (metrics) std::fclose(metrics);
  if (rank == 0 && !c.save.empty()) nn::save_safetensors(c.save, model->state_dict());
  std::fflush(stdout);
  pg->barrier()->wait();
  comm::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Train a small residual CNN with DDP, checkpointing every epoch (2 ranks unless launched)."};
  app.add_option("--epochs", c.epochs)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--stop_epoch", c.stop_epoch, "stop after this many epochs, as if preempted (-1: none)")
      ->capture_default_str();
  app.add_option("--samples", c.samples, "images in the dataset")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch_size", c.batch_size, "images per rank and step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", c.lr, "OneCycleLR's max_lr")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--weight_decay", c.weight_decay)->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--seed", c.seed)->capture_default_str();
  app.add_option("--nproc", c.nproc, "ranks to fork when not under the launcher")->capture_default_str();
  app.add_option("--checkpoint", c.checkpoint, "write a training checkpoint here at the end of every epoch");
  app.add_option("--resume", c.resume, "continue from this checkpoint");
  app.add_option("--metrics", c.metrics, "write step,loss,lr (the loss averaged over ranks) as CSV");
  app.add_option("--save", c.save, "write the final state dict (safetensors)");
  CLI11_PARSE(app, argc, argv);
  return examples::run_ranks("resnet_bce", c.nproc, [&](int rank) { return train(rank, c); });
}
