// TCPStoreServer (tcp_store_server.h): an accept thread and a thread per connection, which
// serves each request (set, get, add, compare_set, check, wait, delete, the key count) on the
// shared map; a wait is answered when its keys appear or its timeout passes.
#include "tinyddp/comm/tcp_store_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>

#include <fmt/format.h>

#include "tinyddp/comm/socket.h"
#include "tinyddp/comm/tcp_store_protocol.h"

namespace tinyddp::comm {

using namespace store_protocol;
using net::Clock;

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port, uint32_t max_message_bytes)
    : max_message_bytes_(max_message_bytes) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result);
  TDDP_CHECK(rc == 0, "TCPStore server: cannot resolve {}:{} ({})", host, port, gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = result; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 512) == 0) {
      listen_fd_ = fd;
    } else {
      last_error = net::errno_text(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(result);
  TDDP_CHECK(listen_fd_ >= 0, "TCPStore server: cannot listen on {}:{} ({})", host, port, last_error);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = net::port_of(bound);
  TDDP_CHECK(::pipe2(wake_pipe_, O_CLOEXEC) == 0, "TCPStore server: pipe failed ({})", net::errno_text(errno));
  data_.set_timeout(Millis(0));
  accept_thread_ = std::thread([this] { accept_loop(); });
}

TCPStoreServer::~TCPStoreServer() {
  stopping_ = true;
  const char byte = 1;
  if (::write(wake_pipe_[1], &byte, 1) < 0) {
  }  // nothing more to do: the loops also poll `stopping_`
  if (accept_thread_.joinable()) accept_thread_.join();
  // Graceful: each connection thread sees the wake pipe while it waits for its next request
  // and stops; a request already being handled still gets its response.
  for (Connection& c : connections_) {
    if (c.thread.joinable()) c.thread.join();
    ::close(c.fd);
  }
  net::close_fd(listen_fd_);
  net::close_fd(wake_pipe_[0]);
  net::close_fd(wake_pipe_[1]);
}

void TCPStoreServer::accept_loop() {
  while (!stopping_) {
    if (!net::wait_ready(listen_fd_, POLLIN, Clock::now() + Millis(1000), wake_pipe_[0])) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    net::set_nodelay(fd);
    std::lock_guard<std::mutex> lock(connections_mutex_);
    // Reap finished connections so that a long-lived server does not accumulate them.
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->done) {
        it->thread.join();
        ::close(it->fd);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
    Connection& c = connections_.emplace_back();
    c.fd = fd;
    c.thread = std::thread([this, &c] { serve(&c); });
  }
}

void TCPStoreServer::serve(Connection* connection) {
  const int fd = connection->fd;
  while (!stopping_) {
    // Idle clients may wait for a long time between requests: no deadline for the header.
    uint32_t length = 0;
    std::string error = net::recv_exact(fd, &length, 4, Clock::time_point::max(), wake_pipe_[0]);
    if (!error.empty()) break;  // the client went away, or shutdown
    if (length == 0 || length > max_message_bytes_) {
      std::cerr << fmt::format("tinyddp TCPStore: closing a connection: request of {} bytes (limit {})\n", length,
                               max_message_bytes_);
      break;
    }
    Bytes body(length);
    error = net::recv_exact(fd, body.data(), length, Clock::now() + Millis(30000), wake_pipe_[0]);
    if (!error.empty()) {
      std::cerr << "tinyddp TCPStore: closing a connection: " << error << " in the middle of a request\n";
      break;
    }
    Bytes response;
    try {
      response = handle(body);
    } catch (const std::exception& e) {
      std::cerr << "tinyddp TCPStore: closing a connection: malformed request (" << e.what() << ")\n";
      break;
    }
    uint32_t response_length = static_cast<uint32_t>(response.size());
    if (!net::send_exact(fd, &response_length, 4, Clock::now() + Millis(30000)).empty() ||
        !net::send_exact(fd, response.data(), response.size(), Clock::now() + Millis(30000)).empty()) {
      break;
    }
  }
  ::shutdown(fd, SHUT_RDWR);
  connection->done = true;
}

Bytes TCPStoreServer::handle(const Bytes& body) {
  Reader in(body);
  Bytes out{kOk};
  const uint8_t command = in.u8();
  switch (command) {
    case kSet: {
      const std::string key = in.string();
      const Bytes value = in.bytes();
      data_.set(key, value);
      break;
    }
    case kGet: {
      const std::string key = in.string();
      if (!data_.check({key})) {
        out[0] = kFailed;
        put_string(out, "key '" + key + "' is not set");
      } else {
        put_bytes(out, data_.get(key));
      }
      break;
    }
    case kAdd: {
      const std::string key = in.string();
      const int64_t delta = in.i64();
      try {
        put_i64(out, data_.add(key, delta));
      } catch (const Error& e) {
        out = Bytes{kFailed};
        put_string(out, e.what());
      }
      break;
    }
    case kCompareSet: {
      const std::string key = in.string();
      const Bytes expected = in.bytes();
      const Bytes desired = in.bytes();
      put_bytes(out, data_.compare_set(key, expected, desired));
      break;
    }
    case kCheck:
    case kWait: {
      const uint32_t count = in.u32();
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < count; ++i) keys.push_back(in.string());
      if (command == kCheck) {
        out.push_back(data_.check(keys) ? 1 : 0);
        break;
      }
      const Millis timeout(in.i64());
      // Wait in slices so that a server shutdown is noticed.
      const auto deadline = Clock::now() + timeout;
      while (true) {
        try {
          data_.wait(keys, std::min(Millis(200), std::chrono::duration_cast<Millis>(deadline - Clock::now())));
          break;
        } catch (const TimeoutError& e) {
          if (stopping_ || Clock::now() >= deadline) {
            out = Bytes{kTimedOut};
            put_string(out, e.what());
            break;
          }
        }
      }
      break;
    }
    case kDelete: out.push_back(data_.delete_key(in.string()) ? 1 : 0); break;
    case kNumKeys: put_i64(out, data_.num_keys()); break;
    default: throw Error(fmt::format("unknown command {}", command));
  }
  if (!in.at_end()) throw Error("trailing bytes after the request");
  return out;
}

}  // namespace tinyddp::comm
