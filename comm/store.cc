// HashStore (an in-process map, for rank threads in tests) and PrefixStore (a namespace of
// keys over another store), with the Store semantics of store.h: set, get, compare_set,
// check, wait with a timeout, delete.
#include "tinyddp/comm/store.h"

#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tinyddp::comm {

std::string format_keys(const std::vector<std::string>& keys) { return fmt::format("[{}]", fmt::join(keys, ", ")); }

namespace {
// Party `index` sets its key under `prefix` and waits for every party's; returns the keys.
std::vector<std::string> say_and_wait(Store& store, const std::string& prefix, int index, int size,
                                      const std::string& mine, Millis timeout) {
  std::vector<std::string> keys;
  for (int i = 0; i < size; ++i) keys.push_back(prefix + std::to_string(i));
  store.set(keys[static_cast<size_t>(index)], mine);
  try {
    store.wait(keys, timeout);
  } catch (const TimeoutError& e) {
    std::vector<int> missing;
    for (int i = 0; i < size; ++i) {
      if (!store.check({keys[static_cast<size_t>(i)]})) missing.push_back(i);
    }
    const std::string message = fmt::format("parties [{}] of {} did not write '{}<index>' within {} ms ({})",
                                            fmt::join(missing, ", "), size, prefix, timeout.count(), e.what());
    throw PartiesMissing(message, std::move(missing));
  }
  return keys;
}
}  // namespace

std::vector<std::string> store_allgather(Store& store, const std::string& prefix, int index, int size,
                                         const std::string& mine, Millis timeout) {
  std::vector<std::string> all;
  for (const std::string& key : say_and_wait(store, prefix, index, size, mine, timeout)) {
    all.push_back(store.get_string(key));
  }
  return all;
}

void store_barrier(Store& store, const std::string& prefix, int index, int size, Millis timeout) {
  say_and_wait(store, prefix, index, size, "1", timeout);
}

int64_t parse_counter(const Bytes& value, const std::string& key) {
  int64_t result = 0;
  const auto* begin = reinterpret_cast<const char*>(value.data());
  const auto [ptr, ec] = std::from_chars(begin, begin + value.size(), result);
  TDDP_CHECK(ec == std::errc() && ptr == begin + value.size(),
             "store: add on key '{}' whose value is not an integer counter", key);
  return result;
}

namespace {
Bytes counter_bytes(int64_t value) {
  const std::string text = std::to_string(value);
  return Bytes(text.begin(), text.end());
}
}  // namespace

void HashStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
  }
  changed_.notify_all();
}

Bytes HashStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard<std::mutex> lock(mutex_);
  return data_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = data_.find(key);
    result = (it == data_.end() ? 0 : parse_counter(it->second, key)) + delta;
    data_[key] = counter_bytes(result);
  }
  changed_.notify_all();
  return result;
}

Bytes HashStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Bytes result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = data_.find(key);
    if ((it == data_.end() && expected.empty()) || (it != data_.end() && it->second == expected)) {
      data_[key] = desired;
      result = desired;
    } else {
      result = it == data_.end() ? Bytes() : it->second;
    }
  }
  changed_.notify_all();
  return result;
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& key : keys) {
    if (data_.count(key) == 0) return false;
  }
  return true;
}

void HashStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto all_present = [&] {
    for (const auto& key : keys) {
      if (data_.count(key) == 0) return false;
    }
    return true;
  };
  if (changed_.wait_for(lock, timeout, all_present)) return;
  std::vector<std::string> missing;
  for (const auto& key : keys) {
    if (data_.count(key) == 0) missing.push_back(key);
  }
  throw TimeoutError(fmt::format("store: timed out after {} ms waiting for keys {} (missing: {})", timeout.count(),
                                 format_keys(keys), format_keys(missing)));
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return data_.erase(key) > 0;
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(data_.size());
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : prefix_(std::move(prefix)), store_(std::move(store)) {
  TDDP_CHECK(store_ != nullptr, "PrefixStore: the underlying store is null");
  timeout_ = store_->timeout();
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& key : keys) out.push_back(full(key));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { store_->set(full(key), value); }
Bytes PrefixStore::get(const std::string& key) {
  store_->wait({full(key)}, timeout_);
  return store_->get(full(key));
}
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return store_->add(full(key), delta); }
Bytes PrefixStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  return store_->compare_set(full(key), expected, desired);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return store_->check(full(keys)); }
void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) { store_->wait(full(keys), timeout); }
bool PrefixStore::delete_key(const std::string& key) { return store_->delete_key(full(key)); }
int64_t PrefixStore::num_keys() { return store_->num_keys(); }

}  // namespace tinyddp::comm
