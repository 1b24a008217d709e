// Value (value.h): construction, the checked accessors, and the depth-first walk that finds
// and replaces its tensors.
#include "tinyddp/nn/value.h"

#include <algorithm>
#include <unordered_set>

#include "tinyddp/base/error.h"

namespace tinyddp::nn {

namespace {

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNone: return "none";
    case Value::Kind::kTensor: return "a tensor";
    case Value::Kind::kList: return "a list";
    case Value::Kind::kDict: return "a dict";
    case Value::Kind::kBool: return "a bool";
    case Value::Kind::kInt: return "an int";
    case Value::Kind::kDouble: return "a float";
    case Value::Kind::kString: return "a string";
  }
  return "?";
}

}  // namespace

Value::Value(Tensor t) : kind_(Kind::kTensor), tensor_(std::move(t)) {}
Value::Value(bool b) : kind_(Kind::kBool), int_(b ? 1 : 0) {}
Value::Value(int64_t i) : kind_(Kind::kInt), int_(i) {}
Value::Value(double d) : kind_(Kind::kDouble), double_(d) {}
Value::Value(std::string s) : kind_(Kind::kString), string_(std::move(s)) {}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.items_ = std::move(items);
  return v;
}

Value Value::dict(Entries entries) {
  std::unordered_set<std::string> keys;
  for (const auto& [key, value] : entries) TDDP_CHECK(keys.insert(key).second, "Value::dict: duplicate key '{}'", key);
  Value v;
  v.kind_ = Kind::kDict;
  v.entries_ = std::move(entries);
  return v;
}

const Tensor& Value::tensor() const {
  TDDP_CHECK(is_tensor(), "Value: expected a tensor, got {}", describe());
  return tensor_;
}

const std::vector<Value>& Value::items() const {
  TDDP_CHECK(is_list(), "Value: expected a list, got {}", describe());
  return items_;
}

const Value::Entries& Value::entries() const {
  TDDP_CHECK(is_dict(), "Value: expected a dict, got {}", describe());
  return entries_;
}

bool Value::as_bool() const {
  TDDP_CHECK(is_bool(), "Value: expected a bool, got {}", describe());
  return int_ != 0;
}

int64_t Value::as_int() const {
  TDDP_CHECK(is_int(), "Value: expected an int, got {}", describe());
  return int_;
}

double Value::as_double() const {
  TDDP_CHECK(is_double() || is_int(), "Value: expected a float, got {}", describe());
  return is_double() ? double_ : static_cast<double>(int_);
}

const std::string& Value::as_string() const {
  TDDP_CHECK(is_string(), "Value: expected a string, got {}", describe());
  return string_;
}

const Value& Value::operator[](size_t index) const {
  const std::vector<Value>& list = items();
  TDDP_CHECK(index < list.size(), "Value: index {} is out of range for a list of {}", index, list.size());
  return list[index];
}

const Value& Value::operator[](int index) const {
  TDDP_CHECK(index >= 0, "Value: index {} is negative", index);
  return (*this)[static_cast<size_t>(index)];
}

const Value& Value::operator[](const std::string& key) const {
  for (const auto& [k, value] : entries()) {
    if (k == key) return value;
  }
  throw Error(fmt::format("Value: no key '{}' in {}", key, describe()));
}

Value Value::get(const std::string& key) const { return get(key, Value()); }

Value Value::get(const std::string& key, const Value& fallback) const {
  for (const auto& [k, value] : entries()) {
    if (k == key) return value;
  }
  return fallback;
}

bool Value::contains(const std::string& key) const {
  const Entries& all = entries();
  return std::any_of(all.begin(), all.end(), [&](const auto& entry) { return entry.first == key; });
}

void Value::set(const std::string& key, Value value) {
  TDDP_CHECK(is_dict(), "Value: set('{}') on {}, not a dict", key, describe());
  for (auto& [k, existing] : entries_) {
    if (k == key) {
      existing = std::move(value);
      return;
    }
  }
  entries_.emplace_back(key, std::move(value));
}

size_t Value::size() const {
  TDDP_CHECK(is_list() || is_dict(), "Value: size() of {}", describe());
  return is_list() ? items_.size() : entries_.size();
}

std::vector<Tensor> Value::tensors() const {
  std::vector<Tensor> out;
  if (is_tensor()) out.push_back(tensor_);
  for (const Value& item : items_) {
    for (Tensor& t : item.tensors()) out.push_back(std::move(t));
  }
  for (const auto& [key, value] : entries_) {
    for (Tensor& t : value.tensors()) out.push_back(std::move(t));
  }
  return out;
}

Value Value::with_tensors(const std::vector<Tensor>& replacements) const {
  size_t next = 0;
  Value out = with_tensors(replacements, next);
  TDDP_CHECK(next == replacements.size(), "Value::with_tensors: {} replacements for the {} tensors of {}",
             replacements.size(), next, describe());
  return out;
}

Value Value::with_tensors(const std::vector<Tensor>& replacements, size_t& next) const {
  switch (kind_) {
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kDouble:
    case Kind::kString: return *this;  // no tensor inside
    case Kind::kTensor:
      TDDP_CHECK(next < replacements.size(), "Value::with_tensors: too few replacements for {}", describe());
      return Value(replacements[next++]);
    case Kind::kList: {
      std::vector<Value> items;
      for (const Value& item : items_) items.push_back(item.with_tensors(replacements, next));
      return list(std::move(items));
    }
    case Kind::kDict: {
      Entries entries;
      for (const auto& [key, value] : entries_) entries.emplace_back(key, value.with_tensors(replacements, next));
      return dict(std::move(entries));
    }
  }
  return Value();
}

std::string Value::describe() const {
  switch (kind_) {
    case Kind::kNone: return "none";
    case Kind::kBool: return int_ != 0 ? "true" : "false";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kDouble: return fmt::format("{}", double_);
    case Kind::kString: return "'" + string_ + "'";
    case Kind::kTensor: return "tensor " + (tensor_.defined() ? tensor::format_shape(tensor_.sizes()) : "(undefined)");
    case Kind::kList: {
      std::string s = "list[";
      for (size_t i = 0; i < items_.size(); ++i) s += (i ? ", " : "") + items_[i].describe();
      return s + "]";
    }
    case Kind::kDict: {
      std::string s = "dict{";
      for (size_t i = 0; i < entries_.size(); ++i) {
        s += (i ? ", " : "") + entries_[i].first + ": " + entries_[i].second.describe();
      }
      return s + "}";
    }
  }
  return kind_name(kind_);
}

}  // namespace tinyddp::nn
