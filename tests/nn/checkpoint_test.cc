// One-file training checkpoints (nn/checkpoint.h): what they restore (weights, optimizer
// state, step, extra state, the random stream), what they refuse, that a writer killed
// mid-write leaves the previous checkpoint loadable, and that dead writers' temporaries go.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/nn/nn_test_util.h"

namespace t = tinyddp::tensor;
namespace nn = tinyddp::nn;
namespace fs = std::filesystem;
using Catch::Contains;
using tinyddp::testing::temp_path;

namespace {

// A few SGD steps with momentum, so that the optimizer has state.
void train_steps(nn::Module& model, nn::Optimizer& optimizer, int steps) {
  for (int i = 0; i < steps; ++i) {
    optimizer.zero_grad();
    t::Tensor loss = t::mean(t::pow(model.forward(t::randn({8, 4})), 2.0));
    loss.backward();
    optimizer.step();
  }
}

std::vector<float> flat_parameters(const nn::Module& m) {
  std::vector<float> all;
  for (const t::Tensor& p : m.parameters()) {
    const std::vector<float> v = p.detach().contiguous().to_vector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

std::vector<std::string> temporaries_of(const std::string& path) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path())) {
    if (e.path().filename().string().rfind(fs::path(path).filename().string() + ".tmp.", 0) == 0) {
      found.push_back(e.path().string());
    }
  }
  return found;
}

}  // namespace

TEST_CASE("checkpoint: a resumed run continues exactly where the saved one was", "[nn][checkpoint]") {
  const std::string path = temp_path("resume.ckpt");
  t::manual_seed(1);
  auto model = nn::mlp({4, 6, 3});
  nn::SGD optimizer(model->parameters(), nn::SGDOptions(0.1).momentum(0.9));
  train_steps(*model, optimizer, 3);
  nn::OrderedDict<t::Tensor> extra;
  extra.insert("scheduler.last_epoch", t::scalar_tensor(3, t::kInt64));
  nn::save_checkpoint(path, *model, optimizer, 3, extra, {{"run", "test"}});
  train_steps(*model, optimizer, 4);  // the uninterrupted run: 4 more steps
  const std::vector<float> expected = flat_parameters(*model);

  t::manual_seed(99);  // another process: other weights, other random stream
  auto again = nn::mlp({4, 6, 3});
  nn::SGD optimizer2(again->parameters(), nn::SGDOptions(0.1).momentum(0.9));
  const nn::TrainingCheckpoint c = nn::load_checkpoint(path, *again, optimizer2);
  CHECK(c.step == 3);
  CHECK(c.metadata.at("run") == "test");
  CHECK(c.extra.at("scheduler.last_epoch").item<int64_t>() == 3);
  train_steps(*again, optimizer2, 4);  // same momentum and same batches (the random stream came back)
  CHECK(flat_parameters(*again) == expected);
}

TEST_CASE("checkpoint: wrong files and wrong models are refused, nothing changes", "[nn][checkpoint][errors]") {
  const std::string path = temp_path("refuse.ckpt");
  t::manual_seed(2);
  auto model = nn::mlp({4, 6, 3});
  nn::SGD sgd(model->parameters(), nn::SGDOptions(0.1).momentum(0.9));
  train_steps(*model, sgd, 1);
  nn::save_checkpoint(path, *model, sgd, 1);

  auto other = nn::mlp({4, 5, 3});
  nn::SGD other_sgd(other->parameters(), nn::SGDOptions(0.1));
  const std::vector<float> before = flat_parameters(*other);
  const std::string state_before = t::default_generator().get_state();
  CHECK_THROWS_WITH(nn::load_checkpoint(path, *other, other_sgd), Contains("(from " + path + ")"));
  CHECK(flat_parameters(*other) == before);
  CHECK(t::default_generator().get_state() == state_before);

  auto same = nn::mlp({4, 6, 3});
  nn::Adam adam(same->parameters(), nn::AdamOptions(0.01));
  CHECK_THROWS_WITH(nn::load_checkpoint(path, *same, adam), Contains("holds SGD state, the optimizer is Adam"));

  const std::string weights = temp_path("weights_only.safetensors");
  nn::save_state_dict(*model, weights);
  CHECK_THROWS_WITH(nn::load_checkpoint(weights, *same, sgd),
                    Contains("is not a training checkpoint (no 'tinyddp_checkpoint'"));

  // A truncated file is named as such by the safetensors reader.
  const std::string cut = temp_path("cut.ckpt");
  fs::copy_file(path, cut, fs::copy_options::overwrite_existing);
  fs::resize_file(cut, fs::file_size(cut) - 7);
  CHECK_THROWS_WITH(nn::load_checkpoint(cut, *same, sgd), Contains(cut));
  CHECK_THROWS_WITH(t::Generator().set_state("garbage"), Contains("not a generator state"));
}

TEST_CASE("checkpoint: a writer killed mid-write leaves the previous checkpoint, and its temporary is removed",
          "[nn][checkpoint][faults]") {
  const std::string dir = temp_path("killed_writer");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/ck.st";
  // A model of about 64 MB, so that one write takes long enough to be interrupted.
  auto model = nn::mlp({2048, 2048, 2048, 2048, 10});
  nn::SGD sgd(model->parameters(), nn::SGDOptions(0.1));
  nn::save_checkpoint(path, *model, sgd, 7);
  const uintmax_t complete_size = fs::file_size(path);

  int interrupted = 0;
  for (int attempt = 0; attempt < 8 && interrupted < 3; ++attempt) {
    const pid_t writer = ::fork();
    REQUIRE(writer >= 0);
    if (writer == 0) {
      try {
        for (int step = 8; step < 1000; ++step) nn::save_checkpoint(path, *model, sgd, step);
      } catch (...) {
      }
      ::_exit(0);
    }
    // Kill it once its temporary exists and is partly written (bounded wait).
    const std::string temporary = path + ".tmp." + std::to_string(writer);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    bool partial = false;
    while (std::chrono::steady_clock::now() < deadline) {
      std::error_code error;
      const uintmax_t size = fs::file_size(temporary, error);
      if (!error && size > 0 && size < complete_size) {
        partial = true;
        break;
      }
    }
    ::kill(writer, SIGKILL);
    int status = 0;
    ::waitpid(writer, &status, 0);
    if (partial && fs::exists(temporary)) ++interrupted;
    // Whatever happened, the checkpoint at `path` is a whole one.
    auto loaded = nn::mlp({2048, 2048, 2048, 2048, 10});
    nn::SGD loaded_sgd(loaded->parameters(), nn::SGDOptions(0.1));
    const std::vector<std::string> left = temporaries_of(path);
    if (partial) CHECK(!left.empty());  // the dead writer's partial file is still there ...
    const nn::TrainingCheckpoint c = nn::load_checkpoint(path, *loaded, loaded_sgd);
    CHECK(c.step >= 7);
    CHECK(temporaries_of(path).empty());  // ... until the next load (or save) removes it
  }
  CHECK(interrupted >= 1);

  // A live writer's temporary is kept: this test's parent process is alive.
  const std::string live = path + ".tmp." + std::to_string(::getppid());
  std::ofstream(live) << "partial";
  const std::string dead = path + ".tmp.999999999";  // beyond the largest pid
  std::ofstream(dead) << "partial";
  const std::vector<std::string> removed = nn::remove_stale_checkpoint_temporaries(path);
  CHECK(removed == std::vector<std::string>{dead});
  CHECK(fs::exists(live));
  fs::remove_all(dir);
}
