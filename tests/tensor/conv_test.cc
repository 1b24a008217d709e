// conv2d, pooling and batch_norm against PyTorch (fixtures/make_conv_fixtures.py: forward and
// every gradient, float64), dropout's statistics, and the errors for bad arguments.
#include <cmath>
#include <limits>

#include "tests/test_util.h"
#include "tinyddp/autograd/autograd.h"

using namespace tinyddp::tensor;

namespace {

const std::map<std::string, std::vector<double>>& fixture() {
  static const auto values = tinyddp::testing::load_fixture("tests/tensor/fixtures/conv_reference.txt");
  return values;
}

Tensor value(const std::string& name, const Shape& shape) {
  const auto it = fixture().find(name);
  if (it == fixture().end()) throw std::runtime_error("conv_reference.txt has no entry " + name);
  return from_vector<double>(it->second, shape);
}

// One fixture case: named inputs with their shapes; grads for those in `with_grad`.
struct Case {
  std::string name;
  std::map<std::string, Tensor> args;

  Case(std::string case_name, const std::vector<std::pair<std::string, Shape>>& shapes) : name(std::move(case_name)) {
    for (const auto& [arg, shape] : shapes) args[arg] = value(name + "_" + arg, shape).requires_grad_();
  }
  const Tensor& operator[](const std::string& arg) const { return args.at(arg); }

  // Runs backward from `out` with PyTorch's grad_out and compares output and every gradient.
  void check(const Tensor& out) const {
    INFO(name);
    const Tensor expected = value(name + "_out", out.sizes());
    CHECK(allclose(out, expected, 1e-10, 1e-12));
    out.backward(value(name + "_grad_out", out.sizes()));
    for (const auto& [arg, t] : args) {
      INFO(arg);
      REQUIRE(t.grad().defined());
      CHECK(allclose(t.grad(), value(name + "_grad_" + arg, t.sizes()), 1e-10, 1e-12));
    }
  }
};

}  // namespace

TEST_CASE("conv2d equals PyTorch: forward, grad_input, grad_weight, grad_bias", "[conv]") {
  {
    Case c("conv_mixed", {{"input", {2, 4, 7, 6}}, {"weight", {6, 2, 3, 2}}, {"bias", {6}}});
    c.check(conv2d(c["input"], c["weight"], c["bias"], {2, 1}, {1, 0}, {1, 2}, 2));
  }
  {
    Case c("conv_pad1", {{"input", {2, 1, 8, 8}}, {"weight", {4, 1, 3, 3}}, {"bias", {4}}});
    c.check(conv2d(c["input"], c["weight"], c["bias"], 1, 1));
  }
  {
    Case c("conv_pad1_multi", {{"input", {2, 5, 4, 4}}, {"weight", {6, 5, 3, 3}}, {"bias", {6}}});
    c.check(conv2d(c["input"], c["weight"], c["bias"], 1, 1));
  }
  {
    Case c("conv_depthwise", {{"input", {2, 3, 5, 5}}, {"weight", {3, 1, 3, 3}}, {"bias", {3}}});
    c.check(conv2d(c["input"], c["weight"], c["bias"], 2, 1, 1, 3));
  }
  {
    Case c("conv_nobias", {{"input", {2, 3, 4, 5}}, {"weight", {4, 3, 1, 1}}});
    c.check(conv2d(c["input"], c["weight"]));
  }
}

TEST_CASE("pooling equals PyTorch, ties going to the first maximum", "[conv]") {
  {
    Case c("maxpool_k2", {{"input", {2, 3, 8, 8}}});
    c.check(max_pool2d(c["input"], 2));
  }
  {
    Case c("maxpool_ties", {{"input", {2, 3, 7, 7}}});
    c.check(max_pool2d(c["input"], 3, Size2d(2), 1));
  }
  {
    Case c("maxpool_dilated", {{"input", {1, 2, 6, 7}}});
    c.check(max_pool2d(c["input"], {2, 3}, Size2d{1, 2}, 0, {2, 1}));
  }
  {
    Case c("avgpool_pad", {{"input", {2, 3, 7, 6}}});
    c.check(avg_pool2d(c["input"], 3, Size2d(2), 1));
  }
  {
    Case c("avgpool_nopadcount", {{"input", {2, 3, 7, 6}}});
    c.check(avg_pool2d(c["input"], 3, Size2d(2), 1, /*count_include_pad=*/false));
  }
  {
    Case c("adaptive_1x1", {{"input", {2, 3, 7, 6}}});
    c.check(adaptive_avg_pool2d(c["input"], 1));
  }
  {
    Case c("adaptive_2x3", {{"input", {2, 2, 4, 6}}});
    c.check(adaptive_avg_pool2d(c["input"], {2, 3}));
  }
  {
    Case c("adaptive_overlap", {{"input", {2, 3, 5, 7}}});  // 5 -> 3 and 7 -> 4: overlapping cells
    c.check(adaptive_avg_pool2d(c["input"], {3, 4}));
  }
}

TEST_CASE("conv2d of an empty batch gives empty results and zero weight gradients, float32 and bfloat16", "[conv]") {
  for (const DType dtype : {kFloat32, kBFloat16}) {
    INFO(dtype_name(dtype));
    // As PyTorch: the gradients of sums over no images are zeros (they were left unwritten).
    const Tensor x = zeros({0, 3, 8, 8}, dtype).requires_grad_(), w = ones({4, 3, 3, 3}, dtype).requires_grad_();
    const Tensor b = ones({4}, dtype).requires_grad_();
    const Tensor out = conv2d(x, w, b, 1, 1);
    CHECK(out.sizes() == Shape{0, 4, 8, 8});
    sum(out).backward();
    CHECK(x.grad().sizes() == Shape{0, 3, 8, 8});
    CHECK(equal(w.grad(), zeros({4, 3, 3, 3}, dtype)));
    CHECK(equal(b.grad(), zeros({4}, dtype)));
  }
}

TEST_CASE("batch_norm equals PyTorch: batch statistics, running-statistics update, eval", "[conv]") {
  for (const auto& [name, shape, momentum] : std::vector<std::tuple<std::string, Shape, double>>{
           {"bn_train4d", {4, 3, 5, 5}, 0.1}, {"bn_train3d", {3, 4, 6}, 0.3}, {"bn_train2d", {5, 6}, 0.1}}) {
    INFO(name);
    const int64_t channels = shape[1];
    Case c(name, {{"input", shape}, {"weight", {channels}}, {"bias", {channels}}});
    const Tensor running_mean = value(name + "_running_mean_before", {channels});
    const Tensor running_var = value(name + "_running_var_before", {channels});
    c.check(batch_norm(c["input"], running_mean, running_var, c["weight"], c["bias"], true, momentum, 1e-5));
    CHECK(allclose(running_mean, value(name + "_running_mean_after", {channels}), 1e-12, 1e-14));
    CHECK(allclose(running_var, value(name + "_running_var_after", {channels}), 1e-12, 1e-14));
  }
  Case c("bn_eval", {{"input", {2, 3, 4, 4}}, {"weight", {3}}, {"bias", {3}}});
  const Tensor running_mean = value("bn_eval_running_mean", {3});
  const Tensor running_var = value("bn_eval_running_var", {3});
  c.check(batch_norm(c["input"], running_mean, running_var, c["weight"], c["bias"], false));
  CHECK(equal(running_mean, value("bn_eval_running_mean", {3})));  // eval leaves them alone
}

TEST_CASE("unbatched [C, H, W] inputs give [C', OH, OW]", "[conv]") {
  Generator gen(5);
  const Tensor x = randn({2, 6, 6}, kFloat64, &gen);
  const Tensor w = randn({3, 2, 3, 3}, kFloat64, &gen);
  const Tensor batched = conv2d(x.unsqueeze(0), w, Tensor(), 1, 1);
  CHECK(equal(conv2d(x, w, Tensor(), 1, 1), batched.squeeze(0)));
  CHECK(equal(max_pool2d(x, 2), max_pool2d(x.unsqueeze(0), 2).squeeze(0)));
  CHECK(unfold(x.unsqueeze(0), 3).sizes() == Shape{1, 18, 16});
}

TEST_CASE("dropout zeroes about p of the elements, scales the rest by 1/(1-p), and is the identity in eval", "[conv]") {
  Generator gen(3);
  const Tensor x = ones({100000}, kFloat64);
  const Tensor y = dropout(x, 0.25, true, &gen);
  const std::vector<double> v = y.to_vector<double>();
  int64_t zeros_seen = 0;
  for (double e : v) {
    if (e == 0) {
      ++zeros_seen;
    } else {
      REQUIRE(e == 1.0 / 0.75);
    }
  }
  // Binomial(1e5, 0.25): standard deviation 137; 6 of them is far beyond chance.
  CHECK(std::abs(zeros_seen - 25000) < 6 * 137);
  CHECK(dropout(x, 0.25, false).is_same(x));
  // The same generator state gives the same mask; the gradient is the mask itself.
  Generator g1(9), g2(9);
  const Tensor leaf = randn({50}, kFloat64, &gen).requires_grad_();
  const Tensor out = dropout(leaf, 0.5, true, &g1);
  sum(out).backward();
  CHECK(equal(leaf.grad(), dropout(ones({50}, kFloat64), 0.5, true, &g2)));
}

TEST_CASE("batch_norm: a bfloat16 input with float32 parameters is computed mixed, as its float32 values would be",
          "[conv]") {
  // Autocast's activations into a float32 BatchNorm (PyTorch's CPU kernels take them mixed):
  // statistics and sums in float32 from the 16-bit values, each result rounded once to
  // bfloat16, no float32 copy of the input (the graph's node is the batch norm's own). The
  // reference: the same input's values in float32 through the float32 batch norm, rounded
  // once. The running statistics and the parameters' gradients (sums in double of the same
  // values) agree exactly; the output and the input's gradient within one bfloat16 step.
  Generator gen(11);
  const Tensor values = randn({4, 3, 5, 5}, {}, &gen).mul(3.0).add(1.0).to(kBFloat16);
  const Tensor upstream = randn({4, 3, 5, 5}, {}, &gen).to(kBFloat16);
  const Tensor w0 = randn({3}, {}, &gen), b0 = randn({3}, {}, &gen);
  const auto within_a_step = [](const Tensor& got, const Tensor& want) {
    return allclose(got.to(kFloat32), want.to(kBFloat16).to(kFloat32), 1.0 / 128, 0.0);
  };
  for (const bool training : {true, false}) {
    INFO("training " << training);
    struct Run {
      Tensor x, w, b, mean, var, y;
    };
    const auto run = [&](DType dtype) {
      Run r{values.to(dtype).clone().requires_grad_(),
            w0.clone().requires_grad_(),
            b0.clone().requires_grad_(),
            full({3}, 0.25),
            full({3}, 2.0),
            Tensor()};
      r.y = batch_norm(r.x, r.mean, r.var, r.w, r.b, training, 0.1, 1e-5);
      sum(mul(r.y, upstream.to(dtype))).backward();
      return r;
    };
    const Run mixed = run(kBFloat16), wide = run(kFloat32);
    CHECK(mixed.y.dtype() == kBFloat16);
    CHECK(mixed.y.grad_fn()->name() == "NativeBatchNormBackward");
    CHECK(within_a_step(mixed.y, wide.y));
    CHECK(mixed.x.grad().dtype() == kBFloat16);
    CHECK(within_a_step(mixed.x.grad(), wide.x.grad()));
    CHECK(equal(mixed.w.grad(), wide.w.grad()));
    CHECK(equal(mixed.b.grad(), wide.b.grad()));
    CHECK(equal(mixed.mean, wide.mean));
    CHECK(equal(mixed.var, wide.var));
    // create_graph: the formulas from recorded ops give the input's gradient in its dtype too.
    const Tensor x = values.clone().requires_grad_(), w = w0.clone().requires_grad_();
    const Tensor y = batch_norm(x, full({3}, 0.25), full({3}, 2.0), w, b0, training, 0.1, 1e-5);
    const std::vector<Tensor> g = tinyddp::autograd::grad({sum(mul(y, upstream))}, {x, w}, {}, false, true);
    CHECK(g[0].dtype() == kBFloat16);
    CHECK(within_a_step(g[0], wide.x.grad()));
    CHECK(allclose(g[1], wide.w.grad(), 1e-5, 1e-5));
  }
  // A 16-bit input whose vectors mix float32 with its own dtype is refused, naming the vector.
  CHECK_THROWS_WITH(batch_norm(values, full({3}, 0.0), full({3}, 1.0).to(kBFloat16), Tensor(), Tensor(), false),
                    Catch::Contains("expected 'running_var' of dtype float32"));
}

TEST_CASE("conv2d, pooling, batch_norm and dropout: bad arguments get errors naming the op, shapes and expectation",
          "[conv][errors]") {
  using Catch::Contains;
  const Tensor x = randn({2, 4, 5, 5}), w = randn({6, 2, 3, 3});
  CHECK_THROWS_WITH(conv2d(randn({4, 5}), w),
                    Contains("conv2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape [4, 5]"));
  CHECK_THROWS_WITH(conv2d(x, randn({6, 3, 3, 3})),
                    Contains("conv2d: weight of shape [6, 3, 3, 3] with groups=1 expects 3 input channels, but the "
                             "input of shape [2, 4, 5, 5] has 4"));
  CHECK_THROWS_WITH(conv2d(x, w, Tensor(), 1, 0, 1, 3),
                    Contains("conv2d: groups=3 must divide both the input's 4 channels"));
  CHECK_THROWS_WITH(conv2d(x, randn({6, 4, 7, 3})),
                    Contains("conv2d: the kernel (7, 3) (dilated to (7, 3)) is larger than the padded input (5, 5)"));
  CHECK_THROWS_WITH(conv2d(x, randn({6, 4, 3, 3}), Tensor(), 1, 0, 3),
                    Contains("conv2d: the kernel (3, 3) (dilated to (7, 7)) is larger than the padded input"));
  CHECK_THROWS_WITH(conv2d(x, randn({6, 4, 3, 3}), randn({5})),
                    Contains("conv2d: expected bias of shape [6], got [5]"));
  CHECK_THROWS_WITH(conv2d(x, randn({6, 4, 3, 3}, kFloat64)), Contains("conv2d"));
  CHECK_THROWS_WITH(conv2d(x, randn({6, 4, 3, 3}), Tensor(), 0),
                    Contains("conv2d: stride must be positive, got (0, 0)"));
  CHECK_THROWS_WITH(max_pool2d(x, 6), Contains("max_pool2d: the kernel (6, 6) (dilated to (6, 6)) is larger than the "
                                               "padded input (5, 5) (input shape [2, 4, 5, 5], padding (0, 0))"));
  CHECK_THROWS_WITH(max_pool2d(x, 2, Size2d(2), 2),
                    Contains("max_pool2d: padding (2, 2) must be at most half of the kernel size (2, 2)"));
  CHECK_THROWS_WITH(avg_pool2d(zeros({2, 3, 4, 4}, kInt64), 2),
                    Contains("avg_pool2d: expected a floating-point input"));
  CHECK_THROWS_WITH(adaptive_avg_pool2d(x, {0, 2}),
                    Contains("adaptive_avg_pool2d: output_size must be positive, got (0, 2)"));
  CHECK_THROWS_WITH(
      batch_norm(randn({1, 3}), zeros({3}), ones({3}), Tensor(), Tensor(), true),
      Contains("batch_norm: expected more than 1 value per channel when training, got input of shape [1, 3]"));
  CHECK_THROWS_WITH(
      batch_norm(x, zeros({3}), ones({3})),
      Contains(
          "batch_norm: expected 'running_mean' of shape [4] (the input's channels, dim 1 of [2, 4, 5, 5]), got [3]"));
  CHECK_THROWS_WITH(dropout(x, 1.5), Contains("dropout: probability p must be in [0, 1), got 1.5"));
  CHECK_THROWS_WITH(dropout(x, -0.1), Contains("dropout: probability p must be in [0, 1), got -0.1"));
  CHECK_THROWS_WITH(dropout(x, 1.0), Contains("dropout: probability p must be in [0, 1), got 1 (p = 1 would zero"));
}

TEST_CASE("conv2d over a batch larger than one im2col chunk equals the images one by one", "[conv]") {
  // Columns are made ~256 KB of images at a time; up to 8 MB for the whole batch they are kept
  // for the backward, beyond that recomputed there chunk by chunk. float64, 3x3 taps:
  // [8, 4, 16, 16] has 74 KB of columns per image (3 chunks of 3, 3 and 2 images, kept);
  // [3, 8, 128, 128] 9.4 MB per image (3 chunks of one, recomputed).
  const Shape shape = GENERATE(Shape{8, 4, 16, 16}, Shape{3, 8, 128, 128});
  INFO("input shape " << format_shape(shape));
  const int64_t n_images = shape[0], channels = shape[1], size = shape[2];
  Generator gen(8);
  const Tensor x = randn(shape, kFloat64, &gen).requires_grad_();
  const Tensor w = randn({4, channels, 3, 3}, kFloat64, &gen).requires_grad_();
  const Tensor b = randn({4}, kFloat64, &gen).requires_grad_();
  const Tensor g = randn({n_images, 4, size, size}, kFloat64, &gen);
  const Tensor out = conv2d(x, w, b, 1, 1);
  out.backward(g);
  const Tensor gx = x.grad(), gw = w.grad(), gb = b.grad();
  x.mutable_grad() = w.mutable_grad() = b.mutable_grad() = Tensor();
  for (int64_t n = 0; n < n_images; ++n) {
    INFO("image " << n);
    const Tensor one = conv2d(x.narrow(0, n, 1), w, b, 1, 1);
    CHECK(allclose(one, out.narrow(0, n, 1), 1e-12, 1e-12));
    one.backward(g.narrow(0, n, 1));
  }
  CHECK(allclose(x.grad(), gx, 1e-12, 1e-12));
  CHECK(allclose(w.grad(), gw, 1e-10, 1e-10));
  CHECK(allclose(b.grad(), gb, 1e-10, 1e-10));
  // The same gradient laid out [H, W, N, O] (not contiguous as [N, O, H, W]) gives the same
  // gradients (the backward reads a contiguous grad_out in place, chunk by chunk).
  x.mutable_grad() = w.mutable_grad() = b.mutable_grad() = Tensor();
  conv2d(x, w, b, 1, 1).backward(g.permute({2, 3, 0, 1}).contiguous().permute({2, 3, 0, 1}));
  CHECK(allclose(x.grad(), gx, 1e-12, 1e-12));
  CHECK(allclose(w.grad(), gw, 1e-10, 1e-10));
  CHECK(allclose(b.grad(), gb, 1e-10, 1e-10));
}

TEST_CASE("conv2d on small float32 feature maps (the direct kernel) equals the float64 im2col route", "[conv]") {
  // float32, stride 1, one group, at most 64 output positions and at least 8 input channels go
  // through cpu::conv2d_direct (and the input's gradient too when the input channels are a
  // multiple of 8); float64 always takes im2col + GEMM. The cases cover 1 to 4 vectors of
  // output channels (8 to 40, with a 32-channel block then an 8-channel one), position tails,
  // 1x1 to 5x5 kernels, paddings 0 to 2, non-square maps, no bias, and shapes outside the
  // direct kernel's reach (12 output channels, 4 input channels, 81 positions). Same-size maps
  // of 16, 32 or 64 positions take the position-vector kernels under either instruction set;
  // run with TINYDDP_CPU_ISA=avx2 too (cpu_isa_test compares the two on the digits shape).
  struct Shapes {
    Shape input, weight;
    int64_t padding;
    bool bias;
  };
  const Shapes s =
      GENERATE(Shapes{{5, 16, 4, 4}, {32, 16, 3, 3}, 1, true}, Shapes{{3, 8, 3, 5}, {8, 8, 3, 3}, 1, true},
               Shapes{{2, 12, 5, 5}, {24, 12, 5, 5}, 2, true}, Shapes{{2, 8, 6, 6}, {40, 8, 1, 1}, 0, false},
               Shapes{{2, 16, 4, 4}, {16, 16, 3, 3}, 0, true}, Shapes{{2, 8, 4, 4}, {12, 8, 3, 3}, 1, true},
               Shapes{{2, 4, 4, 4}, {8, 4, 3, 3}, 1, true}, Shapes{{2, 8, 9, 9}, {8, 8, 3, 3}, 1, true},
               // Same-size maps whose positions fill whole vectors (the position-vector kernels):
               // rows of 12 that straddle vectors, 5x5 and 1x1 kernels, rows of 2 and of 8.
               Shapes{{2, 8, 4, 12}, {16, 8, 3, 3}, 1, true}, Shapes{{3, 8, 8, 8}, {8, 8, 5, 5}, 2, false},
               Shapes{{2, 16, 2, 8}, {24, 16, 1, 1}, 0, true}, Shapes{{2, 8, 8, 2}, {8, 8, 3, 3}, 1, true},
               // Larger same-size maps: the position-vector kernels under AVX-512 (rows of 16,
               // rows of 20 that straddle vectors, and 32x32 maps whose weight gradient takes
               // the images in passes of 3), im2col + GEMM under AVX2.
               Shapes{{2, 8, 16, 16}, {16, 8, 3, 3}, 1, true}, Shapes{{1, 16, 12, 20}, {8, 16, 3, 3}, 1, false},
               Shapes{{4, 8, 32, 32}, {8, 8, 3, 3}, 1, true});
  INFO("input " << format_shape(s.input) << ", weight " << format_shape(s.weight) << ", padding " << s.padding);
  Generator gen(21);
  const Tensor x = randn(s.input, kFloat64, &gen), w = randn(s.weight, kFloat64, &gen);
  const Tensor b = s.bias ? randn({s.weight[0]}, kFloat64, &gen) : Tensor();
  const int64_t oh = s.input[2] + 2 * s.padding - s.weight[2] + 1, ow = s.input[3] + 2 * s.padding - s.weight[3] + 1;
  const Tensor g = randn({s.input[0], s.weight[0], oh, ow}, kFloat64, &gen);
  struct Run {
    Tensor out, gx, gw, gb;
  };
  const auto run = [&](DType dtype) {
    const Tensor xd = x.to(dtype).requires_grad_(), wd = w.to(dtype).requires_grad_();
    const Tensor bd = s.bias ? b.to(dtype).requires_grad_() : Tensor();
    const Tensor out = conv2d(xd, wd, bd, 1, s.padding);
    out.backward(g.to(dtype));
    return Run{out.to(kFloat64), xd.grad().to(kFloat64), wd.grad().to(kFloat64),
               s.bias ? bd.grad().to(kFloat64) : Tensor()};
  };
  const Run single = run(kFloat32), reference = run(kFloat64);
  CHECK(allclose(single.out, reference.out, 1e-5, 1e-4));
  CHECK(allclose(single.gx, reference.gx, 1e-5, 1e-4));
  CHECK(allclose(single.gw, reference.gw, 1e-5, 1e-3));
  if (s.bias) CHECK(allclose(single.gb, reference.gb, 1e-5, 1e-3));
}
