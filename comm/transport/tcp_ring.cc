// The TCP ring for large allreduces (tcp_ring.h): reduce-scatter then allgather around
// the ring, each rank sending to the next while receiving from the previous with poll(2) on
// the calling thread, within the group's timeout; the first failure refuses every later call.
#include "tinyddp/comm/transport/tcp_ring.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "tinyddp/base/error.h"
#include "tinyddp/comm/socket.h"

namespace tinyddp::comm::detail {

namespace {
// "an allreduce", "a reduce_scatter": the article for an operation's name in messages.
const char* article(const std::string& word) { return word.front() == 'a' ? "an" : "a"; }

using net::Clock;

constexpr uint32_t kHelloMagic = 0x54445247;  // "TDRG"
// Received bytes are reduced in pieces of at most this size, while they are still in cache.
constexpr size_t kReceiveSlice = 256 << 10;

struct Hello {
  uint32_t magic;
  int32_t rank;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

using net::errno_text;

[[noreturn]] void raise(const std::string& message, bool timed_out) {
  if (timed_out) throw TimeoutError(message);
  throw Error(message);
}

// Sends or receives exactly `bytes` during connection setup; `what` starts the error.
void transfer_all(int fd, char* data, size_t bytes, bool sending, Clock::time_point deadline, const std::string& what) {
  const std::string error = net::transfer_exact(fd, data, bytes, sending, deadline);
  if (error.empty()) return;
  if (error.rfind("timed out", 0) == 0) throw TimeoutError(what + ": timed out");
  throw Error(
      fmt::format("{}: {}", what, error == "connection closed by the peer" ? "the peer closed the connection" : error));
}

}  // namespace

TcpRing::TcpRing(Store& store, const std::string& prefix, int rank, int size, const sockaddr_storage& local,
                 std::chrono::milliseconds timeout)
    : rank_(rank), size_(size) {
  TDDP_CHECK(size >= 2 && rank >= 0 && rank < size, "TcpRing: rank {} of a group of {}", rank, size);
  const auto deadline = Clock::now() + timeout;
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int listen_fd = ::socket(local.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  TDDP_CHECK(listen_fd != -1, "TcpRing: socket failed: {}", errno_text(errno));
  try {
    int on = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_storage address = net::with_port(local, 0);
    TDDP_CHECK(::bind(listen_fd, reinterpret_cast<sockaddr*>(&address), net::address_length(address)) == 0 &&
                   ::listen(listen_fd, 4) == 0,
               "TcpRing: rank {} cannot listen: {}", rank, errno_text(errno));
    socklen_t length = sizeof(address);
    TDDP_CHECK(::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&address), &length) == 0,
               "TcpRing: getsockname failed: {}", errno_text(errno));
    const auto* raw = reinterpret_cast<const uint8_t*>(&address);
    store.set(fmt::format("{}/{}", prefix, rank), Bytes(raw, raw + sizeof(address)));

    // To the next rank.
    const std::string right_key = fmt::format("{}/{}", prefix, right);
    store.wait({right_key}, std::chrono::duration_cast<Millis>(timeout));
    const Bytes theirs = store.get(right_key);
    TDDP_CHECK(theirs.size() == sizeof(sockaddr_storage), "TcpRing: rank {} published a malformed address", right);
    sockaddr_storage peer{};
    std::memcpy(&peer, theirs.data(), sizeof(peer));
    send_fd_ = ::socket(peer.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    TDDP_CHECK(send_fd_ != -1, "TcpRing: socket failed: {}", errno_text(errno));
    const std::string to_right = fmt::format("TcpRing: rank {} connecting to rank {}", rank, right);
    if (::connect(send_fd_, reinterpret_cast<sockaddr*>(&peer), net::address_length(peer)) != 0) {
      TDDP_CHECK(errno == EINPROGRESS, "{}: {}", to_right, errno_text(errno));
      if (!net::wait_ready(send_fd_, POLLOUT, deadline)) throw TimeoutError(to_right + ": timed out");
      int err = 0;
      socklen_t err_length = sizeof(err);
      getsockopt(send_fd_, SOL_SOCKET, SO_ERROR, &err, &err_length);
      TDDP_CHECK(err == 0, "{}: {}", to_right, errno_text(err));
    }
    net::set_nodelay(send_fd_);
    Hello hello{kHelloMagic, rank};
    transfer_all(send_fd_, reinterpret_cast<char*>(&hello), sizeof(hello), true, deadline, to_right);

    // From the previous rank.
    const std::string from_left = fmt::format("TcpRing: rank {} waiting for rank {} to connect", rank, left);
    if (!net::wait_ready(listen_fd, POLLIN, deadline)) throw TimeoutError(from_left + ": timed out");
    recv_fd_ = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    TDDP_CHECK(recv_fd_ != -1, "{}: accept failed: {}", from_left, errno_text(errno));
    net::set_nodelay(recv_fd_);
    Hello theirs_hello{};
    transfer_all(recv_fd_, reinterpret_cast<char*>(&theirs_hello), sizeof(theirs_hello), false, deadline, from_left);
    TDDP_CHECK(theirs_hello.magic == kHelloMagic && theirs_hello.rank == left,
               "{}: got a connection from something else (rank {} or not a tinyddp peer)", from_left,
               theirs_hello.rank);
  } catch (...) {
    ::close(listen_fd);
    if (send_fd_ != -1) ::close(send_fd_);
    if (recv_fd_ != -1) ::close(recv_fd_);
    throw;
  }
  ::close(listen_fd);
  // Errors name each peer as every tinyddp transport error does: address, then rank.
  right_name_ = fmt::format("{} (rank {})", net::peer_address(send_fd_), (rank + 1) % size);
  left_name_ = fmt::format("{} (rank {})", net::peer_address(recv_fd_), (rank + size - 1) % size);
}

TcpRing::~TcpRing() {
  if (send_fd_ != -1) ::close(send_fd_);
  if (recv_fd_ != -1) ::close(recv_fd_);
}

void TcpRing::fail(const std::string& message, bool timed_out) {
  broken_ = message;
  broken_by_timeout_ = timed_out;
  raise(message, timed_out);
}

void TcpRing::exchange(const char* send_data, size_t send_bytes, char* recv_data, const size_t& recv_bytes,
                       Clock::time_point deadline, const std::function<void(size_t)>& on_receive) {
  const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
  size_t sent = 0, received = 0;
  while (sent < send_bytes || received < recv_bytes) {
    bool moved = false;
    if (sent < send_bytes) {
      const ssize_t n = ::send(send_fd_, send_data + sent, send_bytes - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        moved = true;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail(fmt::format("rank {} lost its connection to {} ({}); did rank {} exit?", rank_, right_name_,
                         errno_text(errno), right),
             false);
      }
    }
    if (received < recv_bytes) {
      const ssize_t n =
          ::recv(recv_fd_, recv_data + received, std::min(recv_bytes - received, kReceiveSlice), MSG_DONTWAIT);
      if (n > 0) {
        received += static_cast<size_t>(n);
        if (on_receive) on_receive(received);
        moved = true;
      } else if (n == 0) {
        fail(fmt::format("{} closed its connection to rank {} in the middle of {} {}; did rank {} exit?", left_name_,
                         rank_, article(operation_), operation_, left),
             false);
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail(fmt::format("rank {} lost its connection from {} ({}); did rank {} exit?", rank_, left_name_,
                         errno_text(errno), left),
             false);
      }
    }
    if (moved) continue;
    // The connection to rank + 1 is watched even when everything was sent: its bytes may sit
    // in the socket buffer of a peer that died, and only the error (the peer's reset) says so,
    // while we wait on rank - 1, which may itself be waiting for the dead rank.
    pollfd fds[2] = {pollfd{send_fd_, static_cast<short>(sent < send_bytes ? POLLOUT : 0), 0},
                     pollfd{recv_fd_, static_cast<short>(received < recv_bytes ? POLLIN : 0), 0}};
    const int rv = ::poll(fds, 2, remaining_ms(deadline));
    if (rv == 0) {
      fail(
          fmt::format("rank {} timed out in {} {}: {} of {} bytes sent to {}, {} of {} bytes received from {}", rank_,
                      article(operation_), operation_, sent, send_bytes, right_name_, received, recv_bytes, left_name_),
          true);
    }
    if (sent == send_bytes && (fds[0].revents & (POLLERR | POLLHUP)) != 0) {
      int err = 0;
      socklen_t length = sizeof(err);
      getsockopt(send_fd_, SOL_SOCKET, SO_ERROR, &err, &length);
      fail(fmt::format("rank {} lost its connection to {} ({}); did rank {} exit?", rank_, right_name_,
                       err != 0 ? errno_text(err) : "connection closed", right),
           false);
    }
  }
}

void TcpRing::check_usable(const char* operation) {
  operation_ = operation;
  if (!broken_.empty())
    raise(
        "an earlier collective on the ring (allreduce, reduce_scatter or allgather) failed, so its connections are "
        "unusable: " +
            broken_,
        broken_by_timeout_);
}

namespace {
// Chunk i of `count` elements cut into n nearly equal chunks: elements [start(i), start(i + 1)).
struct ChunkLayout {
  char* bytes;
  size_t count, n, element_size;
  size_t start(size_t i) const { return i * (count / n) + std::min(i, count % n); }
  char* at(size_t i) const { return bytes + start(i) * element_size; }
  size_t length(size_t i) const { return (start(i + 1) - start(i)) * element_size; }
};
}  // namespace

void TcpRing::reduce_scatter_phase(char* bytes, size_t count, size_t element_size, const Reduce& reduce, int shift,
                                   Clock::time_point deadline) {
  const ChunkLayout layout{bytes, count, static_cast<size_t>(size_), element_size};
  const auto chunk = [&](int k) { return static_cast<size_t>(((k + shift) % size_ + size_) % size_); };
  if (scratch_.size() < layout.length(0)) scratch_.resize(layout.length(0));  // chunk 0 is a largest one
  // After step s, chunk (rank - s - 1 + shift) holds the contributions of s + 2 ranks.
  for (int s = 0; s + 1 < size_; ++s) {
    const size_t out = chunk(rank_ - s), in = chunk(rank_ - s - 1);
    char* const target = layout.at(in);
    size_t reduced = 0;  // elements of `in` combined so far
    exchange(layout.at(out), layout.length(out), scratch_.data(), layout.length(in), deadline, [&](size_t received) {
      const size_t ready = received / element_size;
      if (ready <= reduced) return;
      const size_t offset = reduced * element_size;
      reduce(target + offset, scratch_.data() + offset, target + offset, ready - reduced);
      reduced = ready;
    });
  }
}

void TcpRing::allgather_phase(char* bytes, size_t count, size_t element_size, int shift, Clock::time_point deadline) {
  const ChunkLayout layout{bytes, count, static_cast<size_t>(size_), element_size};
  const auto chunk = [&](int k) { return static_cast<size_t>(((k + shift) % size_ + size_) % size_); };
  // Pass the finished chunks on, each received straight into place.
  for (int s = 0; s + 1 < size_; ++s) {
    const size_t out = chunk(rank_ + 1 - s), in = chunk(rank_ - s);
    exchange(layout.at(out), layout.length(out), layout.at(in), layout.length(in), deadline, nullptr);
  }
}

void TcpRing::allreduce(void* data, size_t count, size_t element_size, const Reduce& reduce,
                        std::chrono::milliseconds timeout) {
  check_usable("allreduce");
  if (count == 0) return;
  const auto deadline = Clock::now() + timeout;
  // After the reduce-scatter chunk (rank + 1) holds every contribution; the allgather passes
  // the finished chunks around.
  reduce_scatter_phase(static_cast<char*>(data), count, element_size, reduce, 0, deadline);
  allgather_phase(static_cast<char*>(data), count, element_size, 0, deadline);
}

void TcpRing::reduce_scatter(void* data, size_t chunk_count, size_t element_size, const Reduce& reduce,
                             std::chrono::milliseconds timeout) {
  check_usable("reduce_scatter");
  if (chunk_count == 0) return;
  reduce_scatter_phase(static_cast<char*>(data), chunk_count * static_cast<size_t>(size_), element_size, reduce, -1,
                       Clock::now() + timeout);
}

void TcpRing::allgather(void* data, size_t chunk_count, size_t element_size, std::chrono::milliseconds timeout) {
  check_usable("allgather");
  if (chunk_count == 0) return;
  allgather_phase(static_cast<char*>(data), chunk_count * static_cast<size_t>(size_), element_size, -1,
                  Clock::now() + timeout);
}

void TcpRing::reduce_scatter_widened(const void* data, size_t in_size, void* out, size_t out_size, size_t chunk_count,
                                     const Widen& widen, std::chrono::milliseconds timeout) {
  check_usable("reduce_scatter");
  if (chunk_count == 0) return;
  const auto deadline = Clock::now() + timeout;
  const auto own = [&](size_t k) { return static_cast<const char*>(data) + k * chunk_count * in_size; };
  const auto chunk = [&](int k) { return static_cast<size_t>(((k - 1) % size_ + size_) % size_); };
  // Step s sends chunk (rank - s - 1) and receives chunk (rank - s - 2), which then holds the
  // contributions of s + 2 ranks; the last step's is chunk rank, received into `out`. Step 0
  // sends this rank's own values and receives the previous rank's (in_size bytes each); later
  // steps pass the widened sums on, each received into the buffer not being sent.
  if (scratch_.size() < chunk_count * in_size) scratch_.resize(chunk_count * in_size);
  char* const raw = scratch_.data();
  std::vector<char> sums[2];
  for (int s = 0; s + 1 < size_; ++s) {
    const size_t in = chunk(rank_ - s - 1);
    char* target = static_cast<char*>(out);
    if (s + 2 < size_) {
      sums[s % 2].resize(chunk_count * out_size);
      target = sums[s % 2].data();
    }
    const char* mine = own(in);
    size_t done = 0;  // elements of `in` complete so far
    const auto combine = [&](size_t received, size_t element_size) {
      const size_t ready = received / element_size;
      if (ready <= done) return;
      void* at = target + done * out_size;
      if (s == 0) {
        widen(at, mine + done * in_size, ready - done, false);
        widen(at, raw + done * in_size, ready - done, true);
      } else {
        widen(at, mine + done * in_size, ready - done, true);  // the received partial sums already lie there
      }
      done = ready;
    };
    if (s == 0) {
      exchange(own(chunk(rank_)), chunk_count * in_size, raw, chunk_count * in_size, deadline,
               [&](size_t received) { combine(received, in_size); });
    } else {
      exchange(sums[(s - 1) % 2].data(), chunk_count * out_size, target, chunk_count * out_size, deadline,
               [&](size_t received) { combine(received, out_size); });
    }
  }
}

size_t TcpRing::swap(const std::vector<char>& message, size_t prefix_bytes, size_t max_rest_bytes,
                     const std::function<size_t(const char*)>& rest_of, std::vector<char>& received,
                     std::chrono::milliseconds timeout) {
  TDDP_CHECK(size_ == 2, "TcpRing::swap is for two ranks, not {}", size_);
  check_usable("allreduce");  // the pair exchange carries small allreduces (and their call records)
  const auto deadline = Clock::now() + timeout;
  size_t expected = prefix_bytes;  // grows to the whole message once its prefix is in
  // Room for the longest message: exchange writes in place.
  if (received.size() < prefix_bytes + max_rest_bytes) received.resize(prefix_bytes + max_rest_bytes);
  exchange(message.data(), message.size(), received.data(), expected, deadline, [&](size_t got) {
    if (expected != prefix_bytes || got < prefix_bytes) return;
    size_t rest = 0;
    try {
      rest = rest_of(received.data());
    } catch (const std::exception& e) {
      fail(e.what(), false);
    }
    if (rest > max_rest_bytes)
      fail(fmt::format("the peer announced {} bytes, more than the {} expected", rest, max_rest_bytes), false);
    expected = prefix_bytes + rest;
  });
  return expected;
}

}  // namespace tinyddp::comm::detail
