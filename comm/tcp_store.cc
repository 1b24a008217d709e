// TCPStore, the client (tcp_store.h): one connection to the server, each call a request and
// its reply (tcp_store_protocol.h), reconnecting once when the connection drops, and waits
// bounded by the store's timeout.
#include "tinyddp/comm/tcp_store.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include <fmt/format.h>

#include "tinyddp/comm/socket.h"
#include "tinyddp/comm/tcp_store_protocol.h"
#include "tinyddp/comm/tcp_store_server.h"

namespace tinyddp::comm {

using namespace store_protocol;
using net::Clock;

struct TCPStore::Request {
  Bytes body;
  const char* what;        // for error messages
  bool idempotent = true;  // safe to send again if the response was lost
};

TCPStore::TCPStore(const TCPStoreOptions& options)
    : host_(options.host()), port_(options.port()), max_message_bytes_(options.max_message_bytes()) {
  timeout_ = options.timeout();
  if (options.is_server()) {
    server_ = std::make_unique<TCPStoreServer>(options.host(), options.port(), options.max_message_bytes());
    port_ = server_->port();
  }
  TDDP_CHECK(port_ != 0, "TCPStore: a client needs the server's port");
  // Connect, retrying until the timeout: the server may still be starting.
  connect(Clock::now() + timeout_, /*reconnecting=*/false);
}

void TCPStore::connect(Clock::time_point deadline, bool reconnecting) {
  net::close_fd(fd_);
  std::string last_error;
  bool refused = false;
  Millis backoff(10);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    const int rc = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &result);
    if (rc != 0) {
      last_error = gai_strerror(rc);
    } else {
      for (addrinfo* ai = result; ai != nullptr && fd_ < 0; ai = ai->ai_next) {
        int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          fd_ = fd;
        } else {
          refused = refused || errno == ECONNREFUSED;
          last_error = net::errno_text(errno);
          ::close(fd);
        }
      }
      freeaddrinfo(result);
    }
    if (fd_ >= 0) break;
    // Reconnecting: a refusal means nothing listens there any more, and a new server would
    // not have this job's keys; only a network that drops or stalls is worth waiting out.
    if (reconnecting && refused) {
      throw Error(fmt::format("TCPStore: the server at {}:{} is gone ({})", host_, port_, last_error));
    }
    if (Clock::now() + backoff > deadline) {
      throw TimeoutError(fmt::format("TCPStore: could not connect to {}:{} within {} ms ({})", host_, port_,
                                     timeout_.count(), last_error));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, Millis(500));
  }
  net::set_nodelay(fd_);
}

TCPStore::~TCPStore() {
  net::close_fd(fd_);
  server_.reset();
}

Bytes TCPStore::call(const Request& request, Millis io_timeout) {
  TDDP_CHECK(request.body.size() <= max_message_bytes_,
             "TCPStore {}: the request of {} bytes exceeds the {} byte limit", request.what, request.body.size(),
             max_message_bytes_);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto give_up = Clock::now() + timeout_;
  // At most one retry on a new connection: a request that fails twice is the problem itself
  // (the server closes the connection of a request it refuses, e.g. an oversized one).
  for (int attempt = 0;; ++attempt) {
    bool sent = false;
    try {
      if (fd_ < 0) {
        connect(give_up, /*reconnecting=*/true);  // dropped before: connect again
        ++reconnects_;
      }
      return call_once(request, io_timeout, sent);
    } catch (const TimeoutError&) {
      throw;  // the server answered "timed out", or no connection could be made in time
    } catch (const Error& e) {
      if (std::string(e.what()).find("is gone") != std::string::npos) throw;
      // The connection dropped (call_once closed it). Try again on a new one while the
      // timeout lasts, unless the request may have run already and must not run twice.
      if (fd_ >= 0) throw;  // an error from the server, not from the connection
      if (sent && !request.idempotent) {
        throw Error(fmt::format("{}; it was sent, so it is not retried (it may have run on the server)", e.what()));
      }
      if (attempt >= 1 || Clock::now() >= give_up) throw;
    }
  }
}

Bytes TCPStore::call_once(const Request& request, Millis io_timeout, bool& sent) {
  const auto deadline = Clock::now() + io_timeout;
  const auto fail = [&](const std::string& reason) -> Error {
    net::close_fd(fd_);
    return Error(fmt::format("TCPStore {}: lost the connection to {}:{} ({})", request.what, host_, port_, reason));
  };
  const uint32_t length = static_cast<uint32_t>(request.body.size());
  std::string error = net::send_exact(fd_, &length, 4, deadline);
  if (error.empty()) error = net::send_exact(fd_, request.body.data(), request.body.size(), deadline);
  if (!error.empty()) throw fail(error);
  sent = true;
  uint32_t response_length = 0;
  error = net::recv_exact(fd_, &response_length, 4, deadline);
  if (!error.empty()) throw fail(error);
  if (response_length == 0 || response_length > max_message_bytes_ + 64) throw fail("malformed response");
  Bytes response(response_length);
  error = net::recv_exact(fd_, response.data(), response_length, deadline);
  if (!error.empty()) throw fail(error);
  if (response[0] == kOk) return Bytes(response.begin() + 1, response.end());
  Reader reader(response);
  reader.u8();
  const std::string message = reader.string();
  if (response[0] == kTimedOut) throw TimeoutError(message);
  throw Error(fmt::format("TCPStore {}: {}", request.what, message));
}

namespace {
// Requests that wait on the server get the wait time plus this margin on the socket.
constexpr Millis kIoMargin{10000};
}  // namespace

void TCPStore::set(const std::string& key, const Bytes& value) {
  Request r{{kSet}, "set"};
  put_string(r.body, key);
  put_bytes(r.body, value);
  call(r, timeout_ + kIoMargin);
}

Bytes TCPStore::get(const std::string& key) {
  wait({key}, timeout_);
  Request r{{kGet}, "get"};
  put_string(r.body, key);
  const Bytes response = call(r, timeout_ + kIoMargin);
  Reader reader(response);
  return reader.bytes();
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  Request r{{kAdd}, "add", /*idempotent=*/false};
  put_string(r.body, key);
  put_i64(r.body, delta);
  const Bytes response = call(r, timeout_ + kIoMargin);
  Reader reader(response);
  return reader.i64();
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Request r{{kCompareSet}, "compare_set", /*idempotent=*/false};
  put_string(r.body, key);
  put_bytes(r.body, expected);
  put_bytes(r.body, desired);
  const Bytes response = call(r, timeout_ + kIoMargin);
  Reader reader(response);
  return reader.bytes();
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  Request r{{kCheck}, "check"};
  put_u32(r.body, static_cast<uint32_t>(keys.size()));
  for (const auto& key : keys) put_string(r.body, key);
  return call(r, timeout_ + kIoMargin).at(0) == 1;
}

void TCPStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  // The server blocks a WAIT until the keys exist, so the wait itself reacts at once; it is
  // sent in slices so that the connection is free for this client's other threads between
  // them (a thread may wait for a key that another thread of the same process sets).
  constexpr Millis kSlice{100};
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const Millis left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    Request r{{kWait}, "wait"};
    put_u32(r.body, static_cast<uint32_t>(keys.size()));
    for (const auto& key : keys) put_string(r.body, key);
    put_i64(r.body, std::max<int64_t>(0, std::min(kSlice, left).count()));
    try {
      call(r, kSlice + kIoMargin);
      return;
    } catch (const TimeoutError&) {
      if (Clock::now() < deadline) continue;
    }
    std::vector<std::string> missing;
    for (const auto& key : keys) {
      if (!check({key})) missing.push_back(key);
    }
    throw TimeoutError(fmt::format("store: timed out after {} ms waiting for keys {} (missing: {}) on {}:{}",
                                   timeout.count(), format_keys(keys), format_keys(missing), host_, port_));
  }
}

bool TCPStore::delete_key(const std::string& key) {
  Request r{{kDelete}, "delete_key"};
  put_string(r.body, key);
  return call(r, timeout_ + kIoMargin).at(0) == 1;
}

int64_t TCPStore::num_keys() {
  Request r{{kNumKeys}, "num_keys"};
  const Bytes response = call(r, timeout_ + kIoMargin);
  Reader reader(response);
  return reader.i64();
}

}  // namespace tinyddp::comm
