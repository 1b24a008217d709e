// TCPStoreServer: the server side of TCPStore (tcp_store.h), run by rank 0 or the launcher.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <thread>

#include "tinyddp/comm/store.h"

namespace tinyddp::comm {

// The server: a listening socket, an accept thread, one thread per client connection, and
// the key-value map they share. Destroying it answers the requests in flight, then closes
// every connection and joins every thread.
class TCPStoreServer {
 public:
  TCPStoreServer(const std::string& host, uint16_t port, uint32_t max_message_bytes);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;
  uint16_t port() const { return port_; }

 private:
  struct Connection {
    int fd;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void accept_loop();
  void serve(Connection* connection);
  // Handles one request body; returns the response body. Throws on malformed input.
  Bytes handle(const Bytes& body);

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};  // written on shutdown to wake the accept loop
  uint16_t port_ = 0;
  uint32_t max_message_bytes_;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::mutex connections_mutex_;
  std::list<Connection> connections_;
  HashStore data_;  // the keys live here; its wait() gives the blocking semantics
};

}  // namespace tinyddp::comm
