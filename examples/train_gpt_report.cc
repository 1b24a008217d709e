// What //examples:train_gpt prints and saves around its loop (train_gpt_run.h): the run's
// description, the validation loss, the sample, the memory report and the final weights.
#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "examples/train_exact.h"
#include "examples/train_gpt_run.h"
#include "tinyddp/ddp/zero_redundancy_optimizer.h"
#include "tinyddp/tensor/cuda.h"
#include "tinyddp/tensor/parallel.h"

namespace tinyddp::examples {

namespace t = tinyddp::tensor;
using t::Tensor;

double validation_loss(const GPTTrainConfig& config, const GptRun& run) {
  const auto [x, y] = run.text.split->validation(config.eval_windows);
  t::NoGradGuard no_grad;
  run.model->eval();
  double total = 0;
  const int64_t chunk = 16;
  for (int64_t first = 0; first < x.size(0); first += chunk) {
    const int64_t n = std::min(chunk, x.size(0) - first);
    const Tensor loss =
        (*run.model)(x.narrow(0, first, n).to(run.placement.device), y.narrow(0, first, n).to(run.placement.device))[1];
    total += loss.item<double>() * static_cast<double>(n);
  }
  run.model->train();
  return total / static_cast<double>(x.size(0));
}

void describe(const GPTTrainConfig& config, const GptRun& run, std::ostream& out) {
  const nn::GPTConfig& c = run.model->config;
  out << fmt::format("GPT: {} layers, {} heads, {} wide, context {}, vocabulary {}; {:.2f}M parameters\n", c.n_layer,
                     c.n_head, c.n_embd, c.block_size, c.vocab_size,
                     static_cast<double>(run.model->num_parameters()) / 1e6);
  if (run.text.split) {
    out << fmt::format("corpus: {}, {} characters; split (seed {}): {} training, {} validation tokens\n",
                       run.text.corpus->source(), run.text.corpus->size(), config.seed, run.text.split->train_tokens(),
                       run.text.split->validation_tokens());
  } else {
    out << fmt::format("data: {}, global batch {}\n", config.data, run.text.file->global_batch());
  }
  out << fmt::format(
      "AdamW lr {} ({} schedule, {} warmup steps, min {}), weight decay {} on {} tensors, clip {}{}; "
      "{} steps of {} x {} tokens{}{}\n",
      config.lr, config.lr_schedule, config.warmup_steps, config.min_lr, config.weight_decay,
      run.optimizer->group_end(0), config.grad_clip, config.zero && run.pg ? ", ZeRO" : "", config.steps,
      run.global_rows(), config.block_size,
      run.micro_steps > 1 ? fmt::format(" in {} micro-steps per rank", run.micro_steps) : "",
      run.pg ? fmt::format(", {} on {} ranks ({})",
                           run.exact           ? (run.units.empty() ? "exact sums (--deterministic)"
                                                                    : "fully sharded, exact sums (--deterministic)")
                           : run.units.empty() ? "data-parallel"
                                               : "fully sharded (fully_shard)",
                           run.world, run.placement.backend)
             : "");
  if (run.exact) {
    const int64_t chunks = chunk_share(run.rows, config.chunk_size, run.rank, run.world).total;
    out << fmt::format("--deterministic: chunks of {} windows, {} a step; int64 sums, {} bits below each bound\n",
                       config.chunk_size, chunks, ddp::ExactGradientSum::precision_bits_for(chunks));
  }
  if (run.placement.device.type == t::DeviceType::kCPU)
    out << fmt::format("{} intra-op threads ({})\n", t::get_num_threads(), t::num_threads_source());
}

std::string sample(const GPTTrainConfig& config, const GptRun& run) {
  const std::vector<int64_t> prompt = run.text.corpus->encode(config.prompt);
  const Tensor ids = t::from_vector(prompt, t::Shape{1, static_cast<int64_t>(prompt.size())}).to(run.placement.device);
  t::Generator generator(config.seed);
  // --fsdp: generate calls the model's forward itself, so every unit is gathered first (on
  // every rank, which all sample) and freed after.
  for (const auto& unit : run.units) unit->unshard();
  const Tensor out = run.model->generate(ids, config.sample_tokens, config.temperature, config.top_k, &generator);
  for (const auto& unit : run.units) unit->reshard();
  return run.text.corpus->decode(out[0].to(t::kCPU).to_vector<int64_t>());
}

int64_t report_memory(const GPTTrainConfig& config, const GptRun& run, std::ostream& log) {
  int64_t bytes = 0;
  if (auto* zero = dynamic_cast<ddp::ZeroRedundancyOptimizer*>(run.optimizer.get())) {
    bytes = zero->local_state_bytes();
  } else {
    for (const auto& [name, t] : run.optimizer->state_dict()) bytes += static_cast<int64_t>(t.nbytes());
  }
  log << fmt::format("optimizer state on rank {}: {:.2f} MB\n", run.rank, static_cast<double>(bytes) / 1e6);
  if (config.report_memory) {
    log << fmt::format("peak resident memory on rank {}: {} MiB\n", run.rank, peak_rss_mib());
    // The tensors alone (parameters, gradients, optimizer state, activations, buffers in flight).
    log << fmt::format("peak tensor memory on rank {}: {:.1f} MiB\n", run.rank,
                       static_cast<double>(t::cpu_memory_stats().peak_allocated_bytes) / 1048576.0);
    if (run.placement.on_gpu) {  // the caching allocator's, as torch.cuda.max_memory_allocated
      const auto gpu = t::cuda::allocator_stats(run.placement.device.index);
      log << fmt::format("peak GPU tensor memory on rank {}: {:.1f} MiB\n", run.rank,
                         static_cast<double>(gpu.peak_allocated_bytes) / 1048576.0);
    }
  }
  return bytes;
}

void save_final_weights(const GPTTrainConfig& config, const GptRun& run, std::ostream& out) {
  if (config.save.empty()) return;
  if (!run.units.empty()) {
    const nn::OrderedDict<Tensor> full = ddp::full_state_dict(*run.model);
    if (run.rank == 0) nn::save_safetensors(config.save, full);
  } else if (run.rank == 0) {
    nn::save_state_dict(*run.model, config.save);
  }
  out << "saved the final weights to " << config.save << "\n";
}

void report_end(const GPTTrainConfig& config, GptRun& run, const StepPhases& phases, GPTTrainResult& result,
                std::ostream& log) {
  std::ostringstream quiet;  // only rank 0 prints, but every rank takes part
  std::ostream& out = run.rank == 0 ? log : quiet;
  out << fmt::format("done: {} steps in {:.1f} s, {:.0f} tokens/s\n", config.steps - run.first_step, result.seconds,
                     result.tokens_per_second);
  out << phases.table(std::min<int64_t>(2, config.steps - run.first_step - 1));
  result.optimizer_state_bytes = report_memory(config, run, log);
  if (run.text.split) {
    result.validation_loss = validation_loss(config, run);
    out << fmt::format("validation loss {:.4f} (bigram model: {:.4f})\n", result.validation_loss, result.bigram_loss);
    if (config.sample_tokens > 0) {
      result.sample = sample(config, run);
      out << fmt::format("sample (temperature {}, top-k {}, seed {}):\n{}\n", config.temperature, config.top_k,
                         config.seed, result.sample);
    }
  }
  save_final_weights(config, run, out);
  if (run.ddp && !run.exact) report_reductions(*run.ddp, (config.steps - run.first_step) * run.micro_steps, out);
}

}  // namespace tinyddp::examples
