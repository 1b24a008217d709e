// Packed sequences against PyTorch's (fixtures/make_packed_sequence_fixture.py): packing and
// unpacking exactly (integer values), and LSTM, GRU and RNN on packed batches in float64 (1e-12:
// the same roundings up to summation order): packed and padded outputs, final states and every
// gradient, sorted, unsorted (PyTorch's permutation of the states), equal lengths, projected,
// bidirectional and stacked. Also: packed equals padded when every sequence is full length, a
// sequence packed alone equals it run alone, finite differences through packing, the errors.
#include <nlohmann/json.hpp>

#include "tests/nn/json_fixture.h"
#include "tests/nn/nn_test_util.h"
#include "tinyddp/autograd/gradcheck.h"
#include "tinyddp/nn/packed_sequence.h"
#include "tinyddp/nn/rnn.h"
#include "tinyddp/nn/rnn_layer.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;

namespace {

using tinyddp::testing::check_close;
using tinyddp::testing::doubles;
using tinyddp::testing::make_rnn;

const nlohmann::json& reference() {
  static const nlohmann::json ref = tinyddp::testing::read_nn_json_fixture("packed_sequence_reference.json");
  return ref;
}

std::vector<int64_t> longs(const Tensor& x) { return x.to(tensor::kInt64).to_vector<int64_t>(); }

// The module's (packed output, h_n, c_n) through its typed forward (c_n undefined but for LSTM).
std::tuple<PackedSequence, Tensor, Tensor> run_packed(RNNBase& module, const PackedSequence& packed,
                                                      const std::vector<Tensor>& initial) {
  if (auto* lstm = dynamic_cast<LSTM*>(&module)) {
    std::optional<std::tuple<Tensor, Tensor>> hx;
    if (!initial.empty()) hx = std::make_tuple(initial[0], initial[1]);
    auto [out, states] = lstm->forward(packed, hx);
    return {out, std::get<0>(states), std::get<1>(states)};
  }
  const Tensor h0 = initial.empty() ? Tensor() : initial[0];
  auto [out, h_n] = module.type_name() == "GRU" ? dynamic_cast<GRU&>(module).forward(packed, h0)
                                                : dynamic_cast<RNN&>(module).forward(packed, h0);
  return {out, h_n, Tensor()};
}

}  // namespace

TEST_CASE("pack_padded_sequence, pad_packed_sequence and pack_sequence as PyTorch's", "[nn][rnn][packed][fixture]") {
  const nlohmann::json& ref = reference()["packing"];
  const Tensor x = doubles(ref["x"], ref["x_shape"].get<tensor::Shape>());
  for (const char* name : {"sorted", "unsorted", "batch_first"}) {
    INFO(name);
    const nlohmann::json& c = ref[name];
    const bool batch_first = c["batch_first"];
    const Tensor src = batch_first ? x.narrow(0, 0, 3).narrow(1, 0, 2) : x;
    const std::vector<int64_t> lengths = c["lengths"];
    const PackedSequence p = pack_padded_sequence(src, tensor::from_vector(lengths), batch_first, c["enforce_sorted"]);
    CHECK(tensor::equal(p.data(), doubles(c["data"], c["data_shape"].get<tensor::Shape>())));
    CHECK(p.batch_sizes().dtype() == tensor::kInt64);
    CHECK(longs(p.batch_sizes()) == c["batch_sizes"].get<std::vector<int64_t>>());
    if (c["sorted_indices"].is_null()) {
      CHECK_FALSE(p.sorted_indices().defined());
      CHECK_FALSE(p.unsorted_indices().defined());
    } else {
      CHECK(longs(p.sorted_indices()) == c["sorted_indices"].get<std::vector<int64_t>>());
      CHECK(longs(p.unsorted_indices()) == c["unsorted_indices"].get<std::vector<int64_t>>());
    }
    const auto [padded, padded_lengths] = pad_packed_sequence(p, batch_first, -1.0, 6);
    CHECK(tensor::equal(padded, doubles(c["padded"], c["padded_shape"].get<tensor::Shape>())));
    CHECK(longs(padded_lengths) == c["padded_lengths"].get<std::vector<int64_t>>());
  }
  const nlohmann::json& c = ref["pack_sequence"];
  std::vector<Tensor> sequences;
  int64_t k = 0;
  for (const int64_t n : c["lengths"].get<std::vector<int64_t>>()) {
    sequences.push_back(tensor::arange(n * 2, tensor::kFloat64).reshape({n, 2}) + 10.0 * static_cast<double>(k++));
  }
  const PackedSequence p = pack_sequence(sequences, /*enforce_sorted=*/false);
  CHECK(tensor::equal(p.data(), doubles(c["data"], p.data().sizes())));
  CHECK(longs(p.batch_sizes()) == c["batch_sizes"].get<std::vector<int64_t>>());
  CHECK(longs(p.sorted_indices()) == c["sorted_indices"].get<std::vector<int64_t>>());
  const std::vector<Tensor> back = unpack_sequence(p);
  REQUIRE(back.size() == sequences.size());
  for (size_t j = 0; j < back.size(); ++j) CHECK(tensor::equal(back[j], sequences[j]));
}

TEST_CASE("LSTM, GRU, RNN on packed batches equal PyTorch's in float64: outputs, final states, every gradient",
          "[nn][rnn][packed][fixture]") {
  for (const auto& [name, c] : reference()["cases"].items()) {
    INFO(name);
    const auto module = make_rnn(c["kind"], c["kwargs"]);
    tinyddp::testing::load_float64_state(*module, c["state"]);
    const Tensor x = doubles(c["x"], c["x_shape"].get<tensor::Shape>()).requires_grad_();
    std::vector<Tensor> initial;
    for (size_t k = 0; k < c["initial"].size(); ++k) {
      initial.push_back(doubles(c["initial"][k], c["initial_shapes"][k].get<tensor::Shape>()).requires_grad_());
    }
    const bool batch_first = c["kwargs"].value("batch_first", false);
    const PackedSequence packed =
        pack_padded_sequence(x, c["lengths"].get<std::vector<int64_t>>(), batch_first, c["enforce_sorted"]);
    const auto [out, h_n, c_n] = run_packed(*module, packed, initial);
    CHECK(out.data().sizes() == c["packed_out_shape"].get<tensor::Shape>());
    check_close(out.data(), c["packed_out"]);
    const auto [padded, lengths] = pad_packed_sequence(out, batch_first);
    CHECK(padded.sizes() == c["padded_shape"].get<tensor::Shape>());
    CHECK(longs(lengths) == c["out_lengths"].get<std::vector<int64_t>>());
    std::vector<Tensor> results{padded, h_n};
    if (c_n.defined()) results.push_back(c_n);
    REQUIRE(results.size() == c["finals"].size() + 1);
    check_close(padded, c["padded"]);
    Tensor loss = tensor::zeros({}, tensor::kFloat64);
    for (size_t k = 0; k < results.size(); ++k) {
      if (k > 0) check_close(results[k], c["finals"][k - 1]);
      loss = loss + tensor::sum(results[k] * doubles(c["grad_weights"][k], results[k].sizes()));
    }
    loss.backward();
    check_close(x.grad(), c["grad_x"]);
    for (size_t k = 0; k < initial.size(); ++k) check_close(initial[k].grad(), c["grad_initial"][k]);
    for (const auto& [key, p] : module->named_parameters()) {
      INFO(key);
      check_close(p.grad(), c["grads"][key]);
    }
  }
}

TEST_CASE("Packed runs agree with unpacked ones: full lengths as the padded batch, each sequence as itself alone",
          "[nn][rnn][packed]") {
  tensor::Generator gen(5);
  LSTM lstm(3, 4, /*num_layers=*/2, true, false, 0.0, /*bidirectional=*/true);
  lstm.to(tensor::kFloat64);
  const Tensor x = tensor::randn({4, 3, 3}, tensor::kFloat64, &gen);
  const auto [full, full_states] = lstm.forward(x, std::nullopt);
  const auto [packed, packed_states] = lstm.forward(pack_padded_sequence(x, std::vector<int64_t>{4, 4, 4}));
  CHECK(tensor::allclose(std::get<0>(pad_packed_sequence(packed)), full, 1e-12, 1e-12));
  CHECK(tensor::allclose(std::get<0>(packed_states), std::get<0>(full_states), 1e-12, 1e-12));
  CHECK(tensor::allclose(std::get<1>(packed_states), std::get<1>(full_states), 1e-12, 1e-12));
  // Sequence 1 of length 2, packed among others, is the unbatched run over its own 2 steps:
  // its reversed direction starts at its last element, not at the padding.
  const auto [mixed, mixed_states] =
      lstm.forward(pack_padded_sequence(x, std::vector<int64_t>{4, 2, 3}, false, /*enforce_sorted=*/false));
  const auto [alone, alone_states] = lstm.forward(x.narrow(0, 0, 2).select(1, 1), std::nullopt);
  const Tensor padded = std::get<0>(pad_packed_sequence(mixed));
  CHECK(tensor::allclose(padded.select(1, 1).narrow(0, 0, 2), alone, 1e-12, 1e-12));
  CHECK(tensor::equal(padded.select(1, 1).narrow(0, 2, 2), tensor::zeros({2, 8}, tensor::kFloat64)));
  CHECK(tensor::allclose(std::get<0>(mixed_states).select(1, 1), std::get<0>(alone_states), 1e-12, 1e-12));
}

TEST_CASE("Packing and packed recurrences against finite differences", "[nn][rnn][packed][gradcheck]") {
  tensor::Generator gen(6);
  const auto randn = [&](const tensor::Shape& s) {
    return (tensor::randn(s, tensor::kFloat64, &gen) * 0.5).requires_grad_();
  };
  const std::vector<int64_t> lengths{2, 4, 1};
  GRU gru(3, 2, 1, true, /*batch_first=*/true, 0.0, /*bidirectional=*/true);
  gru.to(tensor::kFloat64);
  const auto f = [&](const std::vector<Tensor>& v) {
    const auto [out, h_n] = gru.forward(pack_padded_sequence(v[0], lengths, true, false), v[1]);
    return tensor::cat({std::get<0>(pad_packed_sequence(out, true, 0.5)).flatten(), h_n.flatten()});
  };
  CHECK(autograd::gradcheck(f, {randn({3, 4, 3}), randn({2, 3, 2})}) == "");
  // The masked recurrences a packed batch runs on (rnn_layer.h), and their own gradients
  // (create_graph runs the masked steps recorded).
  using Inputs = std::vector<Tensor>;
  const Tensor mask = tensor::lt(tensor::arange(4, tensor::kInt64).reshape({-1, 1, 1}),
                                 tensor::tensor({4, 2, 1}).reshape({1, -1, 1}));  // [T 4, N 3, 1]
  const Tensor x = randn({4, 3, 2}), h0 = randn({3, 2}), c0 = randn({3, 2});
  for (const bool reverse : {false, true}) {
    INFO("reverse " << reverse);
    const Tensor w8 = randn({8, 2}), u8 = randn({8, 2}), b8 = randn({8}), v8 = randn({8});
    const auto lstm = [&](const Inputs& v) {
      return lstm_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], reverse, mask);
    };
    CHECK(autograd::gradcheck(lstm, {x, h0, c0, w8, u8, b8, v8}) == "");
    CHECK(autograd::gradgradcheck(lstm, {x, h0, c0, w8, u8, b8, v8}) == "");
    const Tensor w6 = randn({6, 2}), u6 = randn({6, 2}), b6 = randn({6}), v6 = randn({6});
    const auto gru = [&](const Inputs& v) { return gru_layer(v[0], v[1], v[2], v[3], v[4], v[5], reverse, mask); };
    CHECK(autograd::gradcheck(gru, {x, h0, w6, u6, b6, v6}) == "");
    CHECK(autograd::gradgradcheck(gru, {x, h0, w6, u6, b6, v6}) == "");
    const auto rnn = [&](const Inputs& v) {
      return rnn_layer(v[0], v[1], v[2], v[3], v[4], v[5], reverse, "tanh", mask);
    };
    CHECK(autograd::gradcheck(rnn, {x, h0, randn({2, 2}), randn({2, 2}), randn({2}), randn({2})}) == "");
    const Tensor p = randn({1, 2});  // a projection to 1
    const auto projected = [&](const Inputs& v) {
      const auto [hs, c] = lstm_projected_layer(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], reverse, mask);
      return tensor::cat({hs.flatten(), c.flatten()});
    };
    CHECK(autograd::gradcheck(projected, {x, randn({3, 1}), c0, w8, randn({8, 1}), b8, v8, p}) == "");
  }
}

TEST_CASE("Packed sequences refuse what PyTorch refuses, by name", "[nn][rnn][packed][errors]") {
  const Tensor x = tensor::zeros({4, 3, 2});
  CHECK_THROWS_WITH(pack_padded_sequence(x, std::vector<int64_t>{2, 4, 1}),
                    Contains("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True"));
  CHECK_THROWS_WITH(pack_padded_sequence(x, std::vector<int64_t>{4, 0, 0}, false, false),
                    Contains("Length of all samples has to be greater than 0"));
  CHECK_THROWS_WITH(pack_padded_sequence(x, std::vector<int64_t>{4, 1}),
                    Contains("Expected `len(lengths)` to be equal to batch_size, but got 2 (batch_size=3)"));
  CHECK_THROWS_WITH(pack_padded_sequence(x, std::vector<int64_t>{5, 1, 1}),
                    Contains("a length of 5 exceeds the input's 4 time steps"));
  CHECK_THROWS_WITH(pack_padded_sequence(x, tensor::tensor({4.0, 2.0, 1.0})),
                    Contains("'lengths' should be a 1-D integer tensor"));
  const PackedSequence p = pack_padded_sequence(x, std::vector<int64_t>{4, 2, 1});
  CHECK_THROWS_WITH(pad_packed_sequence(p, false, 0.0, 3),
                    Contains("Expected total_length to be at least the length of the longest sequence in input, but "
                             "got total_length=3 and max sequence length being 4"));
  LSTM lstm(2, 3);
  CHECK_THROWS_WITH(lstm.forward(p, std::make_tuple(tensor::zeros({1, 2, 3}), tensor::zeros({1, 3, 3}))),
                    Contains("LSTM: expected h0 of shape [1, 3, 3], got [1, 2, 3]"));
  LSTM wide(5, 3);
  CHECK_THROWS_WITH(wide.forward(p), Contains("LSTM: input.size(-1) must be equal to input_size: expected 5, got 2"));
  CHECK_THROWS_WITH(PackedSequence(tensor::zeros({3, 2}), tensor::tensor({2.0, 1.0})),
                    Contains("batch_sizes should be a 1-D int64 tensor on the CPU"));
}
