// GPTTrainConfig::validate (train_gpt_lib.h): every option's check, each error naming the option
// and what it got, before anything is set up.
#include "examples/train_gpt_lib.h"

#include "examples/run_env.h"
#include "tinyddp/base/error.h"

namespace tinyddp::examples {

void GPTTrainConfig::validate() const {
  TDDP_CHECK(n_layer >= 1 && n_head >= 1 && n_embd >= 1 && block_size >= 1,
             "--n_layer, --n_head, --n_embd and --block_size must be positive");
  TDDP_CHECK(autocast.empty() || autocast == "bf16", "--autocast must be bf16 (or absent), got '{}'", autocast);
  TDDP_CHECK(n_embd % n_head == 0, "--n_embd {} is not divisible by --n_head {} (each head takes n_embd / n_head)",
             n_embd, n_head);
  TDDP_CHECK(vocab_size >= 0, "--vocab_size must not be negative, got {}", vocab_size);
  TDDP_CHECK(data.empty() || vocab_size > 0, "--data needs --vocab_size (there is no corpus to take it from)");
  TDDP_CHECK(dropout >= 0 && dropout < 1, "--dropout must be in [0, 1), got {}", dropout);
  TDDP_CHECK(batch >= 1 && steps >= 1, "--batch and --steps must be positive");
  TDDP_CHECK(gradient_accumulation_steps >= 0,
             "--gradient_accumulation_steps must be positive (or 0: one micro-step per rank), got {}",
             gradient_accumulation_steps);
  TDDP_CHECK(lr > 0 && min_lr >= 0 && min_lr <= lr, "--lr must be positive and --min_lr in [0, lr], got {} and {}", lr,
             min_lr);
  TDDP_CHECK(weight_decay >= 0 && grad_clip >= 0 && eps >= 0,
             "--weight_decay, --grad_clip and --eps must not be "
             "negative");
  TDDP_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "--beta1 and --beta2 must be in [0, 1)");
  TDDP_CHECK(warmup_steps >= 0, "--warmup_steps must not be negative, got {}", warmup_steps);
  TDDP_CHECK(lr_schedule == "cosine" || lr_schedule == "constant", "--lr_schedule must be constant or cosine, got '{}'",
             lr_schedule);
  TDDP_CHECK(eval_every >= 0 && eval_windows >= 1, "--eval_every must not be negative and --eval_windows positive");
  TDDP_CHECK(temperature > 0, "--temperature must be positive, got {}", temperature);
  TDDP_CHECK(top_k >= 1, "--top_k must be at least 1, got {}", top_k);
  TDDP_CHECK(sample_tokens >= 0, "--sample_tokens must not be negative, got {}", sample_tokens);
  TDDP_CHECK(!prompt.empty(), "--prompt must not be empty (generation starts from it)");
  TDDP_CHECK(log_every >= 0 && checkpoint_every >= 0, "--log_every and --checkpoint_every must not be negative");
  TDDP_CHECK(!resume || !checkpoint.empty(), "--resume needs --checkpoint PATH");
  TDDP_CHECK(known_comm_hook(comm_hook), "--comm_hook must be {}, got '{}'", comm_hook_choices(), comm_hook);
  TDDP_CHECK(!fsdp || (!zero && comm_hook == "allreduce" && autocast.empty()),
             "--fsdp does not take --zero, --comm_hook or --autocast (DDP's options; fully_shard's mixed precision is "
             "--fsdp_param_dtype bfloat16)");
  TDDP_CHECK(fsdp_param_dtype.empty() || (fsdp && (fsdp_param_dtype == "bfloat16" || fsdp_param_dtype == "float32")),
             "--fsdp_param_dtype takes bfloat16 or float32, with --fsdp; got '{}'{}", fsdp_param_dtype,
             fsdp ? "" : " without --fsdp");
  TDDP_CHECK(chunk_size >= 1, "--chunk_size must be positive, got {}", chunk_size);
  TDDP_CHECK(!deterministic || (comm_hook == "allreduce" && gradient_accumulation_steps == 0),
             "--deterministic trains through the deterministic option (DDP's, or fully_shard's with --fsdp): it does "
             "not take --comm_hook or --gradient_accumulation_steps (its chunks are the micro-steps)");
  TDDP_CHECK(timeout_s > 0, "--timeout must be positive, got {}", timeout_s);
  TDDP_CHECK(threads >= 0, "--threads must be positive (or 0: the default), got {}", threads);
  TDDP_CHECK(!cuda_graph || device != "cpu", "--cuda_graph captures the step on a GPU: pass --device cuda");
  TDDP_CHECK(!cuda_graph || (!fsdp && !zero && !deterministic && !profile_phases && comm_hook != "powersgd"),
             "--cuda_graph does not take --fsdp, --zero, --deterministic, --comm_hook powersgd or --profile_phases "
             "(the step it captures has DDP's bucket allreduces as its only collectives, and no host waits)");
  TDDP_CHECK(profile_ops >= 0, "--profile_ops must not be negative, got {}", profile_ops);
  TDDP_CHECK(profile_trace.empty() || profile_ops > 0, "--profile_trace needs --profile_ops N (the steps to profile)");
}

}  // namespace tinyddp::examples
