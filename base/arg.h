// TINYDDP_ARG(T, name): one field of an options struct with libtorch's accessors (as its
// TORCH_ARG): the setter name(v) returns the options so that setters chain, the getter name()
// reads the value, and the field name_ takes its default after the macro:
//   struct PoolOptions {
//     TINYDDP_ARG(int64_t, stride) = 1;  // PoolOptions().stride(2).stride() == 2
//   };
// The macro leaves the struct's access at private: write the constructor before the fields.
#pragma once

#define TINYDDP_ARG(T, name)                      \
 public:                                          \
  auto& name(const T& new_##name) {               \
    this->name##_ = new_##name;                   \
    return *this;                                 \
  }                                               \
  const T& name() const { return this->name##_; } \
                                                  \
 private:                                         \
  T name##_
