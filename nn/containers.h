// Containers, as torch.nn.ModuleList and torch.nn.ModuleDict: modules held in a list or by
// key and registered as children (a list's as "0", "1", ...), so that their parameters belong
// to the model that holds the container, under PyTorch's names ("layers.0.weight",
// "heads.cls.bias"): a state dict saved on either side loads on the other. Neither has a
// forward; the model that holds one calls its modules in its own forward. (Sequential, which
// runs its children in order, is in layers.h.) ParameterList and ParameterDict hold
// parameters the same way ("scales.0", "gains.encoder").
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tinyddp/nn/module.h"

namespace tinyddp::nn {

class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  explicit ModuleList(const std::vector<std::shared_ptr<Module>>& modules);
  // torch's append and extend; push_back is append.
  void append(std::shared_ptr<Module> module);
  void push_back(std::shared_ptr<Module> module) { append(std::move(module)); }
  void extend(const std::vector<std::shared_ptr<Module>>& modules);
  size_t size() const { return named_children().size(); }
  bool empty() const { return named_children().empty(); }
  // list[i], a negative i counting from the end as in Python; out of range is an error.
  std::shared_ptr<Module> operator[](int64_t index) const;
  // list[i] as the module type it is (a wrong type is an error naming both).
  template <class M>
  std::shared_ptr<M> at(int64_t index) const {
    const std::shared_ptr<Module> m = (*this)[index];
    auto typed = std::dynamic_pointer_cast<M>(m);
    TDDP_CHECK(typed != nullptr, "ModuleList: module {} is a {}, not the type asked for", index, m->type_name());
    return typed;
  }
  // Range-for over the modules: the children themselves, in order (so a replace_module shows).
  class const_iterator {
   public:
    using Inner = decltype(std::declval<const OrderedDict<std::shared_ptr<Module>>&>().begin());
    explicit const_iterator(Inner it) : it_(it) {}
    const std::shared_ptr<Module>& operator*() const { return it_->second; }
    const_iterator& operator++() {
      ++it_;
      return *this;
    }
    bool operator!=(const const_iterator& other) const { return it_ != other.it_; }

   private:
    Inner it_;
  };
  const_iterator begin() const { return const_iterator(named_children().begin()); }
  const_iterator end() const { return const_iterator(named_children().end()); }
  Tensor forward(const Tensor& input) override;  // an error that says to call the modules
  std::shared_ptr<Module> clone_structure() const override;
};

class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  explicit ModuleDict(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules);
  // dict[key] = module: a new key is added at the end, an existing one replaced in place.
  void insert(const std::string& key, std::shared_ptr<Module> module);
  void update(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& modules);
  // dict[key]; a missing key is an error naming it and the keys there are.
  std::shared_ptr<Module> operator[](const std::string& key) const;
  template <class M>
  std::shared_ptr<M> at(const std::string& key) const {
    const std::shared_ptr<Module> m = (*this)[key];
    auto typed = std::dynamic_pointer_cast<M>(m);
    TDDP_CHECK(typed != nullptr, "ModuleDict: module '{}' is a {}, not the type asked for", key, m->type_name());
    return typed;
  }
  bool contains(const std::string& key) const { return named_children().contains(key); }
  size_t size() const { return named_children().size(); }
  std::vector<std::string> keys() const { return named_children().keys(); }
  std::vector<std::shared_ptr<Module>> values() const { return children(); }
  const OrderedDict<std::shared_ptr<Module>>& items() const { return named_children(); }
  Tensor forward(const Tensor& input) override;  // an error that says to call the modules
  std::shared_ptr<Module> clone_structure() const override;
};

// torch.nn.ParameterList: tensors registered as parameters "0", "1", ... (requiring grad).
class ParameterList : public Module {
 public:
  ParameterList() : Module("ParameterList") {}
  explicit ParameterList(const std::vector<Tensor>& params);
  void append(const Tensor& param);
  void push_back(const Tensor& param) { append(param); }
  void extend(const std::vector<Tensor>& params);
  size_t size() const { return parameters(false).size(); }
  bool empty() const { return size() == 0; }
  // list[i], a negative i counting from the end; out of range is an error.
  Tensor operator[](int64_t index) const;
  // Range-for over the parameters, in order.
  std::vector<Tensor>::const_iterator begin() const;
  std::vector<Tensor>::const_iterator end() const;
  std::string extra_repr() const override;       // PyTorch's "(0): Parameter containing: [...]" lines
  Tensor forward(const Tensor& input) override;  // an error: a container has no forward
  std::shared_ptr<Module> clone_structure() const override;

 private:
  std::vector<Tensor> items_;  // the registered tensors, for iteration
};

// torch.nn.ParameterDict: parameters by key, in insertion order (as an OrderedDict given to
// PyTorch's; a plain Python dict given to PyTorch 1.13's is sorted first).
class ParameterDict : public Module {
 public:
  ParameterDict() : Module("ParameterDict") {}
  explicit ParameterDict(const std::vector<std::pair<std::string, Tensor>>& params);
  // dict[key] = param: a new key is added at the end, an existing one replaced in place.
  void insert(const std::string& key, const Tensor& param);
  void update(const std::vector<std::pair<std::string, Tensor>>& params);
  // dict[key]; a missing key is an error naming it and the keys there are.
  Tensor operator[](const std::string& key) const;
  bool contains(const std::string& key) const { return named_parameters(false).contains(key); }
  size_t size() const { return named_parameters(false).size(); }
  std::vector<std::string> keys() const { return named_parameters(false).keys(); }
  std::vector<Tensor> values() const { return parameters(false); }
  OrderedDict<Tensor> items() const { return named_parameters(false); }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone_structure() const override;
};

}  // namespace tinyddp::nn
