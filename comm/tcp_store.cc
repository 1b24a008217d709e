// TCPStore client and server: see tcp_store.h.
#include "comm/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

namespace tinyddp::comm {

namespace {

enum Command : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kCheck, kWait, kDelete, kNumKeys };
enum Status : uint8_t { kOk = 0, kFailed = 1, kTimedOut = 2 };

using Clock = std::chrono::steady_clock;

std::string errno_text() { return std::strerror(errno); }

// Waits until fd is readable (or writable) or the deadline passes; also wakes on `wake_fd`.
// Returns false on timeout or wake-up.
bool wait_fd(int fd, short events, Clock::time_point deadline, int wake_fd = -1) {
  while (true) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    if (left < 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int n = poll(fds, wake_fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (wake_fd >= 0 && (fds[1].revents & POLLIN)) return false;
    if (n > 0 && fds[0].revents != 0) return true;
  }
}

// Reads or writes exactly `size` bytes before the deadline. Returns an error text or "".
std::string read_exact(int fd, void* data, size_t size, Clock::time_point deadline, int wake_fd = -1) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    if (!wait_fd(fd, POLLIN, deadline, wake_fd)) return "timed out or shut down while reading";
    const ssize_t n = ::recv(fd, p, size, 0);
    if (n == 0) return "connection closed by the peer";
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno_text();
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return "";
}

std::string write_exact(int fd, const void* data, size_t size, Clock::time_point deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    if (!wait_fd(fd, POLLOUT, deadline)) return "timed out while writing";
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return errno_text();
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return "";
}

// Field encoding.
void put_u32(Bytes& out, uint32_t v) { out.insert(out.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); }
void put_i64(Bytes& out, int64_t v) { out.insert(out.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8); }
void put_bytes(Bytes& out, const uint8_t* data, size_t size) {
  put_u32(out, static_cast<uint32_t>(size));
  out.insert(out.end(), data, data + size);
}
void put_bytes(Bytes& out, const Bytes& b) { put_bytes(out, b.data(), b.size()); }
void put_string(Bytes& out, const std::string& s) { put_bytes(out, reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

// Field decoding with bounds checks (malformed input throws).
class Reader {
 public:
  explicit Reader(const Bytes& data) : data_(data) {}
  uint8_t u8() { return *take(1); }
  uint32_t u32() {
    uint32_t v;
    std::memcpy(&v, take(4), 4);
    return v;
  }
  int64_t i64() {
    int64_t v;
    std::memcpy(&v, take(8), 8);
    return v;
  }
  Bytes bytes() {
    const uint32_t n = u32();
    const uint8_t* p = take(n);
    return Bytes(p, p + n);
  }
  std::string string() {
    const Bytes b = bytes();
    return std::string(b.begin(), b.end());
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  const uint8_t* take(size_t n) {
    if (n > data_.size() - pos_) throw Error("truncated message");
    const uint8_t* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }
  const Bytes& data_;
  size_t pos_ = 0;
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

// ---- server ------------------------------------------------------------------------------

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
      last_error = errno_text();
      ::close(fd);
    }
  }
  freeaddrinfo(result);
  TDDP_CHECK(listen_fd_ >= 0, "TCPStore server: cannot listen on {}:{} ({})", host, port, last_error);
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &length);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  TDDP_CHECK(::pipe2(wake_pipe_, O_CLOEXEC) == 0, "TCPStore server: pipe failed ({})", errno_text());
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
  close_fd(listen_fd_);
  close_fd(wake_pipe_[0]);
  close_fd(wake_pipe_[1]);
}

void TCPStoreServer::accept_loop() {
  while (!stopping_) {
    if (!wait_fd(listen_fd_, POLLIN, Clock::now() + Millis(1000), wake_pipe_[0])) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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
    std::string error = read_exact(fd, &length, 4, Clock::time_point::max(), wake_pipe_[0]);
    if (!error.empty()) break;  // the client went away, or shutdown
    if (length == 0 || length > max_message_bytes_) {
      std::cerr << fmt::format("tinyddp TCPStore: closing a connection: request of {} bytes (limit {})\n", length,
                               max_message_bytes_);
      break;
    }
    Bytes body(length);
    error = read_exact(fd, body.data(), length, Clock::now() + Millis(30000), wake_pipe_[0]);
    if (!error.empty()) {
      std::cerr << "tinyddp TCPStore: closing a connection: " << error << " in the middle of a request\n";
      break;
    }
    Bytes response;
    try {
      response = handle(body, fd);
    } catch (const std::exception& e) {
      std::cerr << "tinyddp TCPStore: closing a connection: malformed request (" << e.what() << ")\n";
      break;
    }
    uint32_t response_length = static_cast<uint32_t>(response.size());
    if (!write_exact(fd, &response_length, 4, Clock::now() + Millis(30000)).empty() ||
        !write_exact(fd, response.data(), response.size(), Clock::now() + Millis(30000)).empty()) {
      break;
    }
  }
  ::shutdown(fd, SHUT_RDWR);
  connection->done = true;
}

Bytes TCPStoreServer::handle(const Bytes& body, int /*fd*/) {
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
    case kDelete:
      out.push_back(data_.delete_key(in.string()) ? 1 : 0);
      break;
    case kNumKeys:
      put_i64(out, data_.num_keys());
      break;
    default:
      throw Error(fmt::format("unknown command {}", command));
  }
  if (!in.at_end()) throw Error("trailing bytes after the request");
  return out;
}

// ---- client ------------------------------------------------------------------------------

struct TCPStore::Request {
  Bytes body;
  const char* what;  // for error messages
};

TCPStore::TCPStore(const TCPStoreOptions& options)
    : host_(options.host), port_(options.port), max_message_bytes_(options.max_message_bytes) {
  timeout_ = options.timeout;
  if (options.is_server) {
    server_ = std::make_unique<TCPStoreServer>(options.host, options.port, options.max_message_bytes);
    port_ = server_->port();
  }
  TDDP_CHECK(port_ != 0, "TCPStore: a client needs the server's port");
  // Connect, retrying until the timeout: the server may still be starting.
  const auto deadline = Clock::now() + timeout_;
  std::string last_error;
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
          last_error = errno_text();
          ::close(fd);
        }
      }
      freeaddrinfo(result);
    }
    if (fd_ >= 0) break;
    if (Clock::now() + backoff > deadline) {
      throw TimeoutError(fmt::format("TCPStore: could not connect to {}:{} within {} ms ({})", host_, port_,
                                     timeout_.count(), last_error));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, Millis(500));
  }
  const int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TCPStore::~TCPStore() {
  close_fd(fd_);
  server_.reset();
}

Bytes TCPStore::call(const Request& request, Millis io_timeout) {
  TDDP_CHECK(request.body.size() <= max_message_bytes_, "TCPStore {}: the request of {} bytes exceeds the {} byte limit",
             request.what, request.body.size(), max_message_bytes_);
  std::lock_guard<std::mutex> lock(mutex_);
  TDDP_CHECK(fd_ >= 0, "TCPStore {}: the connection to {}:{} is closed", request.what, host_, port_);
  const auto deadline = Clock::now() + io_timeout;
  const auto fail = [&](const std::string& reason) -> Error {
    close_fd(fd_);
    return Error(fmt::format("TCPStore {}: lost the connection to {}:{} ({})", request.what, host_, port_, reason));
  };
  const uint32_t length = static_cast<uint32_t>(request.body.size());
  std::string error = write_exact(fd_, &length, 4, deadline);
  if (error.empty()) error = write_exact(fd_, request.body.data(), request.body.size(), deadline);
  if (!error.empty()) throw fail(error);
  uint32_t response_length = 0;
  error = read_exact(fd_, &response_length, 4, deadline);
  if (!error.empty()) throw fail(error);
  if (response_length == 0 || response_length > max_message_bytes_ + 64) throw fail("malformed response");
  Bytes response(response_length);
  error = read_exact(fd_, response.data(), response_length, deadline);
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
  Request r{{kAdd}, "add"};
  put_string(r.body, key);
  put_i64(r.body, delta);
  const Bytes response = call(r, timeout_ + kIoMargin);
  Reader reader(response);
  return reader.i64();
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Request r{{kCompareSet}, "compare_set"};
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
