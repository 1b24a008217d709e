// Store tests: every operation on HashStore, PrefixStore and a live TCPStore; exact totals
// from concurrent adds by many clients; waits that time out naming the missing keys;
// malformed and oversized requests that close only their own connection; connect retries;
// reconnecting after a dropped connection (through a relay that cuts it).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/test_util.h"
#include "tinyddp/comm/store.h"
#include "tinyddp/comm/tcp_store.h"

using namespace tinyddp::comm;
using Catch::Contains;
using Clock = std::chrono::steady_clock;

namespace {

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

// The behaviour every Store must have.
void check_store_semantics(Store& store) {
  store.set("a", bytes("1"));
  CHECK(store.get("a") == bytes("1"));
  store.set("a", bytes("two"));
  CHECK(store.get_string("a") == "two");
  CHECK(store.add("counter", 5) == 5);
  CHECK(store.add("counter", -2) == 3);
  CHECK(store.get_string("counter") == "3");
  CHECK_THROWS_WITH(store.add("a", 1), Contains("not an integer counter"));
  // compare_set: a missing key matches an empty expected value.
  CHECK(store.compare_set("cas", Bytes(), bytes("x")) == bytes("x"));
  CHECK(store.compare_set("cas", bytes("y"), bytes("z")) == bytes("x"));  // mismatch: unchanged
  CHECK(store.compare_set("cas", bytes("x"), bytes("z")) == bytes("z"));
  CHECK(store.check({"a", "cas"}));
  CHECK_FALSE(store.check({"a", "missing"}));
  const int64_t before = store.num_keys();
  CHECK(store.delete_key("cas"));
  CHECK_FALSE(store.delete_key("cas"));
  CHECK(store.num_keys() == before - 1);
  store.wait({"a"}, std::chrono::milliseconds(10));
  const auto start = Clock::now();
  CHECK_THROWS_AS(store.wait({"a", "never"}, std::chrono::milliseconds(200)), tinyddp::TimeoutError);
  CHECK_THROWS_WITH(store.wait({"a", "never"}, std::chrono::milliseconds(50)),
                    Contains("never]") && Contains("(missing: ["));
  CHECK(Clock::now() - start < std::chrono::seconds(5));
  // A waiter wakes when another thread sets the key.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    store.set("late", bytes("here"));
  });
  store.set_timeout(std::chrono::milliseconds(5000));
  CHECK(store.get("late") == bytes("here"));
  setter.join();
  Bytes big(1 << 20, 7);
  store.set("big", big);
  CHECK(store.get("big") == big);
  store.set("empty", Bytes());
  CHECK(store.get("empty").empty());
}

// Raw bytes sent to a server, for malformed-request tests; returns the fd.
int raw_connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// True when the server closed the connection (read returns 0) within a second.
bool closed_by_server(int fd) {
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[16];
  return ::recv(fd, buf, sizeof(buf), 0) == 0;
}

}  // namespace

TEST_CASE("HashStore semantics", "[comm][store]") {
  HashStore store;
  check_store_semantics(store);
}

TEST_CASE("PrefixStore namespaces keys", "[comm][store]") {
  auto base = std::make_shared<HashStore>();
  PrefixStore store("group0", base);
  check_store_semantics(store);
  PrefixStore other("group1", base);
  store.set("k", bytes("0"));
  other.set("k", bytes("1"));
  CHECK(store.get_string("k") == "0");
  CHECK(base->get_string("group1/k") == "1");
}

TEST_CASE("store_allgather: every party's value, in index order; the silent parties named past the timeout",
          "[comm][store]") {
  HashStore store;
  std::vector<std::vector<std::string>> got(3);
  {
    std::vector<std::thread> parties;
    for (int i = 0; i < 3; ++i) {
      parties.emplace_back([&, i] {
        got[static_cast<size_t>(i)] =
            store_allgather(store, "g/", i, 3, "value" + std::to_string(i), std::chrono::milliseconds(5000));
      });
    }
    for (auto& t : parties) t.join();
  }
  for (const auto& all : got) CHECK(all == std::vector<std::string>{"value0", "value1", "value2"});
  // Parties 1 and 3 of four never write (party 2 has): party 0 hears which, within the timeout.
  store.set("h/2", Bytes{'x'});
  const auto started = Clock::now();
  std::vector<int> missing;
  try {
    store_allgather(store, "h/", 0, 4, "x", std::chrono::milliseconds(200));
    FAIL("store_allgather returned without every party");
  } catch (const PartiesMissing& e) {
    missing = e.missing();
    CHECK_THAT(std::string(e.what()), Contains("parties [1, 3] of 4"));
  }
  CHECK(missing == std::vector<int>{1, 3});
  // The barrier form: the same wait and the same error, no values read back.
  CHECK_THROWS_AS(store_barrier(store, "h/", 0, 4, std::chrono::milliseconds(50)), PartiesMissing);
  store.set("h/1", Bytes{'x'});
  store.set("h/3", Bytes{'x'});
  CHECK_NOTHROW(store_barrier(store, "h/", 0, 4, std::chrono::milliseconds(5000)));
  CHECK(Clock::now() - started < std::chrono::seconds(5));
}

TEST_CASE("TCPStore semantics against a live server", "[comm][store][tcp]") {
  TCPStoreOptions options;
  options.is_server(true);
  TCPStore server(options);
  CHECK(server.port() != 0);
  check_store_semantics(server);
  TCPStoreOptions client_options;
  client_options.port(server.port());
  TCPStore client(client_options);
  CHECK(client.get_string("a") == "two");  // the same keys, seen by a second client
}

TEST_CASE("TCPStore: concurrent adds from many clients give exact totals", "[comm][store][tcp]") {
  TCPStoreOptions options;
  options.is_server(true);
  TCPStore server(options);
  constexpr int kClients = 16, kAdds = 200;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      TCPStoreOptions o;
      o.port(server.port());
      TCPStore client(o);
      for (int i = 0; i < kAdds; ++i) client.add("total", c + 1);
      client.add("finished", 1);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(server.add("total", 0) == kAdds * kClients * (kClients + 1) / 2);
  CHECK(server.add("finished", 0) == kClients);
}

TEST_CASE("TCPStore: malformed and oversized requests close only their own connection", "[comm][store][tcp]") {
  TCPStoreOptions options;
  options.is_server(true);
  options.max_message_bytes(1 << 20);
  TCPStore server(options);
  server.set("alive", bytes("yes"));
  {
    const int fd = raw_connect(server.port());  // declares a 100 MB request
    const uint32_t huge = 100u << 20;
    REQUIRE(::send(fd, &huge, 4, 0) == 4);
    CHECK(closed_by_server(fd));
    ::close(fd);
  }
  {
    const int fd = raw_connect(server.port());  // an unknown command
    const uint8_t message[] = {1, 0, 0, 0, 99};
    REQUIRE(::send(fd, message, sizeof(message), 0) == sizeof(message));
    CHECK(closed_by_server(fd));
    ::close(fd);
  }
  {
    const int fd = raw_connect(server.port());  // a SET whose key length runs past the body
    const uint8_t message[] = {6, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 'k'};
    REQUIRE(::send(fd, message, sizeof(message), 0) == sizeof(message));
    CHECK(closed_by_server(fd));
    ::close(fd);
  }
  {
    const int fd = raw_connect(server.port());  // a zero-length request
    const uint32_t zero = 0;
    REQUIRE(::send(fd, &zero, 4, 0) == 4);
    CHECK(closed_by_server(fd));
    ::close(fd);
  }
  // The server still serves: the existing client, and new ones.
  CHECK(server.get_string("alive") == "yes");
  TCPStoreOptions o;
  o.port(server.port());
  TCPStore client(o);
  CHECK(client.get_string("alive") == "yes");
  // This client's own oversized request: the server closes its connection, the client says so.
  CHECK_THROWS_WITH(client.set("x", Bytes(2 << 20, 0)), Contains("TCPStore set: lost the connection"));
  CHECK(server.get_string("alive") == "yes");
}

TEST_CASE("TCPStore: clients retry until the server is up, and give up after the timeout", "[comm][store][tcp]") {
  // Find a free port, then start the server on it a little after the client begins retrying.
  uint16_t port;
  {
    TCPStoreOptions o;
    o.is_server(true);
    TCPStore probe(o);
    port = probe.port();
  }
  std::unique_ptr<TCPStore> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    TCPStoreOptions o;
    o.is_server(true);
    o.port(port);
    server = std::make_unique<TCPStore>(o);
    server->set("ready", bytes("1"));
  });
  TCPStoreOptions o;
  o.port(port);
  o.timeout(std::chrono::milliseconds(10000));
  TCPStore client(o);
  CHECK(client.get_string("ready") == "1");
  starter.join();
  // Nobody listens on the freed port: the client fails within its timeout.
  server.reset();
  const auto start = Clock::now();
  o.timeout(std::chrono::milliseconds(300));
  CHECK_THROWS_WITH(TCPStore(o), Contains("could not connect to 127.0.0.1:" + std::to_string(port) + " within 300 ms"));
  CHECK(Clock::now() - start < std::chrono::seconds(3));
}

TEST_CASE("TCPStore: a waiting client learns promptly that the server went away", "[comm][store][tcp]") {
  TCPStoreOptions options;
  options.is_server(true);
  auto server = std::make_unique<TCPStore>(options);
  TCPStoreOptions o;
  o.port(server->port());
  o.timeout(std::chrono::milliseconds(20000));
  TCPStore client(o);
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    server.reset();
  });
  const auto start = Clock::now();
  CHECK_THROWS_AS(client.wait({"never"}), tinyddp::Error);
  CHECK(Clock::now() - start < std::chrono::seconds(5));
  stopper.join();
  CHECK_THROWS_WITH(client.get("x"), Contains("TCPStore"));
}

namespace {

// A TCP relay on loopback between clients and a server that can cut every connection it
// carries (a network that drops), while it keeps accepting new ones.
class Relay {
 public:
  explicit Relay(uint16_t target) : target_(target) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(::listen(listener_, 16) == 0);
    socklen_t length = sizeof(address);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Relay() {
    stopping_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    acceptor_.join();
    cut();
    for (auto& t : pumps_) t.join();
  }
  uint16_t port() const { return port_; }
  // Drops every connection carried so far.
  void cut() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  void accept_loop() {
    while (!stopping_) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const int server = raw_connect(target_);
      std::lock_guard<std::mutex> lock(mutex_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([client, server] { pump(client, server); });
      pumps_.emplace_back([client, server] { pump(server, client); });
    }
  }
  static void pump(int from, int to) {
    char buffer[4096];
    while (true) {
      const ssize_t n = ::recv(from, buffer, sizeof(buffer), 0);
      if (n <= 0 || ::send(to, buffer, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
    }
    ::shutdown(to, SHUT_RDWR);
  }

  uint16_t target_, port_ = 0;
  int listener_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

}  // namespace

TEST_CASE("TCPStore: a client reconnects after its connection drops, and never repeats an add", "[comm][store][tcp]") {
  TCPStoreOptions options;
  options.is_server(true);
  TCPStore server(options);
  Relay relay(server.port());
  TCPStoreOptions o;
  o.port(relay.port());
  o.timeout(std::chrono::milliseconds(5000));
  TCPStore client(o);
  client.set("a", bytes("1"));
  relay.cut();                           // the network drops the connection
  CHECK(client.get_string("a") == "1");  // made again, the get retried
  CHECK(client.reconnects() == 1);
  client.set("b", bytes("2"));
  CHECK(server.get_string("b") == "2");
  // An add is never run twice: one whose connection dropped before it was sent is retried
  // on a new connection; one sent into the dropped connection fails, saying so (which of the
  // two happens depends on when the client's kernel learns of the drop). Through this relay
  // a request sent into a cut connection never reaches the server, so the counter equals
  // the adds that succeeded.
  int64_t succeeded = 0;
  for (int round = 0; round < 5; ++round) {
    relay.cut();
    try {
      client.add("n", 1);
      ++succeeded;
    } catch (const tinyddp::Error& e) {
      CHECK_THAT(std::string(e.what()), Contains("it was sent, so it is not retried"));
    }
  }
  CHECK(client.add("n", 0) == succeeded);
  CHECK(client.reconnects() >= 5);
  // Waits survive a drop too.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    relay.cut();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    server.set("late", bytes("x"));
  });
  client.wait({"late"});
  setter.join();
  CHECK(client.get_string("late") == "x");
}
