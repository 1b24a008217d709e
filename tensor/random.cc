// Random sampling on the CPU generator, mirroring the draws PyTorch's CPU generator makes.
#include "tinyddp/tensor/random.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <sstream>

#include <cmath>
#include <numbers>
#include <type_traits>

#include "tinyddp/tensor/internal/iteration_order.h"
#include "tinyddp/tensor/ops.h"

namespace tinyddp::tensor {

void Generator::manual_seed(uint64_t seed) {
  seed_ = seed;
  engine_.seed(static_cast<uint32_t>(seed & 0xFFFFFFFFu));  // mt19937 takes 32 bits of the seed
  next_normal_.reset();
}

std::string Generator::get_state() const {
  std::ostringstream out;
  out << "tinyddp-mt19937 " << seed_ << ' ' << engine_ << ' ';
  if (next_normal_) {
    out << "normal " << fmt::format("{:a}", *next_normal_);
  } else {
    out << "none";
  }
  return out.str();
}

void Generator::set_state(const std::string& state) {
  std::istringstream in(state);
  std::string tag, normal;
  uint64_t seed = 0;
  std::mt19937 engine;
  in >> tag >> seed >> engine >> normal;
  std::optional<double> next_normal;
  if (in && normal == "normal") {
    std::string value;
    in >> value;
    char* end = nullptr;
    next_normal = std::strtod(value.c_str(), &end);
    TDDP_CHECK(!value.empty() && end == value.c_str() + value.size(), "Generator::set_state: bad cached normal '{}'",
               value);
  }
  TDDP_CHECK(in && tag == "tinyddp-mt19937" && (normal == "none" || normal == "normal"),
             "Generator::set_state: not a generator state written by get_state() ({} characters)", state.size());
  seed_ = seed;
  engine_ = engine;
  next_normal_ = next_normal;
}

uint32_t Generator::random() { return static_cast<uint32_t>(engine_()); }

uint64_t Generator::random64() {
  const uint64_t high = random();
  const uint64_t low = random();
  return (high << 32) | low;
}

float Generator::uniform_float() {
  return static_cast<float>(static_cast<double>(random() & ((1u << 24) - 1)) * 0x1p-24);
}

double Generator::uniform_double() { return static_cast<double>(random64() & ((1ULL << 53) - 1)) * 0x1p-53; }

double Generator::normal_double() {
  if (next_normal_) {
    const double cached = *next_normal_;
    next_normal_.reset();
    return cached;
  }
  const double u1 = uniform_double();
  const double u2 = uniform_double();
  const double radius = std::sqrt(-2.0 * std::log1p(-u2));
  const double theta = 2.0 * std::numbers::pi * u1;
  next_normal_ = radius * std::sin(theta);
  return radius * std::cos(theta);
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) {
  Generator& g = default_generator();
  std::lock_guard<std::mutex> lock(g.mutex());
  g.manual_seed(seed);
}

namespace {

Generator& pick(Generator* generator) { return generator != nullptr ? *generator : default_generator(); }

// Writes values[i] into t in row-major order (t may be strided; dtype converted).
// The values drawn one by one go into t in its memory order (a channels-last or transposed
// tensor too), as PyTorch's kernels walk it (iteration_order.h): t's dims permuted outermost
// first in memory, then filled row by row.
void write_values(const Tensor& t, const std::vector<double>& values) {
  NoGradGuard no_grad;  // the caller has checked that t may be written
  const Shape inner_first = iteration_order<1>(t.sizes(), {t.strides()});
  const Shape dims(inner_first.rbegin(), inner_first.rend());
  const Tensor in_memory_order = t.permute(dims);
  in_memory_order.copy_(from_vector(values, in_memory_order.sizes()));
}

void check_sampling_target(const Tensor& t, const char* op) {
  TDDP_CHECK(t.defined(), "{}: undefined tensor", op);
  TDDP_CHECK(!(GradMode::is_enabled() && t.requires_grad()),
             "{}: in-place sampling into a tensor that requires grad; wrap it in NoGradGuard (as nn.init does)", op);
  TDDP_CHECK(t.is_floating_point(), "{}: expected a floating-point tensor, got dtype {}", op, dtype_name(t.dtype()));
  TDDP_CHECK(t.is_cpu() || t.is_cuda(), "{}: cannot sample into a tensor on {}", op, t.device().str());
}

// PyTorch's layout for float32 and float64 normals of 16 or more contiguous elements: draw all
// uniforms first, then transform each block of 16 as 8 Box-Muller pairs (j, j + 8) in the
// tensor's own type; a ragged tail redoes the last 16 with fresh draws.
template <typename T>
void normal_fill_16(T* data, T mean, T std) {
  for (int j = 0; j < 8; ++j) {
    const T u1 = T(1) - data[j];  // (0, 1] so that log is finite
    const T u2 = data[j + 8];
    const T radius = std::sqrt(T(-2) * std::log(u1));
    const T theta = T(2) * std::numbers::pi_v<T> * u2;
    data[j] = radius * std::cos(theta) * std + mean;
    data[j + 8] = radius * std::sin(theta) * std + mean;
  }
}

template <typename T>
T uniform_of(Generator& g) {
  if constexpr (std::is_same_v<T, float>) {
    return g.uniform_float();
  } else {
    return g.uniform_double();
  }
}

template <typename T>
void normal_fill(T* data, int64_t size, T mean, T std, Generator& g) {
  for (int64_t i = 0; i < size; ++i) data[i] = uniform_of<T>(g);
  for (int64_t i = 0; i + 16 <= size; i += 16) normal_fill_16(data + i, mean, std);
  if (size % 16 != 0) {
    T* tail = data + size - 16;
    for (int i = 0; i < 16; ++i) tail[i] = uniform_of<T>(g);
    normal_fill_16(tail, mean, std);
  }
}

}  // namespace

const Tensor& uniform_(const Tensor& t, double from, double to, Generator* generator) {
  check_sampling_target(t, "uniform_");
  TDDP_CHECK(from <= to, "uniform_: expects from <= to, but got from={} > to={}", from, to);
  Generator& g = pick(generator);
  std::vector<double> values(static_cast<size_t>(t.numel()));
  // As PyTorch: the bounds are first cast to the tensor's dtype and their difference is
  // taken in it; the draw itself is scaled in double. (Matters for bounds like 1/sqrt(10).)
  const bool is_double = t.dtype() == kFloat64;
  const double low = is_double ? from : static_cast<double>(static_cast<float>(from));
  const double span = is_double ? to - from : static_cast<double>(static_cast<float>(to) - static_cast<float>(from));
  {
    std::lock_guard<std::mutex> lock(g.mutex());
    for (double& v : values) {
      const double u = is_double ? g.uniform_double() : static_cast<double>(g.uniform_float());
      v = u * span + low;
    }
  }
  write_values(t, values);
  return t;
}

const Tensor& normal_(const Tensor& t, double mean, double std, Generator* generator) {
  check_sampling_target(t, "normal_");
  TDDP_CHECK(std >= 0, "normal_: expects std >= 0.0, but found std {}", std);
  Generator& g = pick(generator);
  std::lock_guard<std::mutex> lock(g.mutex());
  const bool batched_type = t.dtype() == kFloat32 || t.dtype() == kFloat64;
  if (batched_type && t.numel() >= 16 && t.is_contiguous()) {
    // Drawn on the host (into t itself when it is a contiguous CPU tensor), then copied.
    const bool direct = t.is_cpu();
    const Tensor host = direct ? t : empty(t.sizes(), t.dtype());
    if (t.dtype() == kFloat32) {
      normal_fill(host.data_ptr<float>(), host.numel(), static_cast<float>(mean), static_cast<float>(std), g);
    } else {
      normal_fill(host.data_ptr<double>(), host.numel(), mean, std, g);
    }
    if (direct) {
      t.storage().bump_version();
    } else {
      NoGradGuard no_grad;
      t.copy_(host);
    }
    return t;
  }
  std::vector<double> values(static_cast<size_t>(t.numel()));
  for (double& v : values) v = g.normal_double() * std + mean;
  write_values(t, values);
  return t;
}

Tensor rand(const Shape& sizes, TensorOptions options, Generator* generator) {
  Tensor t = empty(sizes, options);
  uniform_(t, 0.0, 1.0, generator);
  return t;
}

Tensor randn(const Shape& sizes, TensorOptions options, Generator* generator) {
  Tensor t = empty(sizes, options);
  normal_(t, 0.0, 1.0, generator);
  return t;
}

Tensor randperm(int64_t n, Generator* generator) {
  TDDP_CHECK(n >= 0, "randperm: n must be non-negative, got {}", n);
  // PyTorch's CPU kernel draws 64 bits per position only from n >= 2^32 / 20 on.
  TDDP_CHECK(n < (int64_t{1} << 32) / 20, "randperm: n = {} is larger than supported", n);
  Tensor result = empty({n}, TensorOptions(kInt64));
  int64_t* r = result.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  Generator& g = pick(generator);
  std::lock_guard<std::mutex> lock(g.mutex());
  // Position i swaps with one of positions i..n-1, chosen by the next 32-bit draw.
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(g.random() % static_cast<uint64_t>(n - i));
    std::swap(r[i], r[i + z]);
  }
  return result;
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, Generator* generator) {
  TDDP_CHECK(low < high, "randint: expected low < high, got low {} and high {} (an empty range)", low, high);
  Tensor result = empty(sizes, TensorOptions(kInt64));
  int64_t* r = result.data_ptr<int64_t>();
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  Generator& g = pick(generator);
  std::lock_guard<std::mutex> lock(g.mutex());
  for (int64_t i = 0; i < result.numel(); ++i) {
    const uint64_t draw = range >= (uint64_t{1} << 32) ? g.random64() : g.random();
    r[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + draw % range);
  }
  return result;
}

Tensor randint(int64_t high, const Shape& sizes, Generator* generator) { return randint(0, high, sizes, generator); }

Tensor rand_like(const Tensor& t, Generator* generator) {
  Tensor out = empty_like(t);
  uniform_(out, 0.0, 1.0, generator);
  return out;
}

Tensor randn_like(const Tensor& t, Generator* generator) {
  Tensor out = empty_like(t);
  normal_(out, 0.0, 1.0, generator);
  return out;
}

// ---- sampling from given probabilities and parameters ------------------------------------------

Tensor bernoulli(const Tensor& p, Generator* generator) {
  TDDP_CHECK(p.defined() && p.is_floating_point(), "bernoulli: expected a floating-point tensor of probabilities");
  NoGradGuard no_grad;
  if (p.numel() > 0) {
    TDDP_CHECK(min(p).item<double>() >= 0 && max(p).item<double>() <= 1,
               "bernoulli: all elements of p must be in [0, 1]");
  }
  return lt(rand_like(p, generator), p).to(p.dtype());
}

const Tensor& bernoulli_(const Tensor& t, double p, Generator* generator) {
  check_sampling_target(t, "bernoulli_");
  TDDP_CHECK(p >= 0 && p <= 1, "bernoulli_: expects 0 <= p <= 1, but got p={}", p);
  NoGradGuard no_grad;
  t.copy_(lt(rand_like(t, generator), p));
  return t;
}

Tensor normal(const Tensor& mean, const Tensor& std, Generator* generator) {
  TDDP_CHECK(mean.defined() && std.defined() && mean.is_floating_point(),
             "normal: expected floating-point mean and std tensors");
  NoGradGuard no_grad;
  if (std.numel() > 0) TDDP_CHECK(min(std).item<double>() >= 0, "normal: expects all elements of std >= 0.0");
  const Shape shape = broadcast_shapes(mean.sizes(), std.sizes(), "normal");
  const Tensor noise = randn(shape, TensorOptions(mean.dtype()).device(mean.device()), generator);
  return add(mean.detach(), mul(std.detach(), noise));
}

Tensor normal(double mean, double std, const Shape& sizes, Generator* generator, TensorOptions options) {
  const Tensor out = empty(sizes, options);
  normal_(out, mean, std, generator);
  return out;
}

namespace {
// One row of multinomial: `count` categories drawn by weight (cumulative sums searched with
// uniform draws), each drawn category's weight zeroed first when not replacing.
void draw_row(std::vector<double> w, int64_t count, bool replacement, Generator& g, int64_t* out) {
  std::vector<double> cumulative(w.size());
  for (int64_t k = 0; k < count; ++k) {
    std::partial_sum(w.begin(), w.end(), cumulative.begin());
    const double u = g.uniform_double() * cumulative.back();
    auto it = std::upper_bound(cumulative.begin(), cumulative.end(), u);
    if (it == cumulative.end()) --it;
    while (w[static_cast<size_t>(it - cumulative.begin())] == 0) --it;  // never a zero-weight category
    const int64_t picked = it - cumulative.begin();
    out[k] = picked;
    if (!replacement) w[static_cast<size_t>(picked)] = 0;
  }
}
}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* generator) {
  TDDP_CHECK(probs.defined() && probs.is_floating_point() && (probs.dim() == 1 || probs.dim() == 2),
             "multinomial: expected a 1-D or 2-D floating-point tensor of probabilities");
  TDDP_CHECK(num_samples > 0, "multinomial: cannot sample n_sample <= 0 samples");
  const Tensor rows = probs.dim() == 1 ? probs.unsqueeze(0) : probs;
  const int64_t n = rows.size(1);
  const std::vector<double> w = rows.detach().to(kCPU).to(kFloat64).contiguous().to_vector<double>();
  std::vector<int64_t> out(static_cast<size_t>(rows.size(0) * num_samples));
  Generator& g = pick(generator);
  std::lock_guard<std::mutex> lock(g.mutex());
  for (int64_t r = 0; r < rows.size(0); ++r) {
    const std::vector<double> row(w.begin() + r * n, w.begin() + (r + 1) * n);
    int64_t positive = 0;
    double total = 0;
    for (double v : row) {
      TDDP_CHECK(std::isfinite(v) && v >= 0, "multinomial: probability tensor contains either inf, nan or element < 0");
      positive += v > 0;
      total += v;
    }
    TDDP_CHECK(total > 0, "multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
    TDDP_CHECK(replacement || num_samples <= positive,
               "multinomial: cannot sample n_sample ({}) > prob_dist.size(-1) without replacement ({} categories "
               "with nonzero probability)",
               num_samples, positive);
    draw_row(row, num_samples, replacement, g, out.data() + r * num_samples);
  }
  const Tensor result = from_vector(out, Shape{rows.size(0), num_samples}, probs.device());
  return probs.dim() == 1 ? result.squeeze(0) : result;
}

}  // namespace tinyddp::tensor
