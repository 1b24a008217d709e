// The selection ops (tensor/native/select.cc: clamp, where, index_select, gather, one_hot) and
// stack and min beside them, against PyTorch (fixtures/make_select_fixtures.py writes
// select_reference.txt): forward and gradients in float64, where both sides make the same
// few roundings (1e-12 leaves room for an ulp, none for a wrong formula); a float64 gradcheck
// of each differentiable one; integers; and the errors PyTorch gives.
#include <functional>
#include <set>

#include "tests/test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/tensor/all.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::autograd::gradcheck;
using Inputs = std::vector<Tensor>;

namespace {

const std::map<std::string, std::vector<double>>& reference() {
  static const auto values = tinyddp::testing::load_fixture("tests/tensor/fixtures/select_reference.txt");
  return values;
}

Tensor value(const std::string& name, const Shape& shape, DType dtype = kFloat64) {
  const auto it = reference().find(name);
  if (it == reference().end()) throw std::runtime_error("select_reference.txt has no entry " + name);
  return from_vector<double>(it->second, shape).to(dtype);
}

Tensor leaf(const std::string& name, const Shape& shape) { return value(name, shape).requires_grad_(); }

void check_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  CHECK(allclose(got.to(kFloat64), want, 1e-12, 1e-12));
}

Tensor random(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, TensorOptions(kFloat64), &g).requires_grad_();
}

}  // namespace

TEST_CASE("stack joins along a new dim as torch.stack, gradients split back", "[tensor][select]") {
  const Tensor a = leaf("stack1_a", {2, 3}), b = leaf("stack1_b", {2, 3}), c = leaf("stack1_c", {2, 3});
  const Tensor out = stack({a, b, c}, 1);
  check_close(out, value("stack1_out", {2, 3, 3}));
  out.backward(value("stack1_grad_out", {2, 3, 3}));
  check_close(a.grad(), value("stack1_grad_a", {2, 3}));
  check_close(c.grad(), value("stack1_grad_c", {2, 3}));
  const Tensor p = leaf("stack_last_a", {4}), q = leaf("stack_last_b", {4});
  const Tensor last = stack({p, q}, -1);
  check_close(last, value("stack_last_out", {4, 2}));
  last.backward(value("stack_last_grad_out", {4, 2}));
  check_close(q.grad(), value("stack_last_grad_b", {4}));
  CHECK(gradcheck(
            [](const Inputs& v) {
              return stack({v[0], v[1]}, 0);
            },
            {random({2, 3}, 1), random({2, 3}, 2)}) == "");
  CHECK_THROWS_WITH(stack({zeros({2, 3}), zeros({2, 4})}),
                    Contains("stack: expects each tensor to be equal size, but got [2, 3] at entry 0 and [2, 4] at "
                             "entry 1"));
  CHECK_THROWS_WITH(stack({zeros({2})}, 2), Contains("stack"));
}

TEST_CASE("clamp as torch.clamp: both bounds, one, crossed; the gradient passes on the bounds", "[tensor][select]") {
  using Bound = std::optional<double>;
  const std::vector<std::tuple<std::string, Bound, Bound>> cases = {{"clamp_both", -0.5, 0.5},
                                                                    {"clamp_min", 0.1, std::nullopt},
                                                                    {"clamp_max", std::nullopt, -0.2},
                                                                    {"clamp_crossed", 0.3, -0.3}};
  for (const auto& [c, lo, hi] : cases) {
    INFO(c);
    const Tensor x = leaf(c + "_x", {4, 5});
    const Tensor out = clamp(x, lo, hi);
    check_close(out, value(c + "_out", {4, 5}));
    out.backward(value(c + "_grad_out", {4, 5}));
    check_close(x.grad(), value(c + "_grad_x", {4, 5}));
  }
  CHECK(gradcheck([](const Inputs& v) { return clamp(v[0], -0.3, 0.4); }, {random({3, 4}, 3)}) == "");
  const Tensor nan = from_vector<double>({std::nan(""), 2.0, -2.0}, Shape{3});
  const Tensor clamped = clamp(nan, -1.0, 1.0);
  CHECK(std::isnan(clamped[0].item<double>()));
  CHECK(clamped[1].item<double>() == 1.0);
  const Tensor ints = from_vector<int64_t>({-5, 0, 9}, Shape{3});
  CHECK(equal(clamp(ints, -1.0, 3.0), from_vector<int64_t>({-1, 0, 3}, Shape{3})));
  CHECK_THROWS_WITH(clamp(ints, std::nullopt, std::nullopt), Contains("clamp: at least one of min and max"));
}

TEST_CASE("where as torch.where: broadcasting, promotion, gradients to each side", "[tensor][select]") {
  const Tensor cond = from_vector<int64_t>({1, 0, 1}, Shape{3, 1}).to(kBool);
  const Tensor a = leaf("where_grad_a", {3, 4}), b = leaf("where_grad_b", {4});
  const Tensor out = where(cond, a, b);
  check_close(out, value("where_grad_out", {3, 4}));
  out.backward(value("where_grad_grad_out", {3, 4}));
  check_close(a.grad(), value("where_grad_grad_a", {3, 4}));
  check_close(b.grad(), value("where_grad_grad_b", {4}));
  CHECK(gradcheck([&](const Inputs& v) { return where(cond, v[0], v[1]); }, {random({3, 4}, 4), random({4}, 5)}) == "");
  // An inf or NaN on the side not taken does not leak; float32 and float64 promote.
  const Tensor inf = full({3, 4}, INFINITY, TensorOptions(kFloat32));
  const Tensor picked = where(cond, ones({3, 4}, TensorOptions(kFloat32)), inf.to(kFloat64));
  CHECK(picked.dtype() == kFloat64);
  CHECK(picked[0][0].item<double>() == 1.0);
  CHECK(std::isinf(picked[1][0].item<double>()));
  CHECK_THROWS_WITH(where(ones({3}), ones({3}), ones({3})), Contains("where: expected a bool condition"));
}

TEST_CASE("min and argmin as torch's: all elements, along a dim, ties, int64 extremes", "[tensor][select]") {
  const Tensor x = leaf("min_all_x", {3, 4});
  const Tensor all = min(x);
  check_close(all, value("min_all_out", {}));
  all.backward(value("min_all_grad_out", {}));
  check_close(x.grad(), value("min_all_grad_x", {3, 4}));  // two equal minima share it
  const Tensor y = leaf("min_dim1_x", {3, 4});
  const auto [values, indices] = min(y, 1);
  check_close(values, value("min_dim1_out", {3}));
  CHECK(equal(indices, value("min_dim1_indices", {3}, kInt64)));  // the first of a tie
  values.backward(value("min_dim1_grad_out", {3}));
  check_close(y.grad(), value("min_dim1_grad_x", {3, 4}));
  check_close(std::get<0>(min(y.detach(), 0, true)), value("min_dim0_keepdim", {1, 4}));
  CHECK(argmin(y.detach()).item<int64_t>() == static_cast<int64_t>(value("argmin_all", {}).item<double>()));
  CHECK(equal(argmin(y.detach(), 0), value("argmin_dim0", {4}, kInt64)));
  const Tensor ints = from_vector<int64_t>({5, INT64_MIN, 7, 0, 3, -2}, Shape{2, 3});
  CHECK(equal(std::get<0>(min(ints, 1)).to(kFloat64), value("min_int_dim1", {2})));
  CHECK(gradcheck([](const Inputs& v) { return std::get<0>(min(v[0], 0)); }, {random({3, 4}, 6)}) == "");
}

TEST_CASE("index_select and gather as torch's: repeats add gradients; integers; bad indices", "[tensor][select]") {
  const Tensor x = leaf("index_select_grad_x", {4, 5, 3});
  const Tensor idx = from_vector<int64_t>({3, 0, 3, 1}, Shape{4});
  const Tensor out = index_select(x, 1, idx);
  check_close(out, value("index_select_grad_out", {4, 4, 3}));
  out.backward(value("index_select_grad_grad_out", {4, 4, 3}));
  check_close(x.grad(), value("index_select_grad_grad_x", {4, 5, 3}));
  const Tensor ints = mul(arange(12, TensorOptions(kInt64)).view({4, 3}), 1000003.0);
  const Tensor picked = index_select(ints, 0, from_vector<int64_t>({2, 2, 0}, Shape{3}));
  CHECK(picked.dtype() == kInt64);
  CHECK(equal(picked.to(kFloat64), value("index_select_int_out", {3, 3})));
  CHECK(gradcheck([&](const Inputs& v) { return index_select(v[0], 0, idx); }, {random({5, 2}, 7)}) == "");

  for (const auto& [c, d, index_shape] :
       {std::tuple<std::string, int64_t, Shape>{"gather1", 1, {3, 2}}, {"gather0", 0, {2, 4}}}) {
    INFO(c);
    const Tensor src = leaf(c + "_x", {3, 4});
    const Tensor index = d == 1 ? from_vector<int64_t>({3, 0, 1, 1, 2, 3}, index_shape)
                                : from_vector<int64_t>({2, 0, 1, 2, 0, 0, 2, 1}, index_shape);
    const Tensor g = gather(src, d, index);
    check_close(g, value(c + "_out", index_shape));
    g.backward(value(c + "_grad_out", index_shape));
    check_close(src.grad(), value(c + "_grad_x", {3, 4}));
    CHECK(gradcheck([&](const Inputs& v) { return gather(v[0], d, index); }, {random({3, 4}, 8)}) == "");
  }
  // Rows of a host tensor with no gradient to record are copied as they are: the values of the
  // recorded path, for a strided index, an empty one, int32 indices, bools and a 0-d tensor.
  const Tensor table = random({6, 2, 3}, 9);
  const Tensor strided = from_vector<int64_t>({5, 9, 0, 9, 5, 9, 3, 9}, Shape{4, 2}).select(1, 0);
  const Tensor traced = table.detach().requires_grad_(true);
  for (const Tensor& rows : {strided, strided.to(kInt32), from_vector<int64_t>({}, Shape{0})}) {
    const Tensor copied = index_select(table, 0, rows), recorded = index_select(traced, 0, rows);
    CHECK(recorded.requires_grad());
    CHECK(copied.sizes() == recorded.sizes());
    CHECK(equal(copied, recorded.detach()));
  }
  CHECK(equal(index_select(table, 0, strided).select(0, 0), table.select(0, 5)));  // the ids 5, 0, 5, 3
  CHECK(equal(index_select(table, 0, strided).select(0, 3), table.select(0, 3)));
  CHECK(equal(index_select(gt(table, 0.0), 0, strided).to(kFloat32),
              gt(index_select(table, 0, strided), 0.0).to(kFloat32)));
  CHECK(index_select(full({}, 7.0), 0, from_vector<int64_t>({0}, Shape{1})).item<double>() == 7.0);
  const Tensor m = zeros({3, 4});
  CHECK_THROWS_WITH(index_select(m, 0, from_vector<int64_t>({3}, Shape{1})),
                    Contains("index_select: index 3 is out of range for dim 0 of size 3"));
  CHECK_THROWS_WITH(index_select(m, 1, from_vector<int64_t>({-1}, Shape{1})),
                    Contains("index_select: index -1 is out of range for dim 1 of size 4"));
  CHECK_THROWS_WITH(index_select(m, 0, ones({1})),
                    Contains("index_select: expected an int64 or int32 index, got dtype float32"));
  CHECK_THROWS_WITH(gather(m, 1, zeros({4, 1}, TensorOptions(kInt64))),
                    Contains("gather: index of shape [4, 1] is larger than x of shape [3, 4] in dim 0"));
  CHECK_THROWS_WITH(gather(m, 1, zeros({3}, TensorOptions(kInt64))), Contains("gather: index has 1 dims, x has 2"));
}

TEST_CASE("one_hot as torch.nn.functional.one_hot", "[tensor][select]") {
  const Tensor ids = from_vector<int64_t>({0, 3, 1, 2, 2, 0}, Shape{2, 3});
  const Tensor five = one_hot(ids, 5);
  CHECK(five.dtype() == kInt64);
  CHECK(equal(five.to(kFloat64), value("one_hot5", {2, 3, 5})));
  CHECK(equal(one_hot(ids).to(kFloat64), value("one_hot_inferred", {2, 3, 4})));
  CHECK_THROWS_WITH(one_hot(ids, 3), Contains("one_hot: index 3 is out of range for dim 0 of size 3"));
  CHECK_THROWS_WITH(one_hot(zeros({2}, TensorOptions(kInt64)), 0),
                    Contains("one_hot: index 0 is out of range for dim 0 of size 0"));
}

TEST_CASE("cumsum as torch.cumsum: along a dim, past one block, integers; gradients", "[tensor][select]") {
  for (const auto& [c, shape, dim] : {std::tuple<std::string, Shape, int64_t>{"cumsum1", {3, 5}, 1},
                                      {"cumsum0", {4, 2}, 0},
                                      {"cumsum_long", {2, 300}, 1}}) {
    INFO(c);
    const Tensor x = leaf(c + "_x", shape);
    const Tensor out = cumsum(x, dim);
    check_close(out, value(c + "_out", shape));
    out.backward(value(c + "_grad_out", shape));
    check_close(x.grad(), value(c + "_grad_x", shape));
  }
  const Tensor ints = from_vector<int64_t>({3, -1, 4, 1, 5, -9}, Shape{2, 3});
  const Tensor summed = cumsum(ints, 1);
  CHECK(summed.dtype() == kInt64);
  CHECK(equal(summed.to(kFloat64), value("cumsum_int", {2, 3})));
  CHECK(gradcheck([](const Inputs& v) { return cumsum(v[0], 0); }, {random({5, 3}, 11)}) == "");
}

TEST_CASE("topk as torch.topk: largest and smallest, gradients, NaN and ties", "[tensor][select]") {
  for (const auto& [c, largest] : {std::pair<std::string, bool>{"topk_largest", true}, {"topk_smallest", false}}) {
    INFO(c);
    const Tensor x = leaf(c + "_x", {3, 6});
    const auto [values, indices] = topk(x, 3, 1, largest);
    check_close(values, value(c + "_values", {3, 3}));
    CHECK(equal(indices, value(c + "_indices", {3, 3}, kInt64)));
    values.backward(value(c + "_grad_out", {3, 3}));
    check_close(x.grad(), value(c + "_grad_x", {3, 6}));
  }
  // NaN first among the largest and never among the smallest; the two -inf ties in some order.
  const Tensor y = from_vector<double>({2.0, std::nan(""), -1.0, -INFINITY, -INFINITY, 5.0}, Shape{6});
  const std::vector<int64_t> order = std::get<1>(topk(y, 6)).to_vector<int64_t>();
  const std::vector<double> want = value("topk_nan_largest", {6}).to_vector<double>();
  for (size_t i = 0; i < 4; ++i) CHECK(order[i] == static_cast<int64_t>(want[i]));
  CHECK(std::set<int64_t>{order[4], order[5]} == std::set<int64_t>{3, 4});
  CHECK(equal(std::get<0>(topk(y, 5, 0, false)), value("topk_nan_smallest_values", {5})));
  CHECK(gradcheck([](const Inputs& v) { return std::get<0>(topk(v[0], 2, 0)); }, {random({5, 3}, 12)}) == "");
  CHECK_THROWS_WITH(topk(y, 7), Contains("topk: selected index k (7) out of range for dim 0 of size 6"));
}

TEST_CASE("index_add and scatter_add as torch's: repeats add up; gradients to x and the source", "[tensor][select]") {
  const Tensor x = leaf("index_add_x", {3, 4, 2}), s = leaf("index_add_s", {3, 3, 2});
  const Tensor idx = from_vector<int64_t>({2, 0, 2}, Shape{3});
  const Tensor out = index_add(x, 1, idx, s, 0.5);
  check_close(out, value("index_add_out", {3, 4, 2}));
  out.backward(value("index_add_grad_out", {3, 4, 2}));
  check_close(x.grad(), value("index_add_grad_x", {3, 4, 2}));
  check_close(s.grad(), value("index_add_grad_s", {3, 3, 2}));
  for (const auto& [c, d, x_shape, s_shape, index] :
       {std::tuple<std::string, int64_t, Shape, Shape, Tensor>{
            "scatter_add1", 1, {3, 5}, {2, 3}, from_vector<int64_t>({3, 0, 3, 1, 1, 2}, Shape{2, 3})},
        {"scatter_add0", 0, {3, 3}, {3, 2}, from_vector<int64_t>({2, 0, 2, 1, 0, 0}, Shape{3, 2})}}) {
    INFO(c);
    const Tensor base = leaf(c + "_x", x_shape), src = leaf(c + "_s", s_shape);
    const Tensor summed = scatter_add(base, d, index, src);
    check_close(summed, value(c + "_out", x_shape));
    summed.backward(value(c + "_grad_out", x_shape));
    check_close(base.grad(), value(c + "_grad_x", x_shape));
    check_close(src.grad(), value(c + "_grad_s", s_shape));
    CHECK(gradcheck([&](const Inputs& v) { return scatter_add(v[0], d, index, v[1]); },
                    {random(x_shape, 13), random(s_shape, 14)}) == "");
  }
  // A src larger than the index: only the part the index covers is added.
  const Tensor wide =
      scatter_add(value("scatter_add_wide_x", {3, 5}), 1, from_vector<int64_t>({3, 0, 3, 1, 1, 2}, Shape{2, 3}),
                  value("scatter_add_wide_s", {2, 4}));
  check_close(wide, value("scatter_add_wide_out", {3, 5}));
  CHECK(gradcheck([&](const Inputs& v) { return index_add(v[0], 1, idx, v[1]); },
                  {random({2, 4}, 15), random({2, 3}, 16)}) == "");
  CHECK_THROWS_WITH(index_add(zeros({3, 4}), 1, idx, zeros({3, 2})),
                    Contains("index_add: source of shape [3, 2] for x of shape [3, 4] and 3 indices along dim 1"));
  CHECK_THROWS_WITH(scatter_add(zeros({3, 4}), 1, from_vector<int64_t>({4}, Shape{1, 1}), zeros({1, 1})),
                    Contains("scatter_add: index 4 is out of range for dim 1 of size 4"));
}

TEST_CASE("repeat tiles as torch's Tensor.repeat, unbind slices as torch.unbind; gradients as PyTorch's",
          "[tensor][select]") {
  const Tensor x = leaf("repeat_x", {2, 3});
  const Tensor tiled = repeat(x, {2, 1, 3});
  check_close(tiled, value("repeat_out", {2, 2, 9}));
  tiled.backward(value("repeat_grad_out", {2, 2, 9}));
  check_close(x.grad(), value("repeat_grad_x", {2, 3}));
  CHECK(gradcheck([](const Inputs& v) { return repeat(v[0], {3, 2}); }, {random({2, 2}, 3)}) == "");
  CHECK(repeat(zeros({2, 3}), {0, 1}).sizes() == Shape{0, 3});
  CHECK_THROWS_WITH(repeat(zeros({2, 3}), {2}),
                    Contains("repeat: number of dimensions of repeat dims (1) can not be smaller than number of "
                             "dimensions of tensor (2)"));
  CHECK_THROWS_WITH(repeat(zeros({2}), {-1}), Contains("repeat: repeats must be non-negative, got [-1]"));

  const Tensor y = leaf("unbind_x", {3, 4});
  const std::vector<Tensor> pieces = unbind(y, 1);
  REQUIRE(pieces.size() == 4);
  CHECK(pieces[2].shares_storage(y));  // views, as torch's
  check_close(stack(pieces, 0), value("unbind_out", {4, 3}));
  Tensor total = zeros({}, kFloat64);
  for (size_t k = 0; k < pieces.size(); ++k) total = add(total, sum(mul(tanh(pieces[k]), double(k + 1))));
  total.backward();
  check_close(y.grad(), value("unbind_grad_x", {3, 4}));
  CHECK(gradcheck([](const Inputs& v) { return mul(unbind(v[0], -1)[1], unbind(v[0], 0)[0]); }, {random({2, 2}, 4)}) ==
        "");
  CHECK_THROWS_WITH(unbind(zeros({}), 0), Contains("unbind: dimension specified as 0 but tensor has no dimensions"));
}

TEST_CASE("sort, argsort, unique, nonzero, masked_select and bincount match PyTorch", "[tensor][select]") {
  const Tensor x = leaf("sort1_x", {3, 5});
  const auto [values, indices] = sort(x, 1);
  // NaN last (row 1); check_close compares NaN as unequal, so the rows apart
  CHECK(std::isnan(values[1][4].item<double>()));
  check_close(values.index_select(0, from_vector<int64_t>({0, 2}, Shape{2})),
              value("sort1_out", {3, 5}).index_select(0, from_vector<int64_t>({0, 2}, Shape{2})));
  CHECK(equal(indices, value("sort1_indices", {3, 5}, kInt64)));
  values.backward(value("sort1_grad_out", {3, 5}));
  check_close(x.grad(), value("sort1_grad_x", {3, 5}));
  const Tensor y = leaf("sort0_desc_x", {3, 5});
  const auto [dvalues, dindices] = y.sort(0, true);
  CHECK(equal(dindices, value("sort0_desc_indices", {3, 5}, kInt64)));
  dvalues.backward(value("sort0_desc_grad_out", {3, 5}));
  check_close(y.grad(), value("sort0_desc_grad_x", {3, 5}));
  CHECK(equal(argsort(from_vector<int64_t>({5, -2, 9, 0, 3}, Shape{5}), 0, true), value("argsort_int", {5}, kInt64)));
  // ties keep their order (stable)
  CHECK(equal(argsort(from_vector<double>({1.0, 0.0, 1.0, 0.0}, Shape{4})),
              from_vector<int64_t>({1, 3, 0, 2}, Shape{4})));

  const auto [u, inverse, counts] = unique(value("unique_x", {2, 3}, kFloat32), true, true, true);
  CHECK(equal(u, value("unique_values", {4}, kFloat32)));
  CHECK(equal(inverse, value("unique_inverse", {2, 3}, kInt64)));
  CHECK(equal(counts, value("unique_counts", {4}, kInt64)));
  // Along a dim: rows of a matrix, columns and last-dim slices of a 3-d int64 tensor.
  for (const auto& [name, shape, dim, out_shape] :
       {std::tuple<std::string, Shape, int64_t, Shape>{"unique_dim0", {5, 3}, 0, {3, 3}},
        {"unique_dim1", {2, 3, 2}, 1, {2, 2, 2}},
        {"unique_dim_last", {2, 3, 2}, -1, {2, 3, 2}}}) {
    INFO(name);
    const DType dtype = dim == 0 ? kFloat32 : kInt64;
    const auto [dv, di, dc] = value(name + "_x", shape, dtype).unique(true, true, true, dim);
    CHECK(equal(dv, value(name + "_values", out_shape, dtype)));
    CHECK(equal(di, value(name + "_inverse", {shape[dim < 0 ? 2 : dim]}, kInt64)));
    CHECK(equal(dc, value(name + "_counts", {out_shape[dim < 0 ? 2 : dim]}, kInt64)));
  }
  CHECK_THROWS_WITH(unique(zeros({2, 3}), true, false, false, 2), Contains("unique: dimension out of range"));
  CHECK(equal(nonzero(value("nonzero_x", {2, 3})), value("nonzero_out", {3, 2}, kInt64)));
  CHECK(nonzero(zeros({2, 3})).sizes() == Shape{0, 2});

  const Tensor m = leaf("masked_select_x", {3, 4});
  const Tensor picked = masked_select(m, from_vector<double>({1, 0, 1, 1}, Shape{4}).ne(0.0));
  check_close(picked, value("masked_select_out", {9}));
  picked.backward(value("masked_select_grad_out", {9}));
  check_close(m.grad(), value("masked_select_grad_x", {3, 4}));

  const Tensor b = value("bincount_x", {6}, kInt64);
  CHECK(equal(bincount(b, Tensor(), 7), value("bincount_out", {7}, kInt64)));
  check_close(b.bincount(value("bincount_w", {6})), value("bincount_weighted", {5}));
  CHECK_THROWS_WITH(bincount(from_vector<int64_t>({1, -1}, Shape{2})),
                    Contains("bincount: input must be non-negative"));
  CHECK_THROWS_WITH(masked_select(zeros({2}), zeros({2})), Contains("masked_select: expected a bool mask"));
}

TEST_CASE("prod and cumprod as torch's: zeros in the input, keepdim, a long dim, integers; gradients",
          "[tensor][select]") {
  for (const auto& [c, shape, out_shape, f] :
       {std::tuple<std::string, Shape, Shape, std::function<Tensor(const Tensor&)>>{
            "prod1", {3, 5}, {3}, [](const Tensor& x) { return prod(x, 1); }},
        {"prod_all", {2, 3}, {}, [](const Tensor& x) { return x.prod(); }},
        {"prod_keep0", {4, 3}, {1, 3}, [](const Tensor& x) { return x.prod(0, /*keepdim=*/true); }},
        {"cumprod1", {3, 6}, {3, 6}, [](const Tensor& x) { return cumprod(x, 1); }},
        {"cumprod0", {5, 2}, {5, 2}, [](const Tensor& x) { return x.cumprod(0); }},
        {"cumprod_long", {2, 40}, {2, 40}, [](const Tensor& x) { return cumprod(x, -1); }}}) {
    INFO(c);
    const Tensor x = leaf(c + "_x", shape);
    const Tensor out = f(x);
    check_close(out, value(c + "_out", out_shape));
    out.backward(value(c + "_grad_out", out_shape));
    check_close(x.grad(), value(c + "_grad_x", shape));
  }
  const Tensor ints = tensor({{3, -1, 4}, {1, 5, -9}});
  CHECK(prod(ints, 1).dtype() == kInt64);
  CHECK(equal(prod(ints, 1).to(kFloat64), value("prod_int", {2})));
  CHECK(equal(cumprod(ints, 1).to(kFloat64), value("cumprod_int", {2, 3})));
  CHECK(prod(zeros({0})).item<float>() == 1.0f);  // the empty product
  CHECK(prod(full({}, 3.0)).item<float>() == 3.0f);
  CHECK(gradcheck([](const Inputs& v) { return prod(v[0], 1); }, {random({3, 7}, 21)}) == "");
  CHECK(gradcheck([](const Inputs& v) { return cumprod(v[0], 0); }, {random({9, 2}, 22)}) == "");
  CHECK_THROWS_WITH(prod(zeros({2, 3}), 2),
                    Contains("prod: dimension out of range (expected to be in range of [-2, 1], but got 2)"));
}

TEST_CASE("scatter as torch.scatter: src or a value along either dim, the last of repeats wins; gradients",
          "[tensor][select]") {
  const Tensor idx1 = tensor({{3, 0, 4}, {1, 2, 0}}), idx0 = tensor({{2, 0, 1}, {1, 2, 0}});
  for (const auto& [c, d, x_shape, index] :
       {std::tuple<std::string, int64_t, Shape, Tensor>{"scatter1", 1, {3, 5}, idx1}, {"scatter0", 0, {3, 3}, idx0}}) {
    INFO(c);
    const Tensor base = leaf(c + "_x", x_shape), src = leaf(c + "_s", {2, 3});
    const Tensor out = scatter(base, d, index, src);
    check_close(out, value(c + "_out", x_shape));
    out.backward(value(c + "_grad_out", x_shape));
    check_close(base.grad(), value(c + "_grad_x", x_shape));
    check_close(src.grad(), value(c + "_grad_s", {2, 3}));
    CHECK(gradcheck([&, d = d, index = index](const Inputs& v) { return scatter(v[0], d, index, v[1]); },
                    {random(x_shape, 23), random({2, 3}, 24)}) == "");
  }
  const Tensor x = leaf("scatter_value_x", {3, 5});
  const Tensor filled = x.scatter(1, idx1, 2.5);
  check_close(filled, value("scatter_value_out", {3, 5}));
  filled.backward(value("scatter_value_grad_out", {3, 5}));
  check_close(x.grad(), value("scatter_value_grad_x", {3, 5}));
  const Tensor repeats = tensor({{1, 3, 1}, {0, 0, 0}});
  check_close(scatter(value("scatter_repeat_x", {2, 4}), 1, repeats, value("scatter_repeat_s", {2, 3})),
              value("scatter_repeat_out", {2, 4}));
  // In place, and integers; the errors name what is wrong.
  const Tensor ints = zeros({2, 3}, kInt64);
  ints.scatter_(1, tensor({2, 0}).unsqueeze(1), 7.0);
  CHECK(ints.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 7, 7, 0, 0});
  CHECK_THROWS_WITH(scatter(zeros({2, 3}), 1, tensor({3, 0}).unsqueeze(1), 1.0), Contains("scatter"));
  CHECK_THROWS_WITH(scatter(zeros({2, 3}), 1, tensor({1, 0}).unsqueeze(1), zeros({2, 1}, kFloat64)),
                    Contains("scatter") && Contains("float64"));
  CHECK_THROWS_WITH(scatter(zeros({2, 3}), 1, tensor({1, 0}), 1.0), Contains("scatter: index (1 dims)"));
}
