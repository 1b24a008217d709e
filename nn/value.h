// Value: what a PyTorch forward may take as keyword arguments or return, nested: a tensor, a
// list (or tuple) of values, a dict of values by string key (in insertion order, as Python's),
// a bool, an int, a float, a string, or nothing (None). Module::forward_nested returns one and
// DDP passes it through, finding every tensor in it for find_unused_parameters and
// static_graph, as PyTorch's _find_tensors does (other leaves are passed over); a dict of them
// is a forward's keyword arguments (Module::forward_kwargs).
//
//   return nn::Value::dict({{"boxes", boxes}, {"scores", nn::Value::list({s1, s2})}});
//   out["scores"][1].tensor()
//   nn::Value kwargs = nn::Value::dict({{"bias", b}, {"scale", 0.5}, {"causal", true}});
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn {

using tensor::Tensor;

class Value {
 public:
  enum class Kind { kNone, kTensor, kList, kDict, kBool, kInt, kDouble, kString };
  using Entries = std::vector<std::pair<std::string, Value>>;

  Value() = default;
  // NOLINTBEGIN(google-explicit-constructor): each of these is a value, as in Python
  Value(Tensor t);
  Value(bool b);
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(int64_t i);
  Value(double d);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  template <typename T>
  Value(const T* pointer) = delete;  // not silently a bool
  // NOLINTEND(google-explicit-constructor)
  static Value list(std::vector<Value> items);
  static Value dict(Entries entries = {});  // keys must differ

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_double() const { return kind_ == Kind::kDouble; }
  bool is_string() const { return kind_ == Kind::kString; }
  // The parts; each throws, saying what the value is, when it is something else.
  const Tensor& tensor() const;
  const std::vector<Value>& items() const;
  const Entries& entries() const;
  bool as_bool() const;
  int64_t as_int() const;
  double as_double() const;  // a float, or an int (as Python's float(x))
  const std::string& as_string() const;
  const Value& operator[](size_t index) const;
  const Value& operator[](int index) const;  // (v[0] would otherwise also read as a null key)
  const Value& operator[](const std::string& key) const;
  const Value& operator[](const char* key) const { return (*this)[std::string(key)]; }
  size_t size() const;  // of a list or dict
  // A dict's entry by key, or `fallback` (none) when it has none (Python's dict.get).
  Value get(const std::string& key) const;
  Value get(const std::string& key, const Value& fallback) const;
  bool contains(const std::string& key) const;  // of a dict
  // Sets a dict's entry (in its place when the key is there, else last), as d[key] = value.
  void set(const std::string& key, Value value);

  // Every tensor, depth first in order (a dict's in insertion order).
  std::vector<Tensor> tensors() const;
  // The same structure with its tensors replaced, depth first, by `replacements` (as many).
  Value with_tensors(const std::vector<Tensor>& replacements) const;
  // "list[tensor [2, 3], dict{a: tensor [1], b: 0.5, c: 'text'}]", for messages.
  std::string describe() const;

 private:
  Value with_tensors(const std::vector<Tensor>& replacements, size_t& next) const;
  Kind kind_ = Kind::kNone;
  Tensor tensor_;
  int64_t int_ = 0;  // also a bool's
  double double_ = 0.0;
  std::string string_;
  std::vector<Value> items_;
  Entries entries_;
};

}  // namespace tinyddp::nn
