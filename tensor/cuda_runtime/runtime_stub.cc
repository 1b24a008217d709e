// tensor/cuda.h's runtime in a build without CUDA: every call says why it cannot run (its one
// call on tensors, to_host_after, answers in tensor/cuda.cc). There is no CUDA backend in such
// a build: backend_for names the op and the device instead.
#include "tinyddp/base/error.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::tensor::cuda {

namespace {
[[noreturn]] void unavailable(const char* op) { throw Error(fmt::format("{}: {}", op, unavailable_reason())); }
}  // namespace

void runtime_set_device(int device) { throw Error(fmt::format("set_device({}): {}", device, unavailable_reason())); }

StreamMark StreamMark::record(int, bool) { unavailable("StreamMark::record"); }
double StreamMark::elapsed_ms(const StreamMark&, const StreamMark&) { unavailable("StreamMark::elapsed_ms"); }
struct CudaGraph::Impl {};
CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}
CudaGraph::~CudaGraph() = default;
void CudaGraph::capture_begin(int) { unavailable("CudaGraph::capture_begin"); }
void CudaGraph::capture_end() { unavailable("CudaGraph::capture_end"); }
void CudaGraph::replay() { unavailable("CudaGraph::replay"); }
void CudaGraph::reset() {}
bool CudaGraph::captured() const { return false; }
bool is_capturing(int) { return false; }
const uint64_t* graph_random_key_slot(int) { unavailable("graph_random_key_slot"); }
void on_graph_replay(int, std::function<void(const ReplayLaunch&)>) { unavailable("on_graph_replay"); }
uint64_t capture_id(int) { return 0; }

}  // namespace tinyddp::tensor::cuda
