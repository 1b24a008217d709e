// Test helpers: see test_util.h.
#include "tests/test_util.h"

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tinyddp/tensor/cpu_isa.h"

namespace tinyddp::testing {

std::map<std::string, std::vector<double>> load_fixture(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  std::map<std::string, std::vector<double>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, token;
    fields >> name;
    std::vector<double>& values = out[name];
    while (fields >> token) values.push_back(std::stod(token));
  }
  return out;
}

double at(const tensor::Tensor& t, const std::vector<int64_t>& index) {
  int64_t offset = t.storage_offset();
  for (size_t d = 0; d < index.size(); ++d) offset += index[d] * t.strides()[d];
  const char* base = static_cast<const char*>(t.storage().data());
  const char* p = base + offset * static_cast<int64_t>(t.element_size());
  switch (t.dtype()) {
    case tensor::kFloat32: return *reinterpret_cast<const float*>(p);
    case tensor::kFloat64: return *reinterpret_cast<const double*>(p);
    case tensor::kFloat16: return tensor::half_bits_to_float(*reinterpret_cast<const uint16_t*>(p));
    case tensor::kBFloat16: return tensor::bfloat16_bits_to_float(*reinterpret_cast<const uint16_t*>(p));
    case tensor::kInt64: return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case tensor::kBool: return *reinterpret_cast<const bool*>(p) ? 1.0 : 0.0;
    case tensor::kInt32: return static_cast<double>(*reinterpret_cast<const int32_t*>(p));
    case tensor::kUInt8: return static_cast<double>(*reinterpret_cast<const uint8_t*>(p));
  }
  return 0;
}

std::vector<std::vector<int64_t>> all_indices(const tensor::Shape& shape) {
  std::vector<std::vector<int64_t>> out;
  const int64_t total = tensor::shape_numel(shape);
  for (int64_t linear = 0; linear < total; ++linear) {
    std::vector<int64_t> index(shape.size());
    int64_t rest = linear;
    for (size_t d = shape.size(); d-- > 0;) {
      index[d] = rest % shape[d];
      rest /= shape[d];
    }
    out.push_back(index);
  }
  return out;
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string fresh_directory(const std::string& name) {
  const std::string dir = temp_path(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

tensor::Tensor written_copy(const tensor::Tensor& x, const std::function<void(const tensor::Tensor&)>& write) {
  const tensor::Tensor y = tensor::mul(x, 1.0);
  write(y);
  return y;
}

std::vector<double> read_losses(const std::string& path) {
  std::ifstream csv(path);
  std::string line;
  std::getline(csv, line);  // header
  std::vector<double> losses;
  while (std::getline(csv, line)) losses.push_back(std::stod(line.substr(line.find(',') + 1)));
  return losses;
}

CommandResult run_command(const std::string& command) {
  CommandResult result;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = ::popen(("exec 2>&1; " + command).c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("run_command: popen failed for: " + command);
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  return result;
}

void expect_matches_cpu(const std::vector<tensor::Tensor>& inputs,
                        const std::function<tensor::Tensor(const std::vector<tensor::Tensor>&)>& op,
                        const std::string& what, double tol) {
  const tensor::Device gpu = tensor::Device::cuda(0);
  std::vector<tensor::Tensor> on_gpu;
  for (const tensor::Tensor& t : inputs) on_gpu.push_back(t.to(gpu));
  const tensor::Tensor want = op(inputs);
  const tensor::Tensor got = op(on_gpu);
  INFO(what);
  REQUIRE(got.device() == gpu);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  CHECK(tensor::allclose(got.to(tensor::kCPU), want, tol, tol, /*equal_nan=*/true));
}

void for_each_cpu_isa(const std::function<void()>& body) {
  const tensor::CpuIsa chosen = tensor::cpu_isa();
  for (tensor::CpuIsa isa : {tensor::CpuIsa::kAvx2, tensor::CpuIsa::kAvx512}) {
    if (!tensor::cpu_has(isa)) continue;
    INFO(tensor::cpu_isa_name(isa));
    tensor::set_cpu_isa(isa);
    body();
  }
  tensor::set_cpu_isa(chosen);
}

}  // namespace tinyddp::testing
