// safetensors tests: round trips of every dtype; files written by the safetensors library
// read with the right values; every kind of damaged file gives a clear error and leaves the
// module untouched; saving is atomic.
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/nn/nn_test_util.h"

using namespace tinyddp;
using namespace tinyddp::nn;
using Catch::Contains;
using tinyddp::testing::nn_fixture;
using tinyddp::testing::temp_path;

namespace {

// Writes a file by hand: 8-byte length, the header text, then `data` bytes.
std::string write_raw(const std::string& name, const std::string& header, const std::string& data,
                      std::optional<uint64_t> declared_length = {}) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = declared_length.value_or(header.size());
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header << data;
  return path;
}

// The bytes of n float32 values 1, 2, ...
std::string float_bytes(int n) {
  std::string bytes(static_cast<size_t>(n) * 4, '\0');
  for (int i = 0; i < n; ++i) {
    const float v = static_cast<float>(i + 1);
    std::memcpy(&bytes[static_cast<size_t>(i) * 4], &v, 4);
  }
  return bytes;
}

}  // namespace

TEST_CASE("every dtype round-trips, with metadata", "[nn][safetensors]") {
  OrderedDict<Tensor> tensors;
  tensors.insert("f32", tensor::randn({2, 3}));
  tensors.insert("f64", tensor::randn({4}, tensor::kFloat64));
  tensors.insert("f16", tensor::randn({3}).to(tensor::kFloat16));
  tensors.insert("bf16", tensor::randn({2, 2}).to(tensor::kBFloat16));
  tensors.insert("i64", tensor::arange(-3, 3));
  tensors.insert("bool", tensor::gt(tensor::randn({5}), 0.0));
  tensors.insert("scalar", tensor::scalar_tensor(2.5));
  tensors.insert("empty", tensor::zeros({0, 3}));
  tensors.insert("strided", tensor::randn({3, 4}).t());  // saved as its logical (contiguous) values
  const std::string path = temp_path("roundtrip.safetensors");
  save_safetensors(path, tensors, {{"note", "hello"}});
  const SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata.at("note") == "hello");
  CHECK(file.metadata.at("format") == "pt");
  CHECK(file.metadata.at("tinyddp_format_version") == "1");
  CHECK(file.tensors.size() == tensors.size());
  for (const auto& [name, original] : tensors) {
    INFO(name);
    const Tensor& loaded = file.tensors.at(name);
    CHECK(loaded.dtype() == original.dtype());
    CHECK(loaded.sizes() == original.sizes());
    CHECK(tensor::equal(loaded, original));
  }
  // The header is padded so that the data starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  CHECK(header_size % 8 == 0);
}

TEST_CASE("files written by the safetensors library load with the right values", "[nn][safetensors][fixture]") {
  const SafetensorsFile file = load_safetensors(nn_fixture("dtypes.safetensors"));
  const auto& t = file.tensors;
  CHECK(t.at("f64").to_vector<double>() == std::vector<double>{1.5, -2.25});
  CHECK(tensor::equal(t.at("f32"), tensor::arange(6, tensor::kFloat32).view({2, 3})));
  const std::vector<tensor::Half> f16 = t.at("f16").to_vector<tensor::Half>();
  CHECK(f16[0].bits == tensor::Half(0.1f).bits);
  CHECK(f16[1].bits == 0x7BFF);
  CHECK(f16[2].bits == 0x8000);
  CHECK(t.at("bf16").to_vector<tensor::BFloat16>()[0].bits == tensor::BFloat16(1.0f / 3.0f).bits);
  CHECK(t.at("i64").to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3, int64_t{1} << 40});
  CHECK(t.at("bool").to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(t.at("scalar").dim() == 0);
  CHECK(t.at("scalar").item<float>() == 3.5f);
  CHECK(t.at("empty").sizes() == tensor::Shape{0, 4});
  CHECK(file.metadata.at("generator") == "make_nn_fixtures.py");
}

TEST_CASE("damaged files give clear errors", "[nn][safetensors][errors]") {
  const std::string good_header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  const std::string data = float_bytes(4);
  CHECK(load_safetensors(write_raw("good.st", good_header, data)).tensors.at("w").numel() == 4);

  const auto expect_error = [](const std::string& path, const std::string& text) {
    INFO(path);
    CHECK_THROWS_WITH(load_safetensors(path), Contains("safetensors: " + path) && Contains(text));
  };
  {
    const std::string path = temp_path("short.st");
    std::ofstream(path, std::ios::binary) << "abc";
    expect_error(path, "file is 3 bytes, too short for the 8-byte header length");
  }
  expect_error(temp_path("missing.st"), "cannot open");
  expect_error(write_raw("huge_header.st", good_header, data, uint64_t{1} << 40), "exceeds the 104857600 byte limit");
  expect_error(write_raw("truncated_header.st", good_header.substr(0, 20), "", good_header.size()),
               "runs past the end of the");
  expect_error(write_raw("bad_json.st", R"({"w": {"dtype": )", data), "header is not valid JSON");
  expect_error(write_raw("not_object.st", "[1, 2]", ""), "header is not a JSON object");
  expect_error(write_raw("unknown_dtype.st", R"({"w":{"dtype":"I8","shape":[16],"data_offsets":[0,16]}})", data),
               "entry 'w': unsupported dtype 'I8'");
  expect_error(write_raw("size_mismatch.st", R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})", data),
               "entry 'w': shape [3,2] of F32 needs 24 bytes but data_offsets [0, 16] hold 16");
  expect_error(write_raw("out_of_range.st", R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}})", data),
               "data_offsets [8, 24] lie outside the 16 bytes of data");
  expect_error(write_raw("reversed.st", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[16,8]}})", data),
               "lie outside");
  expect_error(write_raw("negative_shape.st", R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data),
               "has an entry that is not a non-negative integer");
  expect_error(write_raw("bad_offsets.st", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", data),
               "data_offsets must be [begin, end]");
  expect_error(write_raw("no_shape.st", R"({"w":{"dtype":"F32","data_offsets":[0,16]}})", data),
               "entry 'w' has no 'shape'");
  expect_error(
      write_raw(
          "overlap.st",
          R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
          data),
      "entry 'b' (bytes [8, 16]) overlaps the previous entry");
  expect_error(write_raw("gap.st", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data),
               "8 unused bytes before entry 'a'");
  expect_error(write_raw("trailing.st", good_header, data + "garbage!"),
               "8 bytes after the last tensor's data (trailing garbage)");
  expect_error(write_raw("bad_metadata.st", R"({"__metadata__":{"k":1}})", ""),
               "__metadata__ value for 'k' is not a string");
  expect_error(write_raw("bad_bool.st", R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
                         std::string("\x01\x07", 2)),
               "byte 1 of a BOOL tensor is 7");
  expect_error(write_raw("huge_shape.st",
                         R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", data),
               "is larger than the file's data");
}

TEST_CASE("a failed checkpoint load leaves the module untouched", "[nn][safetensors][checkpoint]") {
  tensor::manual_seed(0);
  ToyModel model;
  const OrderedDict<Tensor> before = model.state_dict();
  std::vector<Tensor> snapshot;
  for (const auto& [name, t] : before) snapshot.push_back(t.clone());
  const auto unchanged = [&] {
    size_t i = 0;
    for (const auto& [name, t] : model.state_dict()) {
      if (!tensor::equal(t, snapshot[i++])) return false;
    }
    return true;
  };
  // A good file with one wrong shape.
  tensor::manual_seed(1);
  ToyModel other;
  OrderedDict<Tensor> wrong = other.state_dict();
  OrderedDict<Tensor> edited;
  for (const auto& [name, t] : wrong) edited.insert(name, name == "net2.bias" ? tensor::zeros({6}) : t);
  const std::string path = temp_path("wrong_shape.safetensors");
  save_safetensors(path, edited);
  CHECK_THROWS_WITH(load_state_dict(model, path), Contains("size mismatch for net2.bias") && Contains(path));
  CHECK(unchanged());
  // A damaged file.
  const std::string good = temp_path("toy_good.safetensors");
  save_state_dict(other, good);
  std::filesystem::resize_file(good, std::filesystem::file_size(good) - 4);
  CHECK_THROWS_WITH(load_state_dict(model, good), Contains("safetensors"));
  CHECK(unchanged());
  // A file with an unknown name.
  OrderedDict<Tensor> extra = other.state_dict();
  extra.insert("net9.weight", tensor::zeros({1}));
  save_safetensors(path, extra);
  CHECK_THROWS_WITH(load_state_dict(model, path), Contains("unexpected key(s): \"net9.weight\""));
  CHECK(unchanged());
  // And a good one loads.
  save_state_dict(other, good);
  load_state_dict(model, good);
  CHECK(tensor::equal(model.net1->weight, other.net1->weight));
}

TEST_CASE("saving is atomic: a failed save keeps the previous file", "[nn][safetensors][checkpoint]") {
  const std::string path = temp_path("atomic.safetensors");
  OrderedDict<Tensor> first;
  first.insert("w", tensor::ones({3}));
  save_safetensors(path, first);
  OrderedDict<Tensor> broken;
  broken.insert("w", tensor::zeros({3}));
  broken.insert("bad", Tensor());  // fails while preparing, after "w"
  CHECK_THROWS_WITH(save_safetensors(path, broken), Contains("save_safetensors: tensor 'bad' is undefined"));
  CHECK(tensor::equal(load_safetensors(path).tensors.at("w"), tensor::ones({3})));
  CHECK_THROWS_WITH(save_safetensors(temp_path("no/such/dir/x.safetensors"), first), Contains("cannot create"));
  // No temporary files are left behind.
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    CHECK(entry.path().string().find(".tmp.") == std::string::npos);
  }
}
