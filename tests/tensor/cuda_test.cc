// CUDA availability tests: the device query agrees with itself in every build, and where a
// GPU is present a kernel really runs on it. Skips (with a reason) without a device.
#include "tests/test_util.h"

using namespace tinyddp::tensor;

TEST_CASE("the device query is consistent", "[cuda]") {
  const int count = cuda::device_count();
  CHECK(count >= 0);
  CHECK(cuda::is_available() == (count > 0));
  CHECK(static_cast<int>(cuda::device_properties().size()) == count);
  CHECK_FALSE(cuda::unavailable_reason().empty());
  if (!cuda::is_built()) CHECK(count == 0);
}

TEST_CASE("a kernel runs on every CUDA device", "[cuda]") {
  if (!cuda::is_available()) TINYDDP_SKIP("no CUDA device: " << cuda::unavailable_reason());
  for (const cuda::DeviceProperties& p : cuda::device_properties()) {
    INFO("device " << p.index << " " << p.name);
    CHECK(p.total_memory > 0);
    CHECK(p.major >= 3);
    CHECK(cuda::smoke_test(p.index).empty());
  }
}
