// The training loop of //examples:train: see train_lib.h.
#include "examples/train_lib.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "comm/init.h"
#include "ddp/distributed.h"
#include "nn/nn.h"
#include "tensor/cuda.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;
using t::Tensor;

namespace {

// One batch: inputs [batch, in] and targets ([batch, out] float32 for mse, [batch] int64 for ce).
struct Batch {
  Tensor inputs, targets;
};

// Batches from a file, or generated on the fly from a seed.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual Batch batch(int64_t step) = 0;
};

class FileDataset : public Dataset {
 public:
  FileDataset(const std::string& path, int64_t steps, int64_t in, int64_t out, bool classification) {
    const nn::SafetensorsFile file = nn::load_safetensors(path);
    TDDP_CHECK(file.tensors.contains("inputs") && file.tensors.contains("targets"),
               "--data {}: expected tensors named 'inputs' and 'targets'", path);
    inputs_ = file.tensors.at("inputs");
    targets_ = file.tensors.at("targets");
    TDDP_CHECK(inputs_.dtype() == t::kFloat32 && inputs_.dim() == 3 && inputs_.size(2) == in,
               "--data {}: 'inputs' must be float32 [steps, batch, {}], got {} {}", path, in,
               t::dtype_name(inputs_.dtype()), t::format_shape(inputs_.sizes()));
    TDDP_CHECK(inputs_.size(0) >= steps, "--data {}: --steps {} but the file holds {} batches", path, steps, inputs_.size(0));
    const t::Shape want = classification ? t::Shape{inputs_.size(0), inputs_.size(1)}
                                         : t::Shape{inputs_.size(0), inputs_.size(1), out};
    const t::DType want_dtype = classification ? t::kInt64 : t::kFloat32;
    TDDP_CHECK(targets_.dtype() == want_dtype && targets_.sizes() == want,
               "--data {}: 'targets' must be {} {} for this loss, got {} {}", path, t::dtype_name(want_dtype),
               t::format_shape(want), t::dtype_name(targets_.dtype()), t::format_shape(targets_.sizes()));
  }
  Batch batch(int64_t step) override { return {inputs_[step], targets_[step]}; }

 private:
  Tensor inputs_, targets_;
};

// Regression: targets = inputs @ teacher^T + noise, for a fixed random teacher.
// Classification: class centres in input space; inputs = centre[label] + noise.
class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(uint64_t seed, int64_t batch, int64_t in, int64_t out, bool classification)
      : generator_(seed + 1), batch_(batch), out_(out), classification_(classification) {
    t::NoGradGuard no_grad;
    // Centres about 4 noise standard deviations apart: learnable, but not trivially.
    const double scale = (classification ? 3.0 : 1.0) / std::sqrt(static_cast<double>(in));
    reference_ = t::mul(t::randn({out, in}, {}, &generator_), scale);  // teacher or centres
  }
  Batch batch(int64_t /*step*/) override { return draw(batch_, generator_); }
  // Fresh samples from the same distribution, from a generator of their own: for evaluation.
  Batch held_out(int64_t rows) { return draw(rows, held_out_generator_); }

 private:
  Batch draw(int64_t rows, t::Generator& generator) {
    t::NoGradGuard no_grad;
    const int64_t in = reference_.size(1);
    const Tensor noise = t::randn({rows, in}, {}, &generator);
    if (!classification_) {
      const Tensor x = noise;
      const Tensor y = t::add(t::matmul(x, reference_.t()), t::mul(t::randn({rows, out_}, {}, &generator), 0.1));
      return {x, y};
    }
    // labels = floor(U(0, classes)); one_hot @ centres picks each sample's centre.
    const Tensor labels = t::rand({rows}, t::kFloat64, &generator).mul_(static_cast<double>(out_)).to(t::kInt64);
    const Tensor one_hot = t::eq(labels.unsqueeze(1), t::arange(out_).unsqueeze(0)).to(t::kFloat32);
    return {t::add(t::matmul(one_hot, reference_), noise), labels};
  }

  t::Generator generator_;
  t::Generator held_out_generator_{0x5eed};
  int64_t batch_, out_;
  bool classification_;
  Tensor reference_;
};

}  // namespace

namespace {
constexpr int64_t kHeldOutRows = 1024;
// An integer from the environment (`fallback` when unset).
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? std::atoi(text) : fallback;
}
int env_world_size() { return env_int("WORLD_SIZE", 1); }
}  // namespace

TrainResult train(const TrainConfig& config, std::ostream& log) {
  TDDP_CHECK(config.model == "toy" || config.model == "mlp", "--model must be toy or mlp, got '{}'", config.model);
  const std::string loss_name = config.loss.empty() ? (config.model == "toy" ? "mse" : "ce") : config.loss;
  TDDP_CHECK(loss_name == "mse" || loss_name == "ce", "--loss must be mse or ce, got '{}'", loss_name);
  TDDP_CHECK(config.optimizer == "sgd" || config.optimizer == "adam", "--optimizer must be sgd or adam, got '{}'",
             config.optimizer);
  TDDP_CHECK(config.steps >= 1, "--steps must be at least 1, got {}", config.steps);
  TDDP_CHECK(config.lr > 0, "--lr must be positive, got {}", config.lr);
  const bool classification = loss_name == "ce";
  TDDP_CHECK(config.device == "auto" || config.device == "cpu" || config.device == "cuda",
             "--device must be auto, cpu or cuda, got '{}'", config.device);
  TDDP_CHECK(config.backend == "auto" || config.backend == "gloo" || config.backend == "nccl",
             "--backend must be auto, gloo or nccl, got '{}'", config.backend);
  TDDP_CHECK(config.device != "cuda" || t::cuda::is_available(), "--device cuda: {}", t::cuda::unavailable_reason());
  const bool on_gpu = config.device == "cuda" || (config.device == "auto" && t::cuda::is_available());
  // One GPU per rank: LOCAL_RANK picks it. More local ranks than GPUs share them round-robin,
  // which only the gloo backend allows (NCCL refuses two ranks on one device).
  const int gpus = on_gpu ? t::cuda::device_count() : 0;
  const int local_rank = env_int("LOCAL_RANK", 0), local_world = env_int("LOCAL_WORLD_SIZE", 1);
  const t::Device device = on_gpu ? t::Device(t::DeviceType::kCUDA, local_rank % gpus) : t::Device(t::kCPU);
  const std::string backend =
      config.backend != "auto" ? config.backend : (on_gpu && local_world <= gpus ? "nccl" : "gloo");
  TDDP_CHECK(backend != "nccl" || on_gpu, "--backend nccl needs --device cuda (NCCL reduces GPU tensors only)");
  TDDP_CHECK(backend != "nccl" || local_world <= gpus,
             "--backend nccl: {} ranks on this node but {} GPU(s); NCCL needs one GPU per rank (use --backend gloo to "
             "share GPUs)",
             local_world, gpus);

  // This process's GPU, chosen before anything touches CUDA (as torch.cuda.set_device): no
  // thread of it ever makes a context on another GPU (tensor/cuda/device_guard.h).
  if (on_gpu) t::cuda::set_device(device.index);
  // Distributed when launched with WORLD_SIZE > 1.
  std::shared_ptr<comm::ProcessGroup> pg;
  if (env_world_size() > 1) pg = comm::init_process_group(backend);
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  std::ostringstream quiet;  // only rank 0 prints progress
  std::ostream& progress = rank == 0 ? log : quiet;

  // The model: created right after manual_seed(seed), so its initial weights equal
  // PyTorch's for the same seed; --init replaces them.
  t::manual_seed(config.seed);
  std::shared_ptr<nn::Module> model;
  int64_t in = 10, out = 5;
  if (config.model == "toy") {
    model = std::make_shared<nn::ToyModel>();
  } else {
    TDDP_CHECK(config.widths.size() >= 2, "--widths needs at least two numbers, got {}", config.widths.size());
    model = nn::mlp(config.widths);
    in = config.widths.front();
    out = config.widths.back();
  }
  TDDP_CHECK(!classification || out >= 2, "--loss ce needs at least 2 output classes, the model has {}", out);
  if (!config.init.empty()) nn::load_state_dict(*model, config.init);
  model->to(device);  // after initialising on the CPU: the same weights on every device
  std::shared_ptr<nn::Module> runner = model;  // what the loop calls: the model, or DDP around it
  if (pg) runner = std::make_shared<ddp::DistributedDataParallel>(model, pg);

  const int64_t batch_size = config.batch > 0 ? config.batch : (config.model == "toy" ? 20 : 64);
  TDDP_CHECK(config.data.empty() ? batch_size % world == 0 : true,
             "--batch {} is not divisible by WORLD_SIZE {}: every rank takes an equal share of each batch", batch_size,
             world);
  std::unique_ptr<Dataset> data;
  SyntheticDataset* synthetic = nullptr;
  if (config.data.empty()) {
    auto made = std::make_unique<SyntheticDataset>(config.seed, batch_size, in, out, classification);
    synthetic = made.get();
    data = std::move(made);
  } else {
    data = std::make_unique<FileDataset>(config.data, config.steps, in, out, classification);
  }

  std::unique_ptr<nn::Optimizer> optimizer;
  if (config.optimizer == "sgd") {
    optimizer = std::make_unique<nn::SGD>(model->parameters(), nn::SGDOptions(config.lr).momentum(config.momentum));
  } else {
    optimizer = std::make_unique<nn::Adam>(model->parameters(), nn::AdamOptions(config.lr));
  }

  std::ofstream metrics;
  if (!config.metrics.empty() && rank == 0) {
    metrics.open(config.metrics);
    TDDP_CHECK(metrics.good(), "--metrics: cannot write {}", config.metrics);
    metrics << "step,loss\n";
  }

  progress << "training " << config.model << " (" << model->parameters().size() << " parameter tensors) with "
      << config.optimizer << " lr " << config.lr << ", " << loss_name << " loss, " << config.steps << " steps, "
      << (config.data.empty() ? "synthetic data" : "data from " + config.data)
      << (pg ? fmt::format(", data-parallel on {} ranks ({})", world, backend) : std::string()) << ", device " << device.str()
      << "\n";
  const int64_t log_every = config.log_every > 0 ? config.log_every : std::max<int64_t>(1, config.steps / 10);
  // Where the loss is averaged over ranks (DDP's choice: the GPU under NCCL, else the CPU).
  const t::Device report_device = pg ? ddp::control_device(*pg, model->parameters()) : device;
  TrainResult result;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < config.steps; ++step) {
    const Batch global = data->batch(step);
    const int64_t rows = global.inputs.size(0);
    TDDP_CHECK(rows % world == 0, "a batch of {} rows is not divisible by WORLD_SIZE {}", rows, world);
    // This rank's share: rows [rank * rows / world, (rank + 1) * rows / world).
    const Batch b{global.inputs.narrow(0, rank * rows / world, rows / world).to(device),
                  global.targets.narrow(0, rank * rows / world, rows / world).to(device)};
    optimizer->zero_grad();
    const Tensor prediction = runner->forward(b.inputs);
    const Tensor loss = classification ? nn::cross_entropy(prediction, b.targets) : nn::mse_loss(prediction, b.targets);
    double loss_value = loss.item<double>();
    if (pg) {  // report the mean over ranks: the loss of the whole global batch
      const Tensor mean = t::scalar_tensor(loss_value, t::TensorOptions(t::kFloat64).device(report_device));
      pg->allreduce(mean, comm::ReduceOp::kAvg)->wait();
      loss_value = mean.item<double>();
    }
    TDDP_CHECK(std::isfinite(loss_value), "the loss became {} at step {}; lower --lr", loss_value, step);
    result.losses.push_back(loss_value);
    if (classification && step + 1 == config.steps) {
      const Tensor accuracy = t::mean(t::eq(t::argmax(prediction, 1), b.targets).to(t::kFloat64));
      if (pg) pg->allreduce(accuracy, comm::ReduceOp::kAvg)->wait();
      result.accuracy = accuracy.item<double>();
    }
    loss.backward();
    optimizer->step();
    result.samples += rows;
    if (metrics.is_open()) metrics << step << "," << fmt::format("{:.9g}", loss_value) << "\n";
    if ((step + 1) % log_every == 0 || step + 1 == config.steps) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress << fmt::format("step {:>{}}/{}  loss {:.6f}  {:.0f} samples/s  elapsed {:.2f} s\n", step + 1,
                         std::to_string(config.steps).size(), config.steps, loss_value,
                         static_cast<double>(result.samples) / std::max(elapsed, 1e-9), elapsed);
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  progress << fmt::format("done: {} steps in {:.2f} s ({:.0f} samples/s); loss {:.6f} -> {:.6f}", config.steps,
                     result.seconds, static_cast<double>(result.samples) / std::max(result.seconds, 1e-9),
                     result.losses.front(), result.losses.back());
  if (result.accuracy >= 0) progress << fmt::format("; accuracy on the last batch {:.1f}%", 100 * result.accuracy);
  progress << "\n";
  if (classification && synthetic != nullptr) {
    // The same model on every rank, the same held-out samples: every rank gets the same figure.
    t::NoGradGuard no_grad;
    const Batch held = synthetic->held_out(kHeldOutRows);
    result.held_out_accuracy =
        t::mean(t::eq(t::argmax(model->forward(held.inputs.to(device)), 1), held.targets.to(device)).to(t::kFloat64))
            .item<double>();
    progress << fmt::format("held-out accuracy {:.1f}% on {} new samples\n", 100 * result.held_out_accuracy, kHeldOutRows);
  }
  if (!config.save.empty() && rank == 0) {
    nn::save_state_dict(*model, config.save);
    progress << "saved the final weights to " << config.save << "\n";
  }
  if (pg) {
    pg->barrier()->wait();  // rank 0 hosts the store: nobody leaves before everyone is done
    runner.reset();
    comm::destroy_process_group();
  }
  return result;
}

}  // namespace tinyddp::examples
