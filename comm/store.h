// Store: the small key-value service through which processes find each other (rendezvous):
// set/get/add/compare_set/check/wait/delete_key/num_keys, every blocking call bounded by a
// timeout. HashStore serves threads of one process; PrefixStore namespaces another store;
// TCPStore (tcp_store.h) reaches across processes and machines.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tinyddp/base/error.h"

namespace tinyddp::comm {

using Millis = std::chrono::milliseconds;
using Bytes = std::vector<uint8_t>;

inline constexpr Millis kDefaultStoreTimeout{60000};

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // The value of `key`, waiting up to timeout() for it to be set.
  virtual Bytes get(const std::string& key) = 0;
  // Adds `delta` to the integer stored at `key` (missing: 0) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its current value is `expected` (a missing key matches an
  // empty `expected`); returns the value the key holds afterwards.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // True when every key exists (does not wait).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Waits until every key exists; throws TimeoutError naming the missing keys.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;

  Millis timeout() const { return timeout_; }
  void set_timeout(Millis timeout) { timeout_ = timeout; }

  // String conveniences.
  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key) {
    const Bytes value = get(key);
    return std::string(value.begin(), value.end());
  }

 protected:
  Millis timeout_ = kDefaultStoreTimeout;
};

// "[a, b]" for error messages.
std::string format_keys(const std::vector<std::string>& keys);

// store_allgather's error when some parties never wrote: missing() holds their indices, for
// the caller to name them in its own words (ranks, nodes).
class PartiesMissing : public TimeoutError {
 public:
  PartiesMissing(const std::string& message, std::vector<int> missing)
      : TimeoutError(message), missing_(std::move(missing)) {}
  const std::vector<int>& missing() const { return missing_; }

 private:
  std::vector<int> missing_;
};

// Each of `size` parties says `mine` to all the others through the store: party `index` sets
// `prefix` + its index, waits up to `timeout` until every party has, and returns every value
// (party i's at i). Throws PartiesMissing, naming the parties
// that never said theirs, past the timeout; the store's own errors (a lost connection) as they
// are.
std::vector<std::string> store_allgather(Store& store, const std::string& prefix, int index, int size,
                                         const std::string& mine, Millis timeout);
// store_allgather as a barrier: the same keys and errors, and no values read back.
void store_barrier(Store& store, const std::string& prefix, int index, int size, Millis timeout);

// An in-process store for ranks that are threads of one process.
class HashStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> data_;
};

// Prefixes every key with "<prefix>/", so that several groups share one store.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  using Store::wait;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;  // of the underlying store, as PyTorch's PrefixStore

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> store_;
};

// Shared by the stores: the integer stored by add() (decimal text, as PyTorch), parsed.
int64_t parse_counter(const Bytes& value, const std::string& key);

}  // namespace tinyddp::comm
