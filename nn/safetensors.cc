// The safetensors reader and writer (safetensors.h): the 8-byte header length, the JSON header
// (dtype, shape, offsets) and the raw little-endian data, with errors that name the file and
// what in it is wrong.
#include "tinyddp/nn/safetensors.h"

#include <unistd.h>
#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tinyddp/tensor/factory.h"

namespace tinyddp::nn {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; so is this code");

using tensor::DType;
using tensor::Tensor;

namespace {

constexpr const char* kFormatVersion = "1";

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case tensor::kFloat64: return "F64";
    case tensor::kFloat32: return "F32";
    case tensor::kFloat16: return "F16";
    case tensor::kBFloat16: return "BF16";
    case tensor::kInt64: return "I64";
    case tensor::kBool: return "BOOL";
    case tensor::kInt32: return "I32";
    case tensor::kUInt8: return "U8";
  }
  return "?";
}

std::optional<DType> parse_dtype(const std::string& name) {
  if (name == "F64") return tensor::kFloat64;
  if (name == "F32") return tensor::kFloat32;
  if (name == "F16") return tensor::kFloat16;
  if (name == "BF16") return tensor::kBFloat16;
  if (name == "I64") return tensor::kInt64;
  if (name == "I32") return tensor::kInt32;
  if (name == "U8") return tensor::kUInt8;
  if (name == "BOOL") return tensor::kBool;
  return std::nullopt;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error(fmt::format("safetensors: {}: {}", path, what));
}

std::string errno_text() { return std::strerror(errno); }

// One tensor's header entry, validated.
struct Entry {
  std::string name;
  DType dtype;
  tensor::Shape shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& info, uint64_t data_size) {
  if (!info.is_object()) fail(path, fmt::format("entry '{}' is not a JSON object", name));
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!info.contains(field)) fail(path, fmt::format("entry '{}' has no '{}'", name, field));
  }
  if (!info["dtype"].is_string()) fail(path, fmt::format("entry '{}': dtype is not a string", name));
  const std::string dtype_name = info["dtype"].get<std::string>();
  const std::optional<DType> dtype = parse_dtype(dtype_name);
  if (!dtype)
    fail(path, fmt::format("entry '{}': unsupported dtype '{}' (tinyddp reads F64, F32, F16, BF16, I64, BOOL)", name,
                           dtype_name));
  Entry entry{name, *dtype, {}, 0, 0};
  if (!info["shape"].is_array()) fail(path, fmt::format("entry '{}': shape is not an array", name));
  uint64_t numel = 1;
  for (const auto& dim : info["shape"]) {
    if (!dim.is_number_unsigned())
      fail(path, fmt::format("entry '{}': shape {} has an entry that is not a non-negative integer", name,
                             info["shape"].dump()));
    const uint64_t size = dim.get<uint64_t>();
    if (size > static_cast<uint64_t>(INT64_MAX) || (size != 0 && numel > data_size / size + 1)) {
      fail(path, fmt::format("entry '{}': shape {} is larger than the file's data", name, info["shape"].dump()));
    }
    numel *= size;
    entry.shape.push_back(static_cast<int64_t>(size));
  }
  const auto& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    fail(path, fmt::format("entry '{}': data_offsets must be [begin, end] with non-negative integers, got {}", name,
                           offsets.dump()));
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.begin > entry.end || entry.end > data_size) {
    fail(path, fmt::format("entry '{}': data_offsets [{}, {}] lie outside the {} bytes of data", name, entry.begin,
                           entry.end, data_size));
  }
  const uint64_t expected = numel * tensor::element_size(entry.dtype);
  if (entry.end - entry.begin != expected) {
    fail(path,
         fmt::format("entry '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", name,
                     info["shape"].dump(), dtype_name, expected, entry.begin, entry.end, entry.end - entry.begin));
  }
  return entry;
}

// Reads and validates safetensors bytes from `in` (`file_size` bytes); `path` names the source
// in errors.
SafetensorsFile parse_stream(std::istream& in, uint64_t file_size, const std::string& path) {
  if (file_size < 8) fail(path, fmt::format("file is {} bytes, too short for the 8-byte header length", file_size));
  uint64_t header_size = 0;
  in.read(reinterpret_cast<char*>(&header_size), 8);
  if (header_size > kMaxSafetensorsHeaderBytes) {
    fail(path, fmt::format("header length {} exceeds the {} byte limit (corrupt file?)", header_size,
                           kMaxSafetensorsHeaderBytes));
  }
  if (header_size > file_size - 8) {
    fail(path,
         fmt::format("header length {} runs past the end of the {}-byte file (truncated?)", header_size, file_size));
  }
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  if (!in) fail(path, "could not read the header");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("header is not valid JSON ({})", e.what()));
  }
  if (!json.is_object()) fail(path, "header is not a JSON object");

  const uint64_t data_size = file_size - 8 - header_size;
  SafetensorsFile result;
  std::vector<Entry> entries;
  for (const auto& [name, info] : json.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) fail(path, "__metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) fail(path, fmt::format("__metadata__ value for '{}' is not a string", key));
        result.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, name, info, data_size));
  }
  // The entries must tile the data exactly: sorted by offset, each starting where the
  // previous ended, the last ending at the end of the file.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t cursor = 0;
  for (const Entry& e : entries) {
    if (e.begin < cursor)
      fail(path, fmt::format("entry '{}' (bytes [{}, {}]) overlaps the previous entry", e.name, e.begin, e.end));
    if (e.begin > cursor)
      fail(path, fmt::format("{} unused bytes before entry '{}' (offset {})", e.begin - cursor, e.name, e.begin));
    cursor = e.end;
  }
  if (cursor != data_size)
    fail(path, fmt::format("{} bytes after the last tensor's data (trailing garbage)", data_size - cursor));

  // Only now read the data.
  for (const Entry& e : entries) {
    Tensor t = tensor::empty(e.shape, e.dtype);
    in.seekg(static_cast<std::streamoff>(8 + header_size + e.begin));
    if (e.end > e.begin) in.read(static_cast<char*>(t.raw_data_ptr()), static_cast<std::streamsize>(e.end - e.begin));
    if (!in) fail(path, fmt::format("could not read the data of entry '{}'", e.name));
    if (e.dtype == tensor::kBool) {
      const auto* bytes = static_cast<const uint8_t*>(t.raw_data_ptr());
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (bytes[i] > 1)
          fail(path, fmt::format("entry '{}': byte {} of a BOOL tensor is {}, not 0 or 1", e.name, i, bytes[i]));
      }
    }
    result.tensors.insert(e.name, t);
  }
  return result;
}

// The padded JSON header for `tensors` and `metadata`; `dense` receives the tensors as
// contiguous CPU tensors, in the order of their data.
std::string header_text(const OrderedDict<Tensor>& tensors, const std::map<std::string, std::string>& metadata,
                        std::vector<Tensor>& dense) {
  tensor::NoGradGuard no_grad;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [key, value] : metadata) meta[key] = value;
  meta["format"] = "pt";
  meta["tinyddp_format_version"] = kFormatVersion;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    TDDP_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' cannot be a tensor name");
    TDDP_CHECK(t.defined(), "save_safetensors: tensor '{}' is undefined", name);
    dense.push_back(t.to(tensor::kCPU).contiguous());
    const uint64_t bytes = dense.back().nbytes();
    header[name] = {
        {"dtype", safetensors_dtype(t.dtype())}, {"shape", t.sizes()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so that the data starts 8-byte aligned
  return text;
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open (" + errno_text() + ")");
  in.seekg(0, std::ios::end);
  const auto file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  return parse_stream(in, file_size, path);
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& what) {
  std::istringstream in(bytes, std::ios::binary);
  return parse_stream(in, bytes.size(), what);
}

std::string serialize_safetensors(const OrderedDict<Tensor>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> dense;
  const std::string text = header_text(tensors, metadata, dense);
  const uint64_t header_size = text.size();
  std::string out(reinterpret_cast<const char*>(&header_size), 8);
  out += text;
  for (const Tensor& t : dense) out.append(static_cast<const char*>(t.raw_data_ptr()), t.nbytes());
  return out;
}

void save_safetensors(const std::string& path, const OrderedDict<Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> dense;
  const std::string text = header_text(tensors, metadata, dense);
  const uint64_t header_size = text.size();

  // Write a temporary file next to the target, then rename it over the target: a crash
  // mid-save leaves the old file intact.
  const std::string temporary = fmt::format("{}.tmp.{}", path, static_cast<long>(getpid()));
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  TDDP_CHECK(file != nullptr, "save_safetensors: cannot create {} ({})", temporary, errno_text());
  bool ok = std::fwrite(&header_size, 8, 1, file) == 1 && std::fwrite(text.data(), 1, text.size(), file) == text.size();
  for (const Tensor& t : dense) {
    if (ok && t.nbytes() > 0) ok = std::fwrite(t.raw_data_ptr(), 1, t.nbytes(), file) == t.nbytes();
  }
  ok = ok && std::fflush(file) == 0 && fsync(fileno(file)) == 0;
  const std::string write_error = ok ? "" : errno_text();
  ok = (std::fclose(file) == 0) && ok;
  if (!ok) {
    std::remove(temporary.c_str());
    throw Error(fmt::format("save_safetensors: writing {} failed ({})", temporary,
                            write_error.empty() ? errno_text() : write_error));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = errno_text();
    std::remove(temporary.c_str());
    throw Error(fmt::format("save_safetensors: cannot rename {} to {} ({})", temporary, path, reason));
  }
}

}  // namespace tinyddp::nn
