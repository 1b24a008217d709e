// DDP against PyTorch's DDP, scenario by scenario. fixtures/make_ddp_fixtures.py ran each
// scenario through torch.nn.parallel.DistributedDataParallel on 2 or 3 gloo ranks and wrote
// the per-rank programs (forward / backward / no_sync / join / step / record ...), the initial
// weights of every rank, the batches, and what PyTorch's ranks held at every "record": each
// parameter, its .grad or "undefined", and the buffer. This test interprets the same programs
// with tinyddp on as many rank threads and compares every record (1e-6; "undefined" exactly).
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tests/comm/comm_test_util.h"
#include "tinyddp/ddp/distributed.h"
#include "tinyddp/nn/nn.h"

using namespace tinyddp;
using namespace tinyddp::ddp;
using comm::ProcessGroup;
using json = nlohmann::json;
using testing::Expectations;
using testing::run_threads;

namespace {

const json& fixtures() {
  static const json data = [] {
    std::ifstream in("tests/ddp/fixtures/ddp_scenarios.json");
    if (!in) throw std::runtime_error("cannot open tests/ddp/fixtures/ddp_scenarios.json");
    return json::parse(in);
  }();
  return data;
}

const json& scenario(const std::string& name) {
  for (const json& s : fixtures()["scenarios"]) {
    if (s["name"] == name) return s;
  }
  throw std::runtime_error("no scenario named " + name + " in the fixture");
}

// The fixture's model: a trunk and three heads; `use` picks the heads the output sums; every
// forward updates the buffer from this rank's output; with `with_aux`, head c also reads the
// detached trunk features into a side output for a second loss.
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> trunk, a, b, c;
  Tensor running;
  std::vector<std::string> use{"a", "b", "c"};
  bool with_aux = false;
  Tensor aux;

  Net(int64_t in, int64_t out) : Module("Net") {
    trunk = register_module("trunk", std::make_shared<nn::Linear>(in, 4));
    a = register_module("a", std::make_shared<nn::Linear>(4, out));
    b = register_module("b", std::make_shared<nn::Linear>(4, out));
    c = register_module("c", std::make_shared<nn::Linear>(4, out));
    running = register_buffer("running", tensor::zeros({out}));
  }
  std::shared_ptr<nn::Linear> head(const std::string& name) const { return name == "a" ? a : name == "b" ? b : c; }
  Tensor forward(const Tensor& x) override {
    const Tensor h = tensor::relu(trunk->forward(x));
    Tensor out;
    for (const std::string& name : use) {
      const Tensor y = head(name)->forward(h);
      out = out.defined() ? tensor::add(out, y) : y;
    }
    aux = with_aux ? c->forward(h.detach()) : Tensor();
    tensor::NoGradGuard no_grad;
    running.mul_(0.5).add_(tensor::mean(out, {0}));
    return out;
  }
};

Tensor from_json(const json& values, const tensor::Shape& shape) {
  return tensor::from_vector(values.get<std::vector<float>>(), shape);
}

// One rank's run of a scenario program.
class Runner {
 public:
  Runner(const json& scenario, int rank, ProcessGroup& pg, Expectations& e)
      : scenario_(scenario), rank_json_(scenario["ranks"][rank]), rank_(rank), e_(e) {
    const json& model = fixtures()["model"];
    in_ = model["in"].get<int64_t>();
    out_ = model["out"].get<int64_t>();
    batch_ = model["batch"].get<int64_t>();
    net_ = std::make_shared<Net>(in_, out_);
    {
      tensor::NoGradGuard no_grad;
      for (const auto& [name, t] : net_->state_dict()) t.copy_(from_json(rank_json_["initial"][name], t.sizes()));
    }
    for (const std::string& name : scenario.value("frozen", std::vector<std::string>{})) {
      net_->named_parameters().at(name).requires_grad_(false);
    }
    const json& o = scenario["ddp"];
    DDPOptions options;
    options.find_unused_parameters(o.value("find_unused_parameters", false))
        .gradient_as_bucket_view(o.value("gradient_as_bucket_view", false))
        .static_graph(o.value("static_graph", false))
        .broadcast_buffers(o.value("broadcast_buffers", true))
        .params_and_buffers_to_ignore(scenario.value("ignore", std::vector<std::string>{}));
    ddp_ = std::make_unique<DistributedDataParallel>(net_, std::shared_ptr<ProcessGroup>(&pg, [](ProcessGroup*) {}),
                                                     options);
    const std::string hook = scenario.value("hook", "");
    if (hook == "allreduce") ddp_->register_comm_hook(hooks::allreduce(ddp_->process_group_ptr()));
    if (hook == "fp16") ddp_->register_comm_hook(hooks::fp16_compress(ddp_->process_group_ptr()));
    if (hook == "bf16") ddp_->register_comm_hook(hooks::bf16_compress(ddp_->process_group_ptr()));
    const json& sgd = fixtures()["optimizer"];
    opt_ = std::make_unique<nn::SGD>(net_->parameters(), nn::SGDOptions(sgd["lr"].get<double>())
                                                             .momentum(sgd["momentum"].get<double>())
                                                             .weight_decay(sgd["weight_decay"].get<double>()));
    const json join = scenario.value("join", json::object());
    join_options_.divide_by_initial_world_size(join.value("divide_by_initial_world_size", true));
  }

  void run(const json& program) {
    for (const json& step : program) {
      const std::string op = step["op"];
      if (op == "forward") {
        const json& batch = rank_json_["batches"][step["batch"].get<size_t>()];
        net_->use = step["use"].get<std::vector<std::string>>();
        net_->with_aux = step.value("aux", false);
        // ("touch" is PyTorch-side only: see make_ddp_fixtures.py, unused_with_no_sync.)
        out_tensor_ = (*ddp_)(from_json(batch[0], {batch_, in_}));
        target_ = from_json(batch[1], {batch_, out_});
      } else if (op == "backward") {
        tensor::mul(nn::mse_loss(out_tensor_, target_), step["scale"].get<double>())
            .backward(Tensor(), step.value("retain", false));
      } else if (op == "backward_aux") {
        tensor::mul(tensor::mean(tensor::mul(net_->aux, net_->aux)), step["scale"].get<double>()).backward();
      } else if (op == "no_sync") {
        auto guard = ddp_->no_sync();
        run(step["body"]);
      } else if (op == "join") {
        ddp_->join([&] { run(step["body"]); }, join_options_);
      } else if (op == "zero_grad") {
        opt_->zero_grad(step["set_to_none"].get<bool>());
      } else if (op == "step") {
        opt_->step();
      } else if (op == "eval") {
        ddp_->eval();
      } else if (op == "train") {
        ddp_->train();
      } else if (op == "record") {
        compare(rank_json_["records"][next_record_++]);
      } else {
        throw std::runtime_error("unknown op " + op);
      }
    }
  }
  size_t records_compared() const { return next_record_; }

 private:
  void compare(const json& expected) {
    const std::string where = fmt::format("{} rank {} at '{}'", scenario_["name"].get<std::string>(), rank_,
                                          expected["label"].get<std::string>());
    for (const auto& [name, p] : net_->named_parameters()) {
      expect_close(p, expected["params"][name], where + ", parameter " + name);
      const json& g = expected["grads"][name];
      if (g.is_null()) {
        e_.expect(!p.grad().defined(), fmt::format("{}: {}.grad is defined, PyTorch's is undefined", where, name));
      } else if (!p.grad().defined()) {
        e_.failures.push_back(fmt::format("{}: {}.grad is undefined, PyTorch's is defined", where, name));
      } else {
        expect_close(p.grad(), g, where + ", gradient of " + name);
      }
    }
    for (const auto& [name, b] : net_->named_buffers())
      expect_close(b, expected["buffers"][name], where + ", buffer " + name);
  }
  void expect_close(const Tensor& actual, const json& expected, const std::string& what) {
    const std::vector<float> mine = actual.contiguous().to_vector<float>();
    const std::vector<float> theirs = expected.get<std::vector<float>>();
    if (mine.size() != theirs.size()) {
      e_.failures.push_back(fmt::format("{}: {} values, PyTorch has {}", what, mine.size(), theirs.size()));
      return;
    }
    for (size_t k = 0; k < mine.size(); ++k) {
      if (std::abs(mine[k] - theirs[k]) > 1e-6 + 1e-6 * std::abs(theirs[k])) {
        e_.failures.push_back(fmt::format("{}[{}] = {:.9g}, PyTorch {:.9g}", what, k, mine[k], theirs[k]));
        return;
      }
    }
  }

  const json& scenario_;
  const json& rank_json_;
  int rank_;
  Expectations& e_;
  int64_t in_ = 0, out_ = 0, batch_ = 0;
  std::shared_ptr<Net> net_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<nn::SGD> opt_;
  JoinOptions join_options_;
  Tensor out_tensor_, target_;
  size_t next_record_ = 0;
};

void run_scenario(const std::string& name) {
  const json& s = scenario(name);
  const int world = s["world"].get<int>();
  std::vector<std::string> failures = run_threads(world, [&](ProcessGroup& pg, Expectations& e) {
    Runner runner(s, pg.rank(), pg, e);
    runner.run(s["ranks"][pg.rank()]["program"]);
    const size_t expected = s["ranks"][pg.rank()]["records"].size();
    e.expect(runner.records_compared() == expected,
             fmt::format("{}: compared {} records of {}", name, runner.records_compared(), expected));
  });
  for (const auto& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
}

}  // namespace

TEST_CASE("the fixture was written by PyTorch's DDP and holds every scenario", "[ddp][pytorch]") {
  const json& f = fixtures();
  CHECK(f["generator"] == "tests/ddp/fixtures/make_ddp_fixtures.py");
  CHECK(f["scenarios"].size() >= 26);
}

#define DDP_SCENARIO(name, description) \
  TEST_CASE("PyTorch scenario " name ": " description, "[ddp][pytorch]") { run_scenario(name); }

DDP_SCENARIO("plain", "2 ranks train as PyTorch's DDP")
DDP_SCENARIO("plain_3_ranks", "3 ranks")
DDP_SCENARIO("plain_bucket_view", "gradient_as_bucket_view on 3 ranks")
DDP_SCENARIO("no_sync_accumulation", "no_sync micro-batches then a synchronised one")
DDP_SCENARIO("find_unused_rank_dependent", "each rank uses other heads")
DDP_SCENARIO("unused_with_no_sync", "a head used only under no_sync keeps its accumulated gradient")
DDP_SCENARIO("unused_with_no_sync_bucket_view", "the same with gradient_as_bucket_view")
DDP_SCENARIO("stale_grad_accumulation", "no zero_grad: an unused parameter's stale .grad is reduced")
DDP_SCENARIO("stale_grad_accumulation_bucket_view", "the same as bucket views: a globally unused .grad survives")
DDP_SCENARIO("second_backward", "a second backward on one rank only accumulates locally")
DDP_SCENARIO("second_backward_find_unused", "the same with find_unused_parameters")
DDP_SCENARIO("eval_mode_backward", "a backward in eval mode synchronises like any other")
DDP_SCENARIO("frozen_parameter", "parameters that do not require grad are broadcast")
DDP_SCENARIO("join_uneven", "Join with uneven inputs: buffers from the highest active rank")
DDP_SCENARIO("join_uneven_divide_by_active", "Join dividing by the active ranks")
DDP_SCENARIO("join_uneven_find_unused", "Join with find_unused_parameters")
DDP_SCENARIO("discarded_forward", "a forward without backward marks nothing used")
DDP_SCENARIO("split_backward", "one forward's gradients over two backward calls")
DDP_SCENARIO("no_sync_in_join", "no_sync inside join while a rank has joined")
DDP_SCENARIO("static_rank_dependent", "static_graph with a rank-dependent fixed graph")
DDP_SCENARIO("ignored_parameters", "params_and_buffers_to_ignore")
DDP_SCENARIO("buffers_and_no_sync", "buffers broadcast only after a synchronised forward")
DDP_SCENARIO("no_buffer_broadcast", "broadcast_buffers off")
DDP_SCENARIO("hook_allreduce", "the allreduce hook registered explicitly on 3 ranks")
DDP_SCENARIO("hook_fp16", "fp16 compression")
DDP_SCENARIO("hook_bf16", "bf16 compression")
