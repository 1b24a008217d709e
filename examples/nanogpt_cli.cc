// train_gpt's nanoGPT mode, its command line (nanogpt_train.h): nanoGPT's keys, as
// `--key=value` (configurator.py's form) or `--key value`, booleans as True/False too, and
// nanoGPT's config files (`key = literal` lines) wherever they stand among them.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "examples/nanogpt_train.h"
#include "tinyddp/base/error.h"
#include "tinyddp/base/exit_status.h"

namespace tinyddp::examples {

bool wants_nanogpt_mode(int argc, char** argv) {
  // A config file first, as `train.py config/train_shakespeare_char.py ...` (train_gpt's own
  // options take no positional arguments), or --dataset anywhere.
  if (argc > 1 && argv[1][0] != '-' && std::strchr(argv[1], '=') == nullptr) return true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--dataset") == 0 || std::strncmp(argv[i], "--dataset=", 10) == 0) return true;
  }
  return false;
}

const std::vector<ModeFlag>& mode_flags() {
  static const std::vector<ModeFlag> flags = {
      {"lr", "learning_rate", "the same peak rate"},
      {"steps", "max_iters", "--steps counts the steps; nanoGPT stops after iteration max_iters"},
      {"batch", "batch_size", "--batch is the global batch in windows; batch_size is per rank and micro-step"},
      {"warmup_steps", "warmup_iters",
       "warmup as lr (s + 1) / warmup_steps; nanoGPT's as (it + 1) / (warmup_iters + 1)"},
      {"lr_schedule", "decay_lr", "cosine or constant; nanoGPT's True or False, its decay ending at lr_decay_iters"},
      {"eval_every", "eval_interval", "validation loss on the corpus; nanoGPT's estimate_loss on train and val"},
      {"eval_windows", "eval_iters", "windows of the corpus; nanoGPT's batches per split"},
      {"log_every", "log_interval", "the same count of steps between lines"},
      {"checkpoint", "out_dir", "a checkpoint file; nanoGPT's folder for ckpt.safetensors"},
      {"resume", "init_from", "a flag with --checkpoint; nanoGPT's --init_from=resume"},
      {"autocast", "dtype", "--autocast bf16; nanoGPT's --dtype=bfloat16 (autocast on a GPU only)"},
  };
  return flags;
}

void check_flags_of_mode(const std::vector<std::string>& args, bool nanogpt_mode) {
  for (const std::string& arg : args) {
    if (arg.rfind("--", 0) != 0) continue;
    const std::string name = arg.substr(2, arg.find('=') == std::string::npos ? std::string::npos : arg.find('=') - 2);
    for (const ModeFlag& f : mode_flags()) {
      if (nanogpt_mode && name == f.replay) {
        throw Error(fmt::format(
            "--{} is train_gpt's own option; given --dataset or a config file, train_gpt takes nanoGPT's keys: "
            "use --{} ({})",
            f.replay, f.nanogpt, f.note));
      }
      if (!nanogpt_mode && name == f.nanogpt) {
        throw Error(fmt::format(
            "--{} is nanoGPT's key, taken in nanoGPT's mode (with --dataset=DIR or a config file); without them "
            "train_gpt's own option is --{} ({})",
            f.nanogpt, f.replay, f.note));
      }
    }
  }
}

namespace {

std::string trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r"), last = s.find_last_not_of(" \t\r");
  return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

// One line of a nanoGPT config file as the option it sets ("--key=value"), or nothing for a
// blank or comment line. The line must be `key = literal`, with an int, a float, True, False
// or a quoted string (no escapes), and an optional comment.
std::optional<std::string> config_line(const std::string& raw, const std::string& file, int number) {
  const std::string line = trim(raw);
  if (line.empty() || line[0] == '#') return std::nullopt;
  static const std::regex assignment(R"(^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$)");
  static const std::regex number_literal(R"(^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$)");
  const auto bad = [&](const std::string& why) {
    return Error(
        fmt::format("{} line {}: {} ('{}'); a config file holds `key = literal` lines (int, float, True, "
                    "False or a quoted string) and comments",
                    file, number, why, line));
  };
  std::smatch m;
  if (!std::regex_match(line, m, assignment)) throw bad("not an assignment");
  const std::string key = m[1], rest = m[2];
  std::string value, after;
  if (!rest.empty() && (rest[0] == '\'' || rest[0] == '"')) {
    const size_t close = rest.find(rest[0], 1);
    if (close == std::string::npos) throw bad("an unterminated string");
    value = rest.substr(1, close - 1);
    if (value.find('\\') != std::string::npos) throw bad("a string with escapes");
    after = trim(rest.substr(close + 1));
  } else {
    const size_t hash = rest.find('#');
    value = trim(rest.substr(0, hash));
    after = hash == std::string::npos ? "" : rest.substr(hash);
    if (value == "True" || value == "False") {
      value = value == "True" ? "true" : "false";
    } else if (!std::regex_match(value, number_literal)) {
      throw bad("'" + value + "' is not a literal this reader takes");
    }
  }
  if (!after.empty() && after[0] != '#') throw bad("more after the value");
  return "--" + key + "=" + value;
}

// The command line with each config file (an argument without '=' that is neither an option
// nor an option's value) replaced by the options its lines set, in place, as nanoGPT's
// configurator.py applies them.
std::vector<std::string> expand_config_files(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    // A value of `--key value` is not a file.
    const bool value = i > 1 && argv[i - 1][0] == '-' && std::strchr(argv[i - 1], '=') == nullptr;
    if (arg.empty() || arg[0] == '-' || arg.find('=') != std::string::npos || value) {
      args.push_back(arg);
      continue;
    }
    std::ifstream in(arg);
    TDDP_CHECK(in.good(), "{}: cannot open this config file", arg);
    std::cout << "Overriding config with " << arg << "\n";
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      if (auto option = config_line(line, arg, ++number)) args.push_back(*option);
    }
  }
  return args;
}

}  // namespace

int nanogpt_main(int argc, char** argv) {
  NanoGptConfig c;
  bool compile = false, wandb_log = false;
  std::string ignored;
  CLI::App app{"train_gpt in nanoGPT's mode: nanoGPT's train.py keys, its loop and its draws, on its data files."};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--out_dir", c.out_dir, "where checkpoints go (default out)");
  app.add_option("--eval_interval", c.eval_interval, "iterations between evaluations (default 2000)");
  app.add_option("--log_interval", c.log_interval, "iterations between loss lines (default 1)");
  app.add_option("--eval_iters", c.eval_iters, "batches per split in each evaluation (default 200)");
  app.add_option("--eval_only", c.eval_only, "evaluate once and stop (default False)");
  app.add_option("--always_save_checkpoint", c.always_save_checkpoint,
                 "save at every evaluation, not only when the val loss improves (default True)");
  app.add_option("--init_from", c.init_from, "scratch (default) or resume (from out_dir's checkpoint)");
  app.add_option("--dataset", c.dataset, "data/<dataset> or a directory: train.bin, val.bin, meta.pkl")->required();
  app.add_option("--gradient_accumulation_steps", c.gradient_accumulation_steps,
                 "micro-steps per iteration, over all ranks (default 40)");
  app.add_option("--batch_size", c.batch_size, "windows per micro-step and rank (default 12)");
  app.add_option("--block_size", c.block_size, "context length (default 1024)");
  app.add_option("--vocab_size", c.vocab_size, "without meta.pkl: the vocabulary (default 50304)");
  app.add_option("--n_layer", c.n_layer, "transformer blocks (default 12)");
  app.add_option("--n_head", c.n_head, "attention heads (default 12)");
  app.add_option("--n_embd", c.n_embd, "embedding width (default 768)");
  app.add_option("--dropout", c.dropout, "dropout (default 0.0)");
  app.add_option("--bias", c.bias, "biases in Linears and LayerNorms (default False)");
  app.add_option("--learning_rate", c.learning_rate, "AdamW's peak rate (default 6e-4)");
  app.add_option("--max_iters", c.max_iters, "the last iteration (default 600000)");
  app.add_option("--weight_decay", c.weight_decay, "AdamW's decay of 2-d weights (default 0.1)");
  app.add_option("--beta1", c.beta1, "AdamW's beta1 (default 0.9)");
  app.add_option("--beta2", c.beta2, "AdamW's beta2 (default 0.95)");
  app.add_option("--grad_clip", c.grad_clip, "clip the gradient norm at this; 0 off (default 1.0)");
  app.add_option("--decay_lr", c.decay_lr, "warmup and cosine decay (default True)");
  app.add_option("--warmup_iters", c.warmup_iters, "warmup iterations (default 2000)");
  app.add_option("--lr_decay_iters", c.lr_decay_iters, "where the cosine ends (default 600000)");
  app.add_option("--min_lr", c.min_lr, "the rate after the decay (default 6e-5)");
  app.add_option("--backend", c.backend, "auto (default), gloo or nccl");
  app.add_option("--device", c.device, "cpu (default), cuda or auto");
  app.add_option("--dtype", c.dtype,
                 "float32 (default), bfloat16 (autocast on a GPU), float16; the CPU computes in float32");
  app.add_option("--compile", compile, "accepted for nanoGPT's command lines; there is no compiler here: False");
  app.add_option("--seed", c.seed, "each rank's generator starts from seed + rank (default 1337, nanoGPT's)");
  app.add_option("--timeout", c.timeout_s, "seconds a collective waits for the other ranks (default 60)");
  app.add_option("--threads", c.threads, "intra-op threads per process (default: the physical cores)");
  app.add_option("--deterministic", c.deterministic,
                 "tinyddp's: the same bits on any number of ranks (one process's batches, micro-batches summed "
                 "exactly; default False)");
  app.add_option("--profile_ops", c.profile_ops,
                 "tinyddp's: profile N iterations after the first, time per op and kind of kernel (default 0)");
  app.add_option("--profile_trace", c.profile_trace, "tinyddp's: with profile_ops, write their Chrome trace here");
  app.add_option("--capturable", c.capturable,
                 "tinyddp's: AdamW's step count and rate as tensors on the device (default False)");
  app.add_option("--cuda_graph", c.cuda_graph,
                 "tinyddp's: on one GPU, capture the fourth iteration in a CUDA graph and replay it from then on "
                 "(default False)");
  app.add_option("--report_memory", c.report_memory,
                 "tinyddp's: print the peak tensor memory of the iterations at the end (default False)");
  app.add_option("--wandb_log", wandb_log, "accepted for nanoGPT's config files: False (there is no wandb here)");
  app.add_option("--wandb_project,--wandb_run_name", ignored, "accepted for nanoGPT's config files; unused");
  try {
    std::vector<std::string> args = expand_config_files(argc, argv);
    check_flags_of_mode(args, /*nanogpt_mode=*/true);
    std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "train_gpt: error: " << e.what() << std::endl;
    return 1;
  }
  try {
    TDDP_CHECK(!wandb_log, "--wandb_log=True: there is no wandb here (leave it False)");
    TDDP_CHECK(!compile, "--compile=True: there is no compiler here (leave it False)");
    return train_nanogpt(c, std::cout).stopped_before >= 0 ? kRequeueExitStatus : 0;
  } catch (const std::exception& e) {
    std::cerr << "train_gpt: error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace tinyddp::examples
