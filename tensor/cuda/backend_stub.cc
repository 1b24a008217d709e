// tensor/cuda/backend.h in a build without CUDA: every entry point says so.
#include "tinyddp/tensor/cuda/backend.h"

#include "tinyddp/base/error.h"
#include "tinyddp/tensor/cuda.h"

namespace tinyddp::tensor::cuda {

namespace {
[[noreturn]] void unavailable(const char* op) { throw Error(fmt::format("{}: {}", op, unavailable_reason())); }
}  // namespace

void runtime_set_device(int device) { throw Error(fmt::format("set_device({}): {}", device, unavailable_reason())); }

void binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&, double) { unavailable("binary op"); }
void compare(CompareOp, const Tensor&, const Tensor&, const Tensor&) { unavailable("comparison"); }
void unary(UnaryOp, const Tensor&, const Tensor&) { unavailable("unary op"); }
void pow_scalar(const Tensor&, const Tensor&, double) { unavailable("pow"); }
void pow_scalar_base(const Tensor&, const Tensor&, double) { unavailable("pow"); }
void fill(const Tensor&, double) { unavailable("fill_"); }
void accumulate(const Tensor&, const Tensor&) { unavailable("accumulate_into"); }
void copy(const Tensor&, const Tensor&, bool) { unavailable("copy_"); }
Tensor to_host_after(const Tensor&, const StreamMark&) { unavailable("to_host_after"); }
StreamMark StreamMark::record(int, bool) { unavailable("StreamMark::record"); }
double StreamMark::elapsed_ms(const StreamMark&, const StreamMark&) { unavailable("StreamMark::elapsed_ms"); }
Tensor sum(const Tensor&, const Shape&, bool) { unavailable("sum"); }
Tensor mean(const Tensor&, const Shape&, bool) { unavailable("mean"); }
std::tuple<Tensor, Tensor> max(const Tensor&, const Shape&, bool) { unavailable("max"); }
void softmax(const Tensor&, const Tensor&, int64_t, bool) { unavailable("softmax"); }
void causal_softmax(const Tensor&, const Tensor&, double) { unavailable("causal_softmax"); }
void causal_softmax_backward(const Tensor&, const Tensor&, const Tensor&, double) {
  unavailable("causal_softmax backward");
}
void mm(const Tensor&, const Tensor&, const Tensor&) { unavailable("matmul"); }
void addmm(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { unavailable("linear"); }
bool bmm(const Tensor&, const Tensor&, const Tensor&) { unavailable("matmul"); }
bool conv2d(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Window2d&, int64_t) {
  unavailable("conv2d");
}
bool conv2d_backward_input(const Tensor&, const Tensor&, const Tensor&, const Window2d&, int64_t) {
  unavailable("conv2d backward");
}
bool conv2d_backward_weight(const Tensor&, const Tensor&, const Tensor&, const Window2d&, int64_t) {
  unavailable("conv2d backward");
}
bool conv2d_native(const Window2d&, int64_t, int64_t, bool, DType) { unavailable("conv2d"); }
void embedding(const Tensor&, const Tensor&, const Tensor&) { unavailable("embedding"); }
void embedding_backward(const Tensor&, const Tensor&, const Tensor&) { unavailable("embedding backward"); }
void layer_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double) {
  unavailable("layer_norm");
}
void layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unavailable("layer_norm backward");
}
void im2col(const Tensor&, const Tensor&, const Window2d&, double) { unavailable("im2col"); }
void col2im(const Tensor&, const Tensor&, const Window2d&) { unavailable("col2im"); }

struct CudaGraph::Impl {};
CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}
CudaGraph::~CudaGraph() = default;
void CudaGraph::capture_begin(int) { unavailable("CudaGraph::capture_begin"); }
void CudaGraph::capture_end() { unavailable("CudaGraph::capture_end"); }
void CudaGraph::replay() { unavailable("CudaGraph::replay"); }
void CudaGraph::reset() {}
bool CudaGraph::captured() const { return false; }
bool is_capturing(int) { return false; }

}  // namespace tinyddp::tensor::cuda
