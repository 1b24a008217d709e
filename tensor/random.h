// Random numbers: a seeded Mersenne-Twister Generator per device and the sampling ops.
// The CPU streams follow PyTorch's CPU generator: after manual_seed(s) the same calls give
// the same numbers as torch.manual_seed(s) (uniform exactly; normal to float rounding).
// Tensors on a GPU are filled from the same host generator (drawn on the CPU, then copied):
// a model initialised under one seed is identical on the CPU and on any GPU. PyTorch keeps a
// separate generator per GPU instead, so its GPU draws differ from its CPU draws. Dropout on a
// GPU is the exception: its masks are drawn on the device under one key from the generator
// (tensor/internal/philox.h; docs/tensor.md, "Dropout").
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <string>

#include "tinyddp/tensor/factory.h"

namespace tinyddp::tensor {

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default CPU seed

  explicit Generator(uint64_t seed = kDefaultSeed) { manual_seed(seed); }

  void manual_seed(uint64_t seed);
  uint64_t initial_seed() const { return seed_; }

  // Raw draws: 32 bits, or 64 bits from two draws (first draw in the high half).
  uint32_t random();
  uint64_t random64();
  // Uniform in [0, 1): 24 random bits for float, 53 for double.
  float uniform_float();
  double uniform_double();
  // Standard normal in double (Box-Muller; the second value of each pair is kept for the
  // next call).
  double normal_double();

  // The whole state (seed, Mersenne-Twister words, a cached normal) as text, and back:
  // set_state(get_state()) continues the stream exactly (checkpoints keep it). set_state
  // throws on text that get_state did not write.
  std::string get_state() const;
  void set_state(const std::string& state);
  // The same state as a value, for a caller that puts it back within the process (no text
  // written or parsed: a deterministic step saves and restores it around every step).
  struct Snapshot {
    uint64_t seed;
    std::mt19937 engine;
    std::optional<double> next_normal;
  };
  Snapshot snapshot() const { return {seed_, engine_, next_normal_}; }
  void restore(const Snapshot& saved) {
    seed_ = saved.seed;
    engine_ = saved.engine;
    next_normal_ = saved.next_normal;
  }

  // Callers that draw many numbers hold this for the whole batch.
  std::mutex& mutex() { return mutex_; }

 private:
  uint64_t seed_ = kDefaultSeed;
  std::mt19937 engine_;
  std::optional<double> next_normal_;
  std::mutex mutex_;
};

// SplitMix64's finaliser: a well-mixed 64-bit value from any 64-bit input (seeds that differ
// in one bit give unrelated streams). Used to derive seeds from counters.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// The default CPU generator used when none is given.
Generator& default_generator();
// Seeds the default generator (torch.manual_seed).
void manual_seed(uint64_t seed);

// Fills t in place with U(from, to) / N(mean, std), in t's memory order as PyTorch's kernels
// (a channels-last or transposed t too). Float32 and float64 tensors of 16 or more contiguous
// elements use PyTorch's batched Box-Muller layout, so the numbers match it.
const Tensor& uniform_(const Tensor& t, double from = 0.0, double to = 1.0, Generator* generator = nullptr);
const Tensor& normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);

Tensor rand(const Shape& sizes, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& sizes, TensorOptions options = {}, Generator* generator = nullptr);
// The _like forms are laid out as t (channels last when t is), drawn in memory order.
Tensor rand_like(const Tensor& t, Generator* generator = nullptr);
// A random permutation of 0..n-1 as int64 on the CPU, the same as torch.randperm(n) on the CPU
// after the same seed (a Fisher-Yates shuffle drawing one 32-bit number per position).
Tensor randperm(int64_t n, Generator* generator = nullptr);
// Integers uniform in [low, high) as int64 on the CPU, the same as torch.randint(low, high, size)
// on the CPU after the same seed: element by element, one 32-bit draw each (the draw modulo
// high - low), or one 64-bit draw each when high - low is 2^32 or more.
Tensor randint(int64_t low, int64_t high, const Shape& sizes, Generator* generator = nullptr);
Tensor randint(int64_t high, const Shape& sizes, Generator* generator = nullptr);  // low 0
Tensor randn_like(const Tensor& t, Generator* generator = nullptr);

// As torch.bernoulli(p): 1 with probability p, else 0, elementwise in p's dtype (p in [0, 1]);
// bernoulli_(t, p) fills t so. As torch.normal: one draw per element of the broadcast mean and
// std tensors (not differentiable), or a tensor of `sizes` drawn from N(mean, std).
Tensor bernoulli(const Tensor& p, Generator* generator = nullptr);
const Tensor& bernoulli_(const Tensor& t, double p = 0.5, Generator* generator = nullptr);
Tensor normal(const Tensor& mean, const Tensor& std, Generator* generator = nullptr);
Tensor normal(double mean, double std, const Shape& sizes, Generator* generator = nullptr, TensorOptions options = {});
// As torch.multinomial: `num_samples` category indices (int64) per row of a 1-D or 2-D tensor
// of non-negative weights, with or without replacement (then at most as many as the
// categories of nonzero weight). The draws differ from PyTorch's (its algorithm draws
// differently); the distribution is the same.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false, Generator* generator = nullptr);

}  // namespace tinyddp::tensor
