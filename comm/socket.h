// Small POSIX socket helpers shared by the TCP store (client and server) and the Gloo
// backend's TCP ring: bounded waits, exact transfers, socket options (internal to comm).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>

namespace tinyddp::comm::net {

using Clock = std::chrono::steady_clock;

// strerror(err) as a string.
std::string errno_text(int err);

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT), or an error or hang-up is
// pending on it. Returns false when `deadline` passes first, or when `wake_fd` (if >= 0)
// becomes readable (a shutdown signal).
bool wait_ready(int fd, short events, Clock::time_point deadline, int wake_fd = -1);

// Reads (sending = false) or writes exactly `size` bytes before `deadline`, on a blocking or
// non-blocking socket; never raises SIGPIPE. Returns "" or why it stopped: "timed out or shut
// down while reading", "connection closed by the peer", or the system's error text.
std::string transfer_exact(int fd, void* data, size_t size, bool sending, Clock::time_point deadline, int wake_fd = -1);

inline std::string send_exact(int fd, const void* data, size_t size, Clock::time_point deadline) {
  return transfer_exact(fd, const_cast<void*>(data), size, /*sending=*/true, deadline);  // only read from
}
inline std::string recv_exact(int fd, void* data, size_t size, Clock::time_point deadline, int wake_fd = -1) {
  return transfer_exact(fd, data, size, /*sending=*/false, deadline, wake_fd);
}

// TCP_NODELAY on: small messages leave at once.
void set_nodelay(int fd);

// The length of the address `a` holds (IPv4 or IPv6).
socklen_t address_length(const sockaddr_storage& a);

// The port of the address `a` holds, and the same address with another port.
uint16_t port_of(const sockaddr_storage& a);
sockaddr_storage with_port(sockaddr_storage a, uint16_t port);

// "[10.0.0.2]:29500" for the peer a connected socket talks to ("[?]" when it cannot say).
std::string peer_address(int fd);

// The kernel's route from this host to `host` (a name or a numeric address): `remote`, the
// address `host` resolved to, and `local`, the source address the route sends from (what
// `ip route get` prints as src), found by connecting a UDP socket, which sends nothing. When
// `host` does not resolve or no route reaches it, both are empty and `why` says which.
struct Route {
  std::string local, remote, why;
};
Route route_toward(const std::string& host);

// Closes `fd` if open and sets it to -1.
void close_fd(int& fd);

}  // namespace tinyddp::comm::net
