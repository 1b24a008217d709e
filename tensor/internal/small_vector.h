// SmallVector<T, N>: a vector of trivially copyable T that keeps up to N elements inside the
// object and only uses the heap beyond that. Shapes and strides (Shape = SmallVector<int64_t,
// 6>) therefore cost no allocation, which matters for the many tiny tensors of a training
// step. The interface is the part of std::vector that tinyddp uses.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <type_traits>

namespace tinyddp::tensor {

template <typename T, size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>, "SmallVector holds trivially copyable elements only");

 public:
  using value_type = T;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() = default;
  SmallVector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  explicit SmallVector(size_t count, const T& value = T()) {
    reserve(count);
    std::fill_n(data_, count, value);
    size_ = count;
  }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  SmallVector(const SmallVector& other) { assign(other.begin(), other.end()); }
  SmallVector(SmallVector&& other) noexcept { take(other); }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) {
      size_ = 0;
      assign(other.begin(), other.end());
    }
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  ~SmallVector() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  iterator begin() { return data_; }
  iterator end() { return data_ + size_; }
  const_iterator begin() const { return data_; }
  const_iterator end() const { return data_ + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T& front() { return data_[0]; }
  const T& front() const { return data_[0]; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t capacity) {
    if (capacity <= capacity_) return;
    const size_t grown = std::max(capacity, capacity_ * 2);
    T* heap = static_cast<T*>(std::malloc(grown * sizeof(T)));
    if (heap == nullptr) throw std::bad_alloc();
    if (size_ > 0) std::memcpy(heap, data_, size_ * sizeof(T));
    release();
    data_ = heap;
    capacity_ = grown;
  }
  void resize(size_t count, const T& value = T()) {
    reserve(count);
    if (count > size_) std::fill(data_ + size_, data_ + count, value);
    size_ = count;
  }
  void clear() { size_ = 0; }
  void push_back(const T& value) {
    if (size_ == capacity_) {
      const T copy = value;  // `value` may live inside this vector
      reserve(size_ + 1);
      data_[size_++] = copy;
    } else {
      data_[size_++] = value;
    }
  }
  void pop_back() { --size_; }

  iterator insert(const_iterator pos, const T& value) { return insert(pos, &value, &value + 1); }
  iterator insert(const_iterator pos, std::initializer_list<T> values) {
    return insert(pos, values.begin(), values.end());
  }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  iterator insert(const_iterator pos, It first, It last) {
    const size_t index = static_cast<size_t>(pos - data_);
    const SmallVector inserted(first, last);  // a copy: the range may alias this vector
    const size_t count = inserted.size();
    reserve(size_ + count);
    std::memmove(data_ + index + count, data_ + index, (size_ - index) * sizeof(T));
    if (count > 0) std::memcpy(data_ + index, inserted.data_, count * sizeof(T));
    size_ += count;
    return data_ + index;
  }
  iterator erase(const_iterator pos) {
    const size_t index = static_cast<size_t>(pos - data_);
    std::memmove(data_ + index, data_ + index + 1, (size_ - index - 1) * sizeof(T));
    --size_;
    return data_ + index;
  }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const SmallVector& a, const SmallVector& b) { return !(a == b); }

 private:
  template <typename It>
  void assign(It first, It last) {
    const auto count = static_cast<size_t>(std::distance(first, last));
    reserve(count);
    std::copy(first, last, data_);
    size_ = count;
  }
  void release() {
    if (data_ != inline_) std::free(data_);
    data_ = inline_;
    capacity_ = N;
  }
  // Moves other's contents into this (empty, inline) vector and empties other.
  void take(SmallVector& other) {
    if (other.data_ == other.inline_) {
      std::memcpy(inline_, other.inline_, other.size_ * sizeof(T));
      data_ = inline_;
      capacity_ = N;
    } else {
      data_ = other.data_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_;
      other.capacity_ = N;
    }
    size_ = other.size_;
    other.size_ = 0;
  }

  T inline_[N];
  T* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = N;
};

}  // namespace tinyddp::tensor
