// Tensor handle and view tests: metadata, views that alias their base (writes through a
// view show in the base), strides of every view op, reshape's copy fallback, contiguity,
// storage bounds, data access with dtype checks, devices, and every error path.
#include "tests/test_util.h"

using namespace tinyddp::tensor;
using Catch::Contains;
using tinyddp::testing::at;

TEST_CASE("metadata of a new tensor", "[tensor]") {
  const Tensor t = zeros({2, 3, 4});
  CHECK(t.defined());
  CHECK(t.dim() == 3);
  CHECK(t.numel() == 24);
  CHECK(t.sizes() == Shape{2, 3, 4});
  CHECK(t.strides() == Shape{12, 4, 1});
  CHECK(t.size(-1) == 4);
  CHECK(t.stride(0) == 12);
  CHECK(t.dtype() == kFloat32);
  CHECK(t.device() == kCPU);
  CHECK(t.nbytes() == 96);
  CHECK(t.is_contiguous());
  CHECK(t.storage_offset() == 0);
  CHECK(reinterpret_cast<uintptr_t>(t.raw_data_ptr()) % 64 == 0);
  const Tensor scalar = scalar_tensor(3.5);
  CHECK(scalar.dim() == 0);
  CHECK(scalar.numel() == 1);
  CHECK(scalar.item<float>() == 3.5f);
  CHECK_FALSE(Tensor().defined());
  CHECK_THROWS_WITH(Tensor().sizes(), Contains("undefined tensor"));
  CHECK_THROWS_WITH(t.size(3), Contains("dimension out of range (expected to be in range of [-3, 2], but got 3)"));
}

TEST_CASE("writing through a view changes the base", "[tensor][view]") {
  const Tensor base = arange(12, kFloat32).view({3, 4});
  SECTION("view") {
    const Tensor flat = base.view({12});
    flat.narrow(0, 5, 1).fill_(-1);
    CHECK(at(base, {1, 1}) == -1);
    CHECK(flat.shares_storage(base));
  }
  SECTION("narrow") {
    const Tensor cols = base.narrow(1, 1, 2);
    CHECK(cols.sizes() == Shape{3, 2});
    CHECK(cols.strides() == Shape{4, 1});
    CHECK(cols.storage_offset() == 1);
    CHECK_FALSE(cols.is_contiguous());
    cols.fill_(7);
    CHECK(base.to_vector<float>() == std::vector<float>{0, 7, 7, 3, 4, 7, 7, 7, 8, 7, 7, 11});
  }
  SECTION("select") {
    const Tensor row = base.select(0, -1);
    CHECK(row.sizes() == Shape{4});
    CHECK(row.storage_offset() == 8);
    row.mul_(10);
    CHECK(at(base, {2, 3}) == 110);
    const Tensor col = base[0].select(0, 2);
    CHECK(col.dim() == 0);
    CHECK(col.item<float>() == 2);
  }
  SECTION("transpose and permute") {
    const Tensor t = base.t();
    CHECK(t.sizes() == Shape{4, 3});
    CHECK(t.strides() == Shape{1, 4});
    t.select(0, 2).fill_(0);  // column 2 of base
    CHECK(at(base, {0, 2}) == 0);
    CHECK(at(base, {2, 2}) == 0);
    const Tensor cube = arange(24).view({2, 3, 4});
    const Tensor p = cube.permute({2, 0, 1});
    CHECK(p.sizes() == Shape{4, 2, 3});
    CHECK(p.strides() == Shape{1, 12, 4});
    CHECK(at(p, {3, 1, 2}) == at(cube, {1, 2, 3}));
  }
  SECTION("expand") {
    const Tensor column = arange(3, kFloat32).view({3, 1});
    const Tensor wide = column.expand({2, 3, 4});
    CHECK(wide.sizes() == Shape{2, 3, 4});
    CHECK(wide.strides() == Shape{0, 1, 0});
    CHECK(at(wide, {1, 2, 3}) == 2);
    column.fill_(5);
    CHECK(at(wide, {0, 1, 2}) == 5);
    CHECK(column.expand({-1, 2}).sizes() == Shape{3, 2});
  }
  SECTION("unsqueeze, squeeze, flatten") {
    const Tensor u = base.unsqueeze(1);
    CHECK(u.sizes() == Shape{3, 1, 4});
    CHECK(u.squeeze().sizes() == Shape{3, 4});
    CHECK(u.squeeze(1).sizes() == Shape{3, 4});
    CHECK(u.squeeze(0).sizes() == Shape{3, 1, 4});  // not size 1: unchanged
    CHECK(base.unsqueeze(-1).sizes() == Shape{3, 4, 1});
    const Tensor f = base.flatten();
    CHECK(f.sizes() == Shape{12});
    CHECK(f.shares_storage(base));
    CHECK(arange(24).view({2, 3, 4}).flatten(1).sizes() == Shape{2, 12});
    CHECK(scalar_tensor(1).flatten().sizes() == Shape{1});
    u.squeeze().fill_(1);
    CHECK(sum(base).item<float>() == 12);
  }
  SECTION("as_strided") {
    const Tensor diag = base.as_strided({3}, {5}, 0);
    CHECK(diag.to_vector<float>() == std::vector<float>{0, 5, 10});
    diag.fill_(-3);
    CHECK(at(base, {1, 1}) == -3);
    CHECK_THROWS_WITH(base.as_strided({4}, {5}, 0), Contains("need a storage of 64 bytes, but the storage holds 48"));
    CHECK_THROWS_WITH(base.as_strided({2}, {1, 1}), Contains("as_strided: got 1 sizes [2] but 2 strides [1, 1]"));
  }
}

TEST_CASE("view and reshape follow PyTorch's stride rules", "[tensor][view]") {
  const Tensor base = arange(24, kFloat32).view({2, 3, 4});
  CHECK(base.view({6, -1}).sizes() == Shape{6, 4});
  CHECK(base.view({-1}).strides() == Shape{1});
  // A narrowed slice can still be viewed when the merged dims stay contiguous.
  const Tensor sliced = base.narrow(2, 0, 2);  // [2, 3, 2], strides [12, 4, 1]
  const Tensor merged = sliced.view({2, 3, 2, 1});
  CHECK(merged.strides() == Shape{12, 4, 1, 1});
  const Tensor split = base.transpose(0, 1).view({3, 2, 2, 2});  // splitting a dim is fine
  CHECK(split.strides() == Shape{4, 12, 2, 1});
  CHECK(at(split, {2, 1, 1, 0}) == at(base.transpose(0, 1), {2, 1, 2}));
  // Merging transposed dims is not a view.
  CHECK_THROWS_WITH(base.transpose(1, 2).view({2, 12}), Contains("use reshape() instead"));
  const Tensor copied = base.transpose(1, 2).reshape({2, 12});
  CHECK_FALSE(copied.shares_storage(base));
  CHECK(at(copied, {1, 5}) == at(base, {1, 2, 1}));  // [1, 5] of [2, 4, 3] is [1, 1, 2]
  const Tensor aliased = base.reshape({4, 6});
  CHECK(aliased.shares_storage(base));
  CHECK_THROWS_WITH(base.view({5, -1}), Contains("shape [5, -1] is invalid for input of size 24"));
  CHECK_THROWS_WITH(base.view({-1, -1}), Contains("only one dimension can be inferred"));
  CHECK_THROWS_WITH(base.view({7}), Contains("shape [7] is invalid for input of size 24"));
  // Empty tensors view freely.
  CHECK(zeros({0, 3}).view({3, 0}).sizes() == Shape{3, 0});
}

TEST_CASE("contiguous and clone", "[tensor][view]") {
  const Tensor base = arange(6, kFloat32).view({2, 3});
  CHECK(base.contiguous().is_same(base));
  const Tensor t = base.t();
  CHECK_FALSE(t.is_contiguous());
  const Tensor c = t.contiguous();
  CHECK(c.is_contiguous());
  CHECK(c.to_vector<float>() == std::vector<float>{0, 3, 1, 4, 2, 5});
  const Tensor cl = base.clone();
  CHECK_FALSE(cl.shares_storage(base));
  cl.fill_(0);
  CHECK(at(base, {1, 2}) == 5);
  // Size-1 dims do not break contiguity whatever their stride.
  CHECK(base.narrow(0, 1, 1).is_contiguous());
  CHECK(zeros({3, 1}).expand({3, 1}).is_contiguous());
  CHECK_FALSE(zeros({3, 1}).expand({3, 2}).is_contiguous());
}

TEST_CASE("view errors name the op and the arguments", "[tensor][view][errors]") {
  const Tensor t = zeros({2, 3});
  CHECK_THROWS_WITH(t.narrow(1, 2, 2), Contains("narrow: start (2) + length (2) exceeds dimension 1 of size 3"));
  CHECK_THROWS_WITH(t.narrow(2, 0, 1), Contains("narrow: dimension out of range"));
  CHECK_THROWS_WITH(t.select(0, 2), Contains("select: index 2 is out of range for dimension 0 with size 2"));
  CHECK_THROWS_WITH(t.permute({0}), Contains("permute: number of dims [0] does not match"));
  CHECK_THROWS_WITH(t.permute({1, 1}), Contains("permute: dimension 1 appears more than once"));
  CHECK_THROWS_WITH(t.expand({4, 3}), Contains("expand: the expanded size 4 must match the existing size 2"));
  CHECK_THROWS_WITH(t.expand({3}), Contains("must be at least the tensor's number of dimensions"));
  CHECK_THROWS_WITH(t.unsqueeze(3), Contains("unsqueeze: dimension out of range"));
  CHECK_THROWS_WITH(t.flatten(1, 0), Contains("flatten: start_dim (1) must not come after end_dim (0)"));
  CHECK_THROWS_WITH(zeros({2, 2, 2}).t(), Contains("t: expects a tensor with <= 2 dimensions"));
  CHECK_THROWS_WITH(scalar_tensor(1).narrow(0, 0, 1), Contains("narrow: cannot narrow a 0-d tensor"));
  CHECK_THROWS_AS(t.view({-2, 3}), tinyddp::Error);
}

TEST_CASE("data access checks the dtype", "[tensor]") {
  const Tensor t = tensor({1.0, 2.0, 3.0});
  CHECK(t.data_ptr<float>()[1] == 2.0f);
  CHECK_THROWS_WITH(t.data_ptr<double>(),
                    Contains("data_ptr: expected a tensor of dtype float64 but it has dtype float32"));
  CHECK_THROWS_WITH(t.to_vector<int64_t>(), Contains("to_vector: expected a tensor of dtype int64"));
  CHECK_THROWS_WITH(t.item<float>(), Contains("a tensor with 3 elements (shape [3]) cannot be converted to a scalar"));
  CHECK(t.narrow(0, 2, 1).item<double>() == 3.0);
  CHECK(from_vector(std::vector<int64_t>{(1LL << 60) + 1}).item<int64_t>() == (1LL << 60) + 1);
}

TEST_CASE("storage is shared by views and freed with the last one", "[tensor][storage]") {
  Tensor view;
  {
    const Tensor base = zeros({4});
    view = base.narrow(0, 1, 2);
    CHECK(base.storage().use_count() == 2);
  }
  CHECK(view.storage().use_count() == 1);
  view.fill_(1);
  CHECK(view.to_vector<float>() == std::vector<float>{1, 1});
  CHECK(Storage(16, kCPU).nbytes() == 16);
  CHECK(Storage(0, kCPU).nbytes() == 0);
  CHECK(reinterpret_cast<uintptr_t>(Storage(100, kCPU).data()) % 64 == 0);
}

TEST_CASE("cpu_memory_stats counts the bytes of live CPU storages, views once, freed bytes out", "[tensor][storage]") {
  const size_t before = cpu_memory_stats().allocated_bytes;
  reset_cpu_peak_memory();
  CHECK(cpu_memory_stats().peak_allocated_bytes == before);
  {
    const Tensor a = zeros({1000});                     // 4000 bytes: one small block
    const Tensor big = empty({int64_t{40 << 20} / 4});  // 40 MiB of float32: the large-block allocator
    const Tensor view = a.narrow(0, 10, 10);            // shares a's storage: nothing new
    CHECK(cpu_memory_stats().allocated_bytes == before + 4000 + (size_t(40) << 20));
    // A freed storage's bytes leave the count while its tensors live, and come back.
    const Storage s(256, cpu_allocator());
    CHECK(cpu_memory_stats().allocated_bytes == before + 4256 + (size_t(40) << 20));
    s.free_bytes();
    CHECK(cpu_memory_stats().allocated_bytes == before + 4000 + (size_t(40) << 20));
    s.restore_bytes(128);
    CHECK(cpu_memory_stats().allocated_bytes == before + 4128 + (size_t(40) << 20));
  }
  CHECK(cpu_memory_stats().allocated_bytes == before);
  CHECK(cpu_memory_stats().peak_allocated_bytes == before + 4256 + (size_t(40) << 20));
}

TEST_CASE("freed CPU blocks of 32 MiB or more are reused, up to the cache's limit", "[tensor][storage]") {
  cpu_empty_cache();
  REQUIRE(cpu_cached_bytes() == 0);
  const int64_t n = (40 << 20) / 4;  // 40 MiB of float32: rounded to 40 MiB
  const void* first = nullptr;
  {
    const Tensor a = full({n}, 3.0);
    first = a.raw_data_ptr();
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
    CHECK(a.narrow(0, n - 2, 2).to_vector<float>() == std::vector<float>{3, 3});
  }
  CHECK(cpu_cached_bytes() == size_t(40) << 20);
  {
    // A block of a different rounded size maps new memory; the same size gets the freed block.
    const Tensor other = empty({n + (4 << 20) / 4});
    CHECK(other.raw_data_ptr() != first);
    const Tensor again = zeros({n});
    CHECK(again.raw_data_ptr() == first);
    CHECK(again.narrow(0, n - 2, 2).to_vector<float>() == std::vector<float>{0, 0});  // zeros() still zeroes
    CHECK(cpu_cached_bytes() == 0);
  }
  CHECK(cpu_cached_bytes() == size_t(84) << 20);
  // The cache holds at most 512 MiB (or an eighth of the memory): freeing 13 more blocks of 40
  // MiB unmaps the oldest ones.
  {
    std::vector<Tensor> many;
    for (int i = 0; i < 15; ++i) many.push_back(empty({n}));
  }
  CHECK(cpu_cached_bytes() <= size_t(512) << 20);
  CHECK(cpu_cached_bytes() >= size_t(512 - 40) << 20);
  cpu_empty_cache();
  CHECK(cpu_cached_bytes() == 0);
  CHECK(Storage(size_t(33) << 20, kCPU).nbytes() == size_t(33) << 20);  // the size asked for, not the rounding
  // A mapping that fails gives the cached blocks back, tries again, then names the size.
  CHECK(cpu_cached_bytes() == size_t(34) << 20);
  CHECK_THROWS_WITH(Storage(size_t(1) << 52, kCPU),
                    Contains("CPU allocator: out of memory allocating 4503599627370496 bytes"));
  CHECK(cpu_cached_bytes() == 0);
}

TEST_CASE("devices parse, print and compare like torch.device", "[tensor][device]") {
  CHECK(Device("cpu") == kCPU);
  CHECK(Device("cuda") == Device::cuda(0));
  CHECK(Device("cuda:3").index == 3);
  CHECK(Device::cuda(1).str() == "cuda:1");
  CHECK(kCPU.str() == "cpu");
  CHECK_FALSE(Device::cuda(0) == Device::cuda(1));
  CHECK_THROWS_WITH(Device("gpu"), Contains("Device: expected \"cpu\", \"cuda\" or \"cuda:N\", got \"gpu\""));
  CHECK_THROWS_WITH(Device("cuda:x"), Contains("got \"cuda:x\""));
  CHECK_THROWS_WITH(Device("cuda:"), Contains("got \"cuda:\""));
  CHECK_THROWS_WITH(Device(DeviceType::kCUDA, -2), Contains("index must be >= 0"));
}

TEST_CASE("creating a CUDA tensor without CUDA support is a clear error", "[tensor][device][errors]") {
  if (cuda::is_available()) TINYDDP_SKIP("a CUDA device is present; this checks the CPU-only error");
  CHECK_THROWS_WITH(zeros({2}, Device::cuda(0)), Contains("cannot allocate a tensor on cuda:0"));
  CHECK_THROWS_WITH(tensor({1.0}).to(Device::cuda(0)), Contains("cannot allocate a tensor on cuda:0"));
}

TEST_CASE("remaining error paths name the op and the argument", "[tensor][errors]") {
  const Tensor t = zeros({2, 3});
  CHECK_THROWS_WITH(t.squeeze(2), Contains("squeeze: dimension out of range"));
  CHECK_THROWS_WITH(t.transpose(0, 2), Contains("transpose: dimension out of range"));
  CHECK_THROWS_WITH(t.stride(-3), Contains("stride: dimension out of range"));
  CHECK_THROWS_WITH(t.as_strided({2}, {-1}, 1), Contains("as_strided: negative stride -1"));
  CHECK_THROWS_WITH(t.as_strided({2}, {1}, -1), Contains("as_strided: negative storage offset -1"));
  CHECK_THROWS_WITH(t.expand({-1, 2, 3}), Contains("expand: size -1 is not allowed in a new leading dimension"));
  CHECK_THROWS_WITH(Device(DeviceType::kCPU, 2), Contains("Device: a CPU device has no index, got 2"));
  CHECK_THROWS_WITH(Storage(8, static_cast<Allocator*>(nullptr)), Contains("Storage: allocator is null"));
  CHECK_THROWS_WITH(zeros({1LL << 31, 1LL << 31}),
                    Contains("empty: shape [2147483648, 2147483648] of float32 needs more bytes"));
  CHECK_THROWS_WITH(zeros({1LL << 62, 4}), Contains("has more elements than int64 can count"));
  CHECK_THROWS_WITH(arange(0.0, INFINITY), Contains("arange: start (0), end (inf) and step (1) must be finite"));
  CHECK_THROWS_WITH(Tensor().copy_(t), Contains("copy_: argument 'self' is an undefined tensor"));
  CHECK_THROWS_WITH(t.copy_(Tensor()), Contains("copy_: argument 'src' is an undefined tensor"));
  CHECK_THROWS_WITH(Tensor().fill_(1), Contains("fill_: argument 'self' is an undefined tensor"));
  CHECK_THROWS_WITH(sum(Tensor()), Contains("sum: argument 'x' is an undefined tensor"));
  CHECK_THROWS_WITH(exp(Tensor()), Contains("exp: argument 'x' is an undefined tensor"));
  CHECK_THROWS_WITH(mm(zeros({2, 3}), zeros({3})), Contains("mm: 'b' must be a matrix (2-D), got shape [3]"));
  CHECK_THROWS_WITH(mm(zeros({2, 3}), zeros({2, 3})),
                    Contains("mm: shapes [2, 3] and [2, 3] cannot be multiplied (3 != 2)"));
  CHECK_THROWS_WITH(normal_(zeros({2}, kInt64)),
                    Contains("normal_: expected a floating-point tensor, got dtype int64"));
  CHECK_THROWS_WITH(uniform_(zeros({2}), 1, 0), Contains("uniform_: expects from <= to, but got from=1 > to=0"));
  CHECK_THROWS_WITH(allclose(zeros({2}), zeros({2}, kFloat64)),
                    Contains("allclose: expected tensors of the same dtype"));
  CHECK_THROWS_WITH(allclose(zeros({2}), zeros({3})), Contains("allclose: shapes [2] and [3] cannot be broadcast"));
  CHECK_THROWS_WITH(max(zeros({2}), 1), Contains("max: dimension out of range"));
  CHECK_THROWS_WITH(pow(gt(t, 0), 2), Contains("pow: arithmetic on bool tensors is not supported"));
  CHECK(maximum(t, zeros({2, 3}, kInt64)).dtype() == kFloat32);  // promoted, as torch.maximum
  CHECK_THROWS_WITH(lt(t, zeros({3, 3}, kInt64)), Contains("lt: shapes [2, 3] and [3, 3] cannot be broadcast"));
  CHECK_THROWS_WITH(mm(zeros({2, 2}), zeros({2, 2}, kInt64)), Contains("mm: expected tensors of the same dtype"));
  CHECK_THROWS_WITH(t.mul_(zeros({3, 3})), Contains("mul_: shapes [2, 3] and [3, 3] cannot be broadcast"));
  CHECK_THROWS_WITH(t.view({-1, 0}), Contains("view: shape [-1, 0] is invalid for input of size 6"));
  // Equality helpers.
  CHECK(equal(t, zeros({2, 3})));
  CHECK_FALSE(equal(t, zeros({3, 2})));
  CHECK_FALSE(equal(tensor({std::nan("")}), tensor({std::nan("")})));
  CHECK(allclose(tensor({std::nan("")}), tensor({std::nan("")}), 1e-5, 1e-8, true));
  CHECK(allclose(tensor({1.0, 100.0}), tensor({1.0 + 1e-6, 100.0 + 1e-4})));
  CHECK_FALSE(allclose(tensor({1.0}), tensor({1.001})));
  CHECK(allclose(tensor({INFINITY}), tensor({INFINITY})));
  CHECK_FALSE(allclose(tensor({INFINITY}), tensor({-INFINITY})));
  CHECK_FALSE(allclose(tensor({INFINITY}), tensor({1e30})));
}
