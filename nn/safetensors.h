// safetensors files (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the
// raw little-endian data. The files open in PyTorch (safetensors.torch) and NumPy.
// Loading validates everything before returning; saving is atomic (temporary file + rename).
#pragma once

#include <map>
#include <string>

#include "tinyddp/nn/ordered_dict.h"
#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn {

// The header limit: larger headers are rejected before any allocation.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct SafetensorsFile {
  OrderedDict<tensor::Tensor> tensors;  // CPU tensors, in data-offset order
  std::map<std::string, std::string> metadata;
};

// Writes the tensors (made contiguous, moved to the CPU) and `metadata`; tinyddp adds
// "format": "pt" and "tinyddp_format_version". Throws with the path and reason on failure.
void save_safetensors(const std::string& path, const OrderedDict<tensor::Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads and validates a file: header length within the file and the limit, valid JSON,
// known dtype names (F64, F32, F16, BF16, I64, I32, U8, BOOL), non-negative shapes whose byte size
// matches data_offsets, offsets inside the data, no overlaps, no gaps and no trailing bytes.
// Any problem throws an error naming the file and the entry.
SafetensorsFile load_safetensors(const std::string& path);

// The same format in memory (to send over a process group, for example): the bytes a file
// would hold, and their validated reading; `what` names the bytes in errors.
std::string serialize_safetensors(const OrderedDict<tensor::Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what);

}  // namespace tinyddp::nn
