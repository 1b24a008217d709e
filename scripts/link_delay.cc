// //scripts:link_delay: a link's one-way latency, in user space, for kernels without netem.
//
// Netfilter hands every packet that a rule sends to NFQUEUE (iptables ... -j NFQUEUE
// --queue-num Q) to this program, which keeps only its id and lets it go (an NF_ACCEPT
// verdict) --delay_us after it arrived. The packet itself stays in the kernel: with the queue's
// GSO flag a 64 KiB TCP burst is one entry, so 10 Gbit/s is some 20 000 verdicts a second.
// The delay is the same for every packet, so the held packets leave in the order they came and
// one batch verdict ("everything up to id N") releases all that are due.
//
//   ip netns exec NODE iptables -A OUTPUT -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass
//   ip netns exec NODE link_delay --queue 0 --delay_us 500
//
// scripts/sim_cluster.sh --delay does this on each node when netem is missing. On SIGTERM or
// SIGINT every held packet is released and a summary line goes to stdout:
//   link_delay: held 51234 packets for 500 us (measured: min 501 us, mean 517 us, max 2310 us)
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <deque>
#include <iostream>
#include <limits>
#include <vector>

namespace {

volatile std::sig_atomic_t stop_requested = 0;

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

struct HeldPacket {
  uint32_t id;
  int64_t arrived_ns;
};

// The packets held so far, oldest first, and what their holding times were.
struct Holder {
  int64_t delay_ns = 0;
  std::deque<HeldPacket> held;
  uint64_t released = 0;
  int64_t min_hold_ns = std::numeric_limits<int64_t>::max(), max_hold_ns = 0;
  double total_hold_ns = 0;
};

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* packet, void* data) {
  auto* holder = static_cast<Holder*>(data);
  const nfqnl_msg_packet_hdr* header = nfq_get_msg_packet_hdr(packet);
  if (header != nullptr) holder->held.push_back({ntohl(header->packet_id), now_ns()});
  return 0;
}

// Accepts every held packet that has been held --delay_us by `now` (all of them with
// `everything`, when stopping: those are not counted), with one verdict for the newest of them.
void release_due(nfq_q_handle* queue, Holder& holder, int64_t now, bool everything) {
  uint32_t last_id = 0;
  bool any = false;
  while (!holder.held.empty() && (everything || holder.held.front().arrived_ns + holder.delay_ns <= now)) {
    if (!everything) {
      const int64_t hold = now - holder.held.front().arrived_ns;
      holder.min_hold_ns = std::min(holder.min_hold_ns, hold);
      holder.max_hold_ns = std::max(holder.max_hold_ns, hold);
      holder.total_hold_ns += static_cast<double>(hold);
      ++holder.released;
    }
    last_id = holder.held.front().id;
    any = true;
    holder.held.pop_front();
  }
  if (any && nfq_set_verdict_batch(queue, last_id, NF_ACCEPT) < 0) {
    std::cerr << "link_delay: the verdict for packets up to id " << last_id << " failed: " << std::strerror(errno)
              << "\n";
  }
}

// Binds NFQUEUE `queue_number` to `holder` (ids only, GSO bursts whole, fail open); prints why
// and returns false when it cannot.
bool open_queue(int queue_number, Holder& holder, nfq_handle*& handle, nfq_q_handle*& queue) {
  handle = nfq_open();
  if (handle == nullptr) {
    std::cerr << "link_delay: cannot open a netfilter queue handle (" << std::strerror(errno)
              << "); it needs CAP_NET_ADMIN and the nfnetlink_queue module\n";
    return false;
  }
  queue = nfq_create_queue(handle, static_cast<uint16_t>(queue_number), &on_packet, &holder);
  if (queue == nullptr) {
    std::cerr << "link_delay: cannot bind queue " << queue_number << " (" << std::strerror(errno)
              << "); is another program reading it?\n";
    nfq_close(handle);
    return false;
  }
  // Only the packet's id is needed; GSO bursts stay whole; a full queue accepts rather than drops.
  const uint32_t flags = NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN;
  if (nfq_set_mode(queue, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(queue, 65536) < 0 ||
      nfq_set_queue_flags(queue, flags, flags) < 0) {
    std::cerr << "link_delay: cannot configure queue " << queue_number << ": " << std::strerror(errno) << "\n";
    nfq_destroy_queue(queue);
    nfq_close(handle);
    return false;
  }
  nfnl_rcvbufsiz(nfq_nfnlh(handle), 64u << 20);
  return true;
}

// "link_delay: held N packets for D us (measured: min, mean, max)", and any overruns.
void print_summary(const Holder& holder, double delay_us, uint64_t overruns) {
  std::cout << "link_delay: held " << holder.released << " packets for " << delay_us << " us";
  if (holder.released > 0) {
    std::cout << " (measured: min " << holder.min_hold_ns / 1000 << " us, mean "
              << static_cast<int64_t>(holder.total_hold_ns / static_cast<double>(holder.released) / 1000) << " us, max "
              << holder.max_hold_ns / 1000 << " us)";
  }
  if (overruns > 0) std::cout << "; the queue's socket overflowed " << overruns << " times";
  std::cout << std::endl;
}

}  // namespace

int main(int argc, char** argv) {
  int queue_number = 0;
  double delay_us = 500;
  CLI::App app{"Hold every packet of an NFQUEUE queue for a fixed time before accepting it (a link's latency).",
               "link_delay"};
  app.add_option("--queue", queue_number, "the NFQUEUE queue number (iptables --queue-num; default 0)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--delay_us", delay_us, "how long each packet is held, in microseconds (default 500)")
      ->check(CLI::Range(0.0, 10e6));
  CLI11_PARSE(app, argc, argv);

  Holder holder;
  holder.delay_ns = static_cast<int64_t>(delay_us * 1000);
  // Wake-ups as asked: no timer slack (50 us by default), and ahead of the busy ranks on these
  // few cores where the system allows a real-time priority (a link's latency does not wait for a
  // CPU). Neither is needed for correctness.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  const sched_param priority{1};
  const bool realtime = sched_setscheduler(0, SCHED_FIFO, &priority) == 0;

  nfq_handle* handle = nullptr;
  nfq_q_handle* queue = nullptr;
  if (!open_queue(queue_number, holder, handle, queue)) return 1;

  struct sigaction action {};
  action.sa_handler = [](int) { stop_requested = 1; };
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  const int fd = nfq_fd(handle);
  std::vector<char> buffer(256 * 1024);
  uint64_t overruns = 0;
  std::cout << "link_delay: holding the packets of queue " << queue_number << " for " << delay_us << " us"
            << (realtime ? "" : " (no real-time priority: releases may be late when the CPUs are busy)") << std::endl;
  while (!stop_requested) {
    // Sleep until the oldest held packet is due, or something arrives (at most 100 ms, to see SIGTERM).
    int64_t wait_ns = 100'000'000;
    if (!holder.held.empty()) {
      wait_ns = std::clamp<int64_t>(holder.held.front().arrived_ns + holder.delay_ns - now_ns(), 0, wait_ns);
    }
    pollfd readable{fd, POLLIN, 0};
    const timespec timeout{static_cast<time_t>(wait_ns / 1000000000), static_cast<long>(wait_ns % 1000000000)};
    const int ready = ppoll(&readable, 1, &timeout, nullptr);
    if (ready < 0 && errno != EINTR) {
      std::cerr << "link_delay: poll failed: " << std::strerror(errno) << "\n";
      break;
    }
    if (ready > 0) {
      for (int i = 0; i < 1024; ++i) {  // whatever has arrived, bounded so that due packets are not starved
        const ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
        if (n < 0) {
          // ENOBUFS: the socket overflowed and some queue messages were lost. Their packets wait in
          // the kernel until the next batch verdict, whose id covers them.
          if (errno == ENOBUFS) ++overruns;
          break;
        }
        nfq_handle_packet(handle, buffer.data(), static_cast<int>(n));
      }
    }
    release_due(queue, holder, now_ns(), false);
  }
  release_due(queue, holder, now_ns(), true);
  nfq_destroy_queue(queue);
  nfq_close(handle);

  print_summary(holder, delay_us, overruns);
  return 0;
}
