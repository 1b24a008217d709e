// TCPStore: the Store across processes and machines. One process runs the server (rank 0,
// or the launcher); every process, the server's included, talks to it as a client over TCP.
//
// Protocol (little-endian): a request is [u32 body length][u8 command][fields], a response
// [u32 body length][u8 status][fields]; strings and values are [u32 length][bytes], integers
// i64. Bodies over `max_message_bytes` or that do not parse close that connection with a
// message on stderr; the server keeps serving everyone else.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "tinyddp/comm/store.h"

namespace tinyddp::comm {

struct TCPStoreOptions {
  // The server's address (the server binds to it).
  TCPStoreOptions& host(std::string v) {
    host_ = std::move(v);
    return *this;
  }
  // 0 for the server: pick a free port (see TCPStore::port()).
  TCPStoreOptions& port(uint16_t v) {
    port_ = v;
    return *this;
  }
  TCPStoreOptions& is_server(bool v) {
    is_server_ = v;
    return *this;
  }
  // For connecting and for every wait.
  TCPStoreOptions& timeout(Millis v) {
    timeout_ = v;
    return *this;
  }
  TCPStoreOptions& max_message_bytes(uint32_t v) {
    max_message_bytes_ = v;
    return *this;
  }
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  bool is_server() const { return is_server_; }
  Millis timeout() const { return timeout_; }
  uint32_t max_message_bytes() const { return max_message_bytes_; }

 private:
  std::string host_ = "127.0.0.1";
  uint16_t port_ = 0;
  bool is_server_ = false;
  Millis timeout_ = kDefaultStoreTimeout;
  uint32_t max_message_bytes_ = 64u << 20;
};

class TCPStoreServer;

class TCPStore final : public Store {
 public:
  // Starts the server first when options.is_server(); then connects, retrying until the
  // timeout (a server that is not up yet is normal during start-up). A connection that drops
  // later is made again, within the timeout, and the request retried once when that is safe:
  // a request that did not reach the server, or one that may run twice (all but add and
  // compare_set, which fail with the reason when the connection dropped after they were
  // sent). A server that refuses the new connection is gone: that is reported at once.
  explicit TCPStore(const TCPStoreOptions& options);
  ~TCPStore() override;
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  uint16_t port() const { return port_; }
  const std::string& host() const { return host_; }

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
  struct Request;
  // Sends one request and returns the response fields (throws on I/O errors or a server error).
  Bytes call(const Request& request, Millis io_timeout);
  // One attempt of call() on the current connection; `sent` says whether the request went out.
  Bytes call_once(const Request& request, Millis io_timeout, bool& sent);
  // (Re)connects, retrying until `deadline`; throws a TimeoutError with the last reason.
  // A refused connection is retried at start-up (the server may not be up yet), and final
  // when `reconnecting` (the server is gone).
  void connect(std::chrono::steady_clock::time_point deadline, bool reconnecting);

  std::unique_ptr<TCPStoreServer> server_;
  std::string host_;
  uint16_t port_ = 0;
  int fd_ = -1;
  uint32_t max_message_bytes_;
  std::mutex mutex_;  // one request at a time on the connection
  int reconnects_ = 0;

 public:
  // How many times the connection was made again after dropping (for tests and logs).
  int reconnects() const { return reconnects_; }
};

}  // namespace tinyddp::comm
