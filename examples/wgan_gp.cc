// A Wasserstein GAN with gradient penalty (WGAN-GP) trained with DDP, written as a PyTorch user
// would write it: a generator MLP maps uniform noise to points in the plane, a critic MLP
// (LeakyReLU) scores points, and the data are eight modes on a circle. Each critic step adds
// the penalty lambda * mean((|grad_x critic(x_hat)|_2 - 1)^2) at points x_hat between real and
// generated ones: the gradient comes from autograd::grad with create_graph, and the critic's
// backward then runs through that gradient's own graph (double backward). Both models are DDP
// models: every rank draws its own batches (a generator seeded seed + 1 + rank), and DDP
// averages the gradients, the penalty's second-order part included. Rank 0 writes each step's
// losses (--metrics) and, at the end, how close the generated points came to the modes.
// tests/examples/wgan_gp_test.cc holds a run to PyTorch's DDP run of the same script
// (tests/examples/fixtures/make_wgan_gp_fixture.py) step by step.
//   bazel run -c opt //examples:wgan_gp                     (forks 2 ranks)
//   launch --nproc_per_node 2 -- bazel-bin/examples/wgan_gp --steps 500
#include <CLI/CLI.hpp>
#include <cmath>

#include "examples/example_util.h"
#include "tinyddp/autograd/autograd.h"
#include "tinyddp/comm/comm.h"
#include "tinyddp/ddp/distributed.h"

namespace t = tinyddp::tensor;
using namespace tinyddp;
using tensor::Tensor;

namespace {

constexpr int kModes = 8;
constexpr double kRadius = 2.0, kJitter = 0.1;

struct Config {
  int64_t steps = 1000, critic_iters = 5, batch_size = 64, latent = 2, hidden = 64, log_every = 100;
  double lr = 1e-4, lambda_gp = 10.0;
  uint64_t seed = 1337;
  int nproc = 2;
  std::string metrics, save;
};

std::shared_ptr<nn::Sequential> make_generator(const Config& c) {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(c.latent, c.hidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(c.hidden, c.hidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(c.hidden, 2)});
}

std::shared_ptr<nn::Sequential> make_critic(const Config& c) {
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(2, c.hidden), std::make_shared<nn::LeakyReLU>(0.2),
      std::make_shared<nn::Linear>(c.hidden, c.hidden), std::make_shared<nn::LeakyReLU>(0.2),
      std::make_shared<nn::Linear>(c.hidden, 1)});
}

// A batch of real points [B, 2]: a mode k = floor(8 u) on the circle of radius 2, moved by up
// to 0.05 in each coordinate (u and the moves uniform, from `gen`).
Tensor real_batch(int64_t batch, t::Generator& gen) {
  const std::vector<float> u = t::rand({batch}, {}, &gen).to_vector<float>();
  const std::vector<float> jitter = t::rand({batch, 2}, {}, &gen).to_vector<float>();
  std::vector<float> points;
  for (int64_t i = 0; i < batch; ++i) {
    const int k = std::min(kModes - 1, static_cast<int>(std::floor(static_cast<double>(u[i]) * kModes)));
    const double angle = 2.0 * M_PI * k / kModes;
    points.push_back(static_cast<float>(kRadius * std::cos(angle) + kJitter * (jitter[2 * i] - 0.5)));
    points.push_back(static_cast<float>(kRadius * std::sin(angle) + kJitter * (jitter[2 * i + 1] - 0.5)));
  }
  return t::from_vector(points, t::Shape{batch, 2});
}

// Noise [B, latent], uniform in [-1, 1).
Tensor noise(const Config& c, t::Generator& gen) { return t::rand({c.batch_size, c.latent}, {}, &gen) * 2.0 - 1.0; }

// The mean distance of `points` [N, 2] to the nearest mode.
double distance_to_modes(const Tensor& points) {
  const std::vector<float> p = points.contiguous().to_vector<float>();
  double total = 0;
  for (size_t i = 0; i < p.size(); i += 2) {
    double nearest = 1e30;
    for (int k = 0; k < kModes; ++k) {
      const double angle = 2.0 * M_PI * k / kModes;
      nearest = std::min(nearest, std::hypot(p[i] - kRadius * std::cos(angle), p[i + 1] - kRadius * std::sin(angle)));
    }
    total += nearest;
  }
  return total / static_cast<double>(p.size() / 2);
}

struct CriticStep {
  Tensor loss, penalty, wasserstein;
};

// One critic step: the Wasserstein estimate mean D(real) - mean D(fake), and the gradient
// penalty at random points between them, whose backward is a double backward.
CriticStep critic_step(ddp::DistributedDataParallel& generator, ddp::DistributedDataParallel& critic,
                       nn::Optimizer& optimizer, const Config& c, t::Generator& gen) {
  const Tensor real = real_batch(c.batch_size, gen);
  const Tensor z = noise(c, gen);
  const Tensor alpha = t::rand({c.batch_size, 1}, {}, &gen);
  Tensor fake;
  {
    t::NoGradGuard no_grad;  // the generator is not trained here
    fake = generator(z);
  }
  optimizer.zero_grad();
  const Tensor d_real = t::mean(critic(real)), d_fake = t::mean(critic(fake));
  const Tensor mixed = (alpha * real + (1.0 - alpha) * fake).requires_grad_();
  const Tensor grad = autograd::grad({t::sum(critic(mixed))}, {mixed}, {}, std::nullopt, /*create_graph=*/true)[0];
  const Tensor penalty = t::mean(t::pow(t::norm(grad, 2.0, {1}) - 1.0, 2.0));
  const Tensor loss = d_fake - d_real + penalty * c.lambda_gp;
  loss.backward();
  optimizer.step();
  return {loss.detach(), penalty.detach(), (d_real - d_fake).detach()};
}

int train(int rank, const Config& c) {
  auto pg = comm::init_from_env();
  t::manual_seed(c.seed);  // every rank builds the same models (DDP would broadcast rank 0's anyway)
  auto g = make_generator(c);
  auto d = make_critic(c);
  ddp::DistributedDataParallel generator(g, pg), critic(d, pg);
  nn::Adam opt_g(g->parameters(), nn::AdamOptions(c.lr).betas(0.5, 0.9));
  nn::Adam opt_d(d->parameters(), nn::AdamOptions(c.lr).betas(0.5, 0.9));
  t::Generator gen(c.seed + 1 + static_cast<uint64_t>(rank));
  std::FILE* metrics = rank == 0 && !c.metrics.empty() ? std::fopen(c.metrics.c_str(), "w") : nullptr;
  if (metrics) std::fprintf(metrics, "step,phase,loss,penalty,wasserstein\n");
  for (int64_t step = 0; step < c.steps; ++step) {
    CriticStep last;
    for (int64_t i = 0; i < c.critic_iters; ++i) {
      last = critic_step(generator, critic, opt_d, c, gen);
      if (metrics) {
        std::fprintf(metrics, "%lld,critic,%.9g,%.9g,%.9g\n", static_cast<long long>(step), last.loss.item<double>(),
                     last.penalty.item<double>(), last.wasserstein.item<double>());
      }
    }
    // The generator step: raise the critic's score of generated points.
    const Tensor z = noise(c, gen);
    opt_g.zero_grad();
    const Tensor loss_g = -t::mean(critic(generator(z)));
    loss_g.backward();
    opt_g.step();
    if (metrics) std::fprintf(metrics, "%lld,generator,%.9g,,\n", static_cast<long long>(step), loss_g.item<double>());
    if (rank == 0 && (step % c.log_every == 0 || step + 1 == c.steps)) {
      fmt::print("step {}: critic loss {:.4f} (penalty {:.4f}), Wasserstein estimate {:.4f}, generator loss {:.4f}\n",
                 step, last.loss.item<double>(), last.penalty.item<double>(), last.wasserstein.item<double>(),
                 loss_g.item<double>());
      std::fflush(stdout);
    }
  }
  if (metrics) std::fclose(metrics);
  if (rank == 0) {
    t::NoGradGuard no_grad;
    t::Generator sample_gen(c.seed);
    const Tensor samples = (*g)(t::rand({1024, c.latent}, {}, &sample_gen) * 2.0 - 1.0);
    fmt::print("generated points: mean distance to the nearest mode {:.3f} (real data: {:.3f})\n",
               distance_to_modes(samples), distance_to_modes(real_batch(1024, sample_gen)));
    if (!c.save.empty()) {
      nn::OrderedDict<Tensor> state;
      for (const auto& [name, v] : g->state_dict()) state.insert("generator." + name, v);
      for (const auto& [name, v] : d->state_dict()) state.insert("critic." + name, v);
      nn::save_safetensors(c.save, state);
    }
  }
  std::fflush(stdout);
  pg->barrier()->wait();
  comm::destroy_process_group();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"Train a WGAN-GP on eight modes in the plane with DDP (2 ranks unless launched)."};
  app.add_option("--steps", c.steps, "generator steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--critic_iters", c.critic_iters, "critic steps per generator step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--batch_size", c.batch_size, "points per rank and step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--latent", c.latent)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--hidden", c.hidden)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--lr", c.lr, "Adam's rate (betas 0.5, 0.9), both models")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--lambda_gp", c.lambda_gp, "the gradient penalty's weight")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", c.seed)->capture_default_str();
  app.add_option("--log_every", c.log_every)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--nproc", c.nproc, "ranks to fork when not under the launcher")->capture_default_str();
  app.add_option("--metrics", c.metrics, "write rank 0's step,phase,loss,penalty,wasserstein as CSV");
  app.add_option("--save", c.save, "write both final state dicts (safetensors, generator. and critic.)");
  CLI11_PARSE(app, argc, argv);
  return examples::run_ranks("wgan_gp", c.nproc, [&](int rank) { return train(rank, c); });
}
