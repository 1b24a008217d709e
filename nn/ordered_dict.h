// OrderedDict: name -> value in insertion order with lookup by name, the container behind
// named_parameters(), state_dict() and safetensors files (as Python's OrderedDict in PyTorch).
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tinyddp/base/error.h"

namespace tinyddp::nn {

template <typename V>
class OrderedDict {
 public:
  using Item = std::pair<std::string, V>;

  // Appends; throws if the name is already present.
  void insert(std::string name, V value) {
    TDDP_CHECK(!contains(name), "OrderedDict: duplicate key '{}'", name);
    index_.emplace(name, items_.size());
    items_.emplace_back(std::move(name), std::move(value));
  }
  // Replaces the value of an existing key, or appends a new one.
  void set(const std::string& name, V value) {
    if (auto it = index_.find(name); it != index_.end()) {
      items_[it->second].second = std::move(value);
    } else {
      insert(name, std::move(value));
    }
  }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const V* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  const V& at(const std::string& name) const {
    const V* value = find(name);
    TDDP_CHECK(value != nullptr, "OrderedDict: no key '{}'", name);
    return *value;
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const auto& item : items_) out.push_back(item.first);
    return out;
  }
  std::vector<V> values() const {
    std::vector<V> out;
    for (const auto& item : items_) out.push_back(item.second);
    return out;
  }
  typename std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  typename std::vector<Item>::const_iterator end() const { return items_.end(); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace tinyddp::nn
