// Value: what a PyTorch forward may return, nested: a tensor, a list (or tuple) of values, or a
// dict of values by string key (in insertion order, as Python's), or nothing. Module::
// forward_nested returns one and DDP passes it through, finding every tensor in it for
// find_unused_parameters and static_graph, as PyTorch's _find_tensors does.
//
//   return nn::Value::dict({{"boxes", boxes}, {"scores", nn::Value::list({s1, s2})}});
//   out["scores"][1].tensor()
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tinyddp/tensor/tensor.h"

namespace tinyddp::nn {

using tensor::Tensor;

class Value {
 public:
  enum class Kind { kNone, kTensor, kList, kDict };
  using Entries = std::vector<std::pair<std::string, Value>>;

  Value() = default;
  Value(Tensor t);  // NOLINT(google-explicit-constructor): a tensor is a value
  static Value list(std::vector<Value> items);
  static Value dict(Entries entries);  // keys must differ

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  // The parts; each throws, saying what the value is, when it is something else.
  const Tensor& tensor() const;
  const std::vector<Value>& items() const;
  const Entries& entries() const;
  const Value& operator[](size_t index) const;
  const Value& operator[](int index) const;  // (v[0] would otherwise also read as a null key)
  const Value& operator[](const std::string& key) const;
  const Value& operator[](const char* key) const { return (*this)[std::string(key)]; }
  size_t size() const;  // of a list or dict

  // Every tensor, depth first in order (a dict's in insertion order).
  std::vector<Tensor> tensors() const;
  // The same structure with its tensors replaced, depth first, by `replacements` (as many).
  Value with_tensors(const std::vector<Tensor>& replacements) const;
  // "list[tensor [2, 3], dict{a: tensor [1]}]", for messages.
  std::string describe() const;

 private:
  Value with_tensors(const std::vector<Tensor>& replacements, size_t& next) const;
  Kind kind_ = Kind::kNone;
  Tensor tensor_;
  std::vector<Value> items_;
  Entries entries_;
};

}  // namespace tinyddp::nn
