// Python's indexing (tensor/indexing.h) against PyTorch (fixtures/make_indexing_fixtures.py):
// values and gradients in float64 for slices (with a step, negative bounds), integers, None,
// the ellipsis, an int64 and a bool tensor index, several at once (advanced indexing), and
// assignments through index_put_ (a slice, a value, a mask, pairs, accumulate with repeats);
// views where PyTorch gives views; float64 gradchecks; and the errors PyTorch gives.
#include "tests/fixture_case.h"
#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/tensor/all.h"

using namespace tinyddp::tensor;
using namespace tinyddp::tensor::indexing;
using Catch::Contains;
using tinyddp::autograd::gradcheck;
using V = std::vector<Tensor>;

namespace {

const tinyddp::testing::Fixture& fixture() {
  static const tinyddp::testing::Fixture f("tests/tensor/fixtures/indexing_reference.txt");
  return f;
}

const Tensor kIdx = tensor({{2, 0}, {1, 2}});
Tensor mask() { return tensor({{1, 0, 1, 0}, {0, 0, 0, 0}, {1, 1, 0, 1}}).to(kBool); }

// x * 1 with `write` applied in place: an assignment through indexing, as the fixture's.
using tinyddp::testing::written_copy;

}  // namespace

TEST_CASE("index reads as Python's x[...]: slices, steps, negatives, None, ellipsis, tensor indices; gradients",
          "[tensor][indexing][fixture]") {
  const auto& f = fixture();
  f.check_case("basic", {{"x", {3, 5}}}, {3, 3}, [](const V& v) { return v[0].index({Slice(), Slice(1, 4)}); });
  f.check_case("step", {{"x", {4, 7}}}, {3, 4}, [](const V& v) {
    return v[0].index({Slice(1, None), Slice(None, None, 2)});
  });
  f.check_case("negative", {{"x", {3, 5}}}, {3}, [](const V& v) { return v[0].index({-1, Slice(-3, None)}); });
  f.check_case("ellipsis_none", {{"x", {2, 3, 4}}}, {2, 3, 1}, [](const V& v) { return v[0].index({"...", 0, None}); });
  f.check_case("positions", {{"x", {3, 4}}}, {3, 2, 2}, [](const V& v) { return v[0].index({Slice(), kIdx}); });
  f.check_case("mask", {{"x", {3, 4, 2}}}, {5, 2}, [](const V& v) { return v[0].index({mask()}); });
  CHECK(gradcheck(
            [](const V& v) {
              return v[0].index({Slice(None, None, 3), Ellipsis, Slice(-2, None)});
            },
            {randn({7, 3, 4}, kFloat64).requires_grad_()}) == "");
}

TEST_CASE("index with several tensor indices as NumPy's advanced indexing: broadcast, adjacent or first; gradients",
          "[tensor][indexing][fixture]") {
  const auto& f = fixture();
  const Tensor rows = tensor({2, 0, 2}), cols = tensor({1, -1, 3});
  const Tensor two_rows = rows.slice(0, 0, 2), two_cols = cols.slice(0, 0, 2);
  f.check_case("pairs", {{"x", {3, 4, 2}}}, {3, 2}, [&](const V& v) { return v[0].index({rows, cols}); });
  f.check_case("broadcast_pairs", {{"x", {3, 4}}}, {3, 2}, [&](const V& v) {
    return v[0].index({rows.unsqueeze(1), tensor({0, 3})});
  });
  f.check_case("middle_pairs", {{"x", {2, 3, 4, 2}}}, {2, 2, 2}, [&](const V& v) {
    return v[0].index({Slice(), two_rows, two_cols});
  });
  f.check_case("apart_pairs", {{"x", {3, 2, 2}}}, {2, 3, 2}, [&](const V& v) {
    return v[0].index({rows, Slice(), tensor({1, 0}).unsqueeze(1)});
  });
  f.check_case("int_and_pairs", {{"x", {2, 3, 2, 4}}}, {3, 2}, [&](const V& v) {
    return v[0].index({1, rows, Slice(), cols});
  });
  f.check_case("mask_and_positions", {{"x", {4, 2}}}, {3}, [&](const V& v) {
    return v[0].index({mask().select(0, 2), tensor({1, 0, 1})});
  });
  f.check_case("mask_scalar", {{"x", {2, 3}}}, {2, 3, 1}, [&](const V& v) {
    return v[0].index({Ellipsis, tensor({1}).to(kBool).reshape({})});
  });
  f.check_case("negative_positions", {{"x", {3, 2}}}, {2, 2}, [&](const V& v) {
    return v[0].index({tensor({-1, 0})});
  });
  f.check_case("put_pairs", {{"x", {3, 4}}, {"v", {2}}}, {3, 4}, [&](const V& v) {
    return written_copy(v[0], [&](const Tensor& y) { y.index_put_({two_rows, two_cols}, v[1]); });
  });
  f.check_case("put_pairs_accumulate", {{"x", {3, 4}}, {"v", {3}}}, {3, 4}, [&](const V& v) {
    return written_copy(v[0], [&](const Tensor& y) { y.index_put_({rows, tensor({1, 3, 1})}, v[1], true); });
  });
  CHECK(gradcheck(
            [&](const V& v) {
              return v[0].index({Slice(), rows, Slice(), two_cols.unsqueeze(1)});
            },
            {randn({2, 3, 2, 4}, kFloat64).requires_grad_()}) == "");
  // Dims left of adjacent indices stay in front; apart, the broadcast shape goes first.
  const Tensor x = arange(120, kFloat32).view({2, 3, 4, 5});
  CHECK(x.index({Slice(), Slice(), two_rows, two_cols}).sizes() == Shape{2, 3, 2});
  CHECK(x.index({Slice(), two_rows, Slice(), two_cols}).sizes() == Shape{2, 2, 4});
  CHECK(x.index({Slice(), two_rows, Slice(), two_cols}).select(0, 1).select(0, 1).to_vector<float>() ==
        x.index({1, 0, Slice(), 4}).to_vector<float>());
}

TEST_CASE("index gives views where Python does, and slice(dim, start, end, step) as libtorch's", "[tensor][indexing]") {
  const Tensor x = arange(24, kFloat32).view({4, 6});
  const Tensor strided = x.index({Slice(1, None, 2), Slice(None, None, 3)});
  CHECK(strided.shares_storage(x));
  CHECK(strided.sizes() == Shape{2, 2});
  CHECK(strided.contiguous().to_vector<float>() == std::vector<float>{6, 9, 18, 21});
  CHECK(x.slice(1, 4).to_vector<float>().size() == 8);
  CHECK(x.slice(0, -10, 100, 3).sizes() == Shape{2, 6});  // bounds clamp as Python's
  CHECK(x.index({Slice(5, 2)}).sizes() == Shape{0, 6});
  CHECK_FALSE(x.index({kIdx.select(0, 0)}).shares_storage(x));  // a tensor index copies
  x.index({Slice(), 0}).fill_(-1);                              // a write through the view
  CHECK(x.select(1, 0).to_vector<float>() == std::vector<float>{-1, -1, -1, -1});
}

TEST_CASE("index_put_ as Python's x[...] = v: a slice, a value, a mask, accumulate; gradients to x and v",
          "[tensor][indexing][fixture]") {
  const auto& f = fixture();
  f.check_case("put_column", {{"x", {3, 5}}, {"v", {3}}}, {3, 5}, [](const V& v) {
    return written_copy(v[0], [&](const Tensor& y) { y.index_put_({Slice(), 0}, v[1]); });
  });
  f.check_case("put_value", {{"x", {4, 7}}}, {4, 7}, [](const V& v) {
    return written_copy(v[0], [](const Tensor& y) { y.index_put_({Slice(1, None), Slice(None, None, 2)}, 0.5); });
  });
  f.check_case("put_mask", {{"x", {3, 4}}, {"v", {5}}}, {3, 4},
               [](const V& v) { return written_copy(v[0], [&](const Tensor& y) { y.index_put_({mask()}, v[1]); }); });
  f.check_case("put_accumulate", {{"x", {4, 3}}, {"v", {3, 3}}}, {4, 3}, [](const V& v) {
    return written_copy(v[0], [&](const Tensor& y) { y.index_put_({tensor({0, 2, 0})}, v[1], /*accumulate=*/true); });
  });
  CHECK(gradcheck(
            [](const V& v) {
              return written_copy(v[0], [&](const Tensor& y) { y.index_put_({Slice(None, None, 2), 1}, v[1]); });
            },
            {randn({5, 3}, kFloat64).requires_grad_(), randn({3}, kFloat64).requires_grad_()}) == "");
  // A leaf that requires grad is refused, as PyTorch; under no_grad it is written in place.
  const Tensor w = zeros({2, 3}).requires_grad_();
  CHECK_THROWS_WITH(w.index_put_({0}, 1.0), Contains("index_put_: a leaf tensor that requires grad"));
  {
    NoGradGuard no_grad;
    w.index_put_({0}, 1.0);
  }
  CHECK(w.to_vector<float>() == std::vector<float>{1, 1, 1, 0, 0, 0});
}

TEST_CASE("index: bad indices are errors that name them", "[tensor][indexing][errors]") {
  const Tensor x = zeros({2, 3});
  CHECK_THROWS_WITH(x.index({0, 0, 0}), Contains("index: too many indices for tensor of dimension 2 (got 3)"));
  CHECK_THROWS_WITH(x.index({5}), Contains("index: index 5 is out of bounds for dimension 0 with size 2"));
  CHECK_THROWS_WITH(x.index({Slice(None, None, 0)}), Contains("slice: step must be greater than zero, got 0"));
  CHECK_THROWS_WITH(x.index({"..", 0}), Contains("a string index must be \"...\""));
  CHECK_THROWS_WITH(x.index({Ellipsis, Ellipsis}), Contains("a single ellipsis"));
  CHECK_THROWS_WITH(x.index({zeros({2})}),
                    Contains("tensors used as indices must be int64, int32, bool or uint8, got float32"));
  CHECK_THROWS_WITH(
      x.index({tensor({1, 0}), tensor({0, 1, 2})}),
      Contains("index: shape mismatch: indexing tensors could not be broadcast together with shapes [2], [3]"));
  CHECK_THROWS_WITH(x.index({tensor({1, 0}), tensor({0, -4})}),
                    Contains("index: index -4 is out of bounds for dimension 1 with size 3"));
  CHECK_THROWS_WITH(x.index({zeros({3}, kBool)}), Contains("the shape of the mask [3] does not match"));
  CHECK_THROWS_WITH(x.index({tensor({0, 2})}), Contains("index: index 2 is out of bounds for dimension 0 with size 2"));
  CHECK_THROWS_WITH(x.index_put_({0}, zeros({2})),
                    Contains("index_put_: values of shape [2] cannot be broadcast to the indexed shape [3]"));
}
