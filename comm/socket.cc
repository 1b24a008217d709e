// Socket helpers (socket.h): exact reads and writes with a deadline, TCP_NODELAY, and the
// address a connection came from, for the TCP store and the Gloo backend's ring.
#include "tinyddp/comm/socket.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tinyddp::comm::net {

std::string errno_text(int err) { return std::strerror(err); }

bool wait_ready(int fd, short events, Clock::time_point deadline, int wake_fd) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left < 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    // At most a second per poll: a deadline of time_point::max() still wakes now and then.
    const int n = ::poll(fds, wake_fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return true;  // the next call on fd reports the error
    if (wake_fd >= 0 && (fds[1].revents & POLLIN) != 0) return false;
    if (n > 0 && fds[0].revents != 0) return true;
  }
}

std::string transfer_exact(int fd, void* data, size_t size, bool sending, Clock::time_point deadline, int wake_fd) {
  auto* p = static_cast<char*>(data);
  while (size > 0) {
    if (!wait_ready(fd, sending ? POLLOUT : POLLIN, deadline, wake_fd)) {
      return sending ? "timed out while writing" : "timed out or shut down while reading";
    }
    const ssize_t n = sending ? ::send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, p, size, MSG_DONTWAIT);
    if (n == 0 && !sending) return "connection closed by the peer";
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      return errno_text(errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return "";
}

void set_nodelay(int fd) {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

socklen_t address_length(const sockaddr_storage& a) {
  return a.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::string peer_address(int fd) {
  sockaddr_storage a{};
  socklen_t length = sizeof(a);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &length) != 0) return "[?]";
  char host[INET6_ADDRSTRLEN] = {};
  const void* ip = a.ss_family == AF_INET6
                       ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr)
                       : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&a)->sin_addr);
  if (::inet_ntop(a.ss_family, ip, host, sizeof(host)) == nullptr) return "[?]";
  return "[" + std::string(host) + "]:" + std::to_string(port_of(a));
}

uint16_t port_of(const sockaddr_storage& a) {
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port
                                       : reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
}

sockaddr_storage with_port(sockaddr_storage a, uint16_t port) {
  if (a.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&a)->sin6_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in*>(&a)->sin_port = htons(port);
  }
  return a;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

namespace {

std::string numeric_address(const sockaddr* a, socklen_t length) {
  char text[NI_MAXHOST] = {};
  if (::getnameinfo(a, length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return text;
}

}  // namespace

Route route_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    return {"", "", "'" + host + "' does not resolve: " + ::gai_strerror(rc)};
  }
  Route route;
  route.why = "no route reaches '" + host + "'";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
      route = {numeric_address(reinterpret_cast<sockaddr*>(&local), length), numeric_address(a->ai_addr, a->ai_addrlen),
               ""};
      close_fd(fd);
      break;
    }
    route.why =
        "no route reaches '" + host + "' (" + numeric_address(a->ai_addr, a->ai_addrlen) + "): " + errno_text(errno);
    close_fd(fd);
  }
  ::freeaddrinfo(found);
  return route;
}

}  // namespace tinyddp::comm::net
