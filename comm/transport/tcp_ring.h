// TcpRing, the project's own transport (not Gloo's): large allreduces (and the reduce-scatters
// and allgathers that are its two halves) over a ring of plain TCP connections, driven by the
// calling thread, and the two-rank pair exchange (swap) that
// ProcessGroupGloo runs its small two-rank allreduces and the desync check's records on.
//
// Gloo's general allreduce moves data through its transport's event-loop thread. While the
// calling thread writes a segment to a connection it holds that connection's lock, and the
// event loop, finding incoming data it may not read yet, polls again at once: on a 2-core
// machine running two ranks that busy loop took a fifth of all CPU time during DDP training
// (about 10,000 epoll_wait calls per step), time that the backward pass needed.
//
// TcpRing keeps one connection to the next rank and one from the previous rank, both
// non-blocking, and moves every byte from the thread that asked for the allreduce: it sends
// and receives at once with poll(2), which sleeps until one of the two sockets can make
// progress, and reduces what it receives as it arrives.
//
// The algorithm, for n ranks, the buffer cut into n nearly equal chunks: reduce-scatter (n - 1
// steps: send a chunk to the next rank, receive another from the previous one and combine it
// into ours as it arrives), after which each rank holds one chunk fully reduced; then
// allgather (n - 1 steps passing the finished chunks on). Each element is reduced on one rank
// and copied to the others, so every rank holds identical bits. On 2 ranks this moved 25 MiB
// in 4.8-5.2 ms here, where exchanging whole buffers (the same bytes on the wire, but twice
// the reduction work) took 6.2-6.5 ms.
// A failure (a peer that closed its connection, the timeout) leaves data in flight, so the
// ring refuses every later allreduce with the first error.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "tinyddp/comm/store.h"

namespace tinyddp::comm::detail {

class TcpRing {
 public:
  // out[i] = a[i] op b[i] for n elements (out may be a or b).
  using Reduce = std::function<void(void* out, const void* a, const void* b, size_t n)>;

  // Listens on `local` (its port is ignored: one is chosen), publishes the address under
  // "<prefix>/<rank>" in `store`, connects to rank + 1 and accepts rank - 1 (mod size), all
  // within `timeout`. size >= 2.
  TcpRing(Store& store, const std::string& prefix, int rank, int size, const sockaddr_storage& local,
          std::chrono::milliseconds timeout);
  ~TcpRing();
  TcpRing(const TcpRing&) = delete;
  TcpRing& operator=(const TcpRing&) = delete;

  // Allreduces `count` elements of `element_size` bytes at `data` in place, within `timeout`.
  // Every rank must call it with the same count, element size and reduction.
  void allreduce(void* data, size_t count, size_t element_size, const Reduce& reduce,
                 std::chrono::milliseconds timeout);
  // The allreduce's two halves alone, on `data` of size x `chunk_count` elements (chunk r is
  // elements [r chunk_count, (r + 1) chunk_count)). reduce_scatter leaves chunk `rank` reduced
  // over every rank's data (the other chunks hold partial sums); allgather sends this rank's
  // chunk `rank` and receives every other rank's own chunk into place. Each moves (n - 1) / n
  // of the buffer, half an allreduce's traffic.
  void reduce_scatter(void* data, size_t chunk_count, size_t element_size, const Reduce& reduce,
                      std::chrono::milliseconds timeout);
  void allgather(void* data, size_t chunk_count, size_t element_size, std::chrono::milliseconds timeout);
  // out[i] = widened in[i] (add: out[i] plus it) for n elements.
  using Widen = std::function<void(void* out, const void* in, size_t n, bool add)>;
  // A reduce-scatter whose contributions change type on the way (the deterministic option's
  // float32 chunks rounded into int64 sums, ddp/exact_sum.h): `data` holds this rank's size x
  // chunk_count elements of in_size bytes; `out` receives chunk `rank` of the sum over the ranks
  // of their widened values (chunk_count elements of out_size bytes; widen(add) adds them up). The
  // first hop carries the contributions' own bytes, the rest widened partial sums:
  // on 2 ranks every byte on the wire is an input's.
  void reduce_scatter_widened(const void* data, size_t in_size, void* out, size_t out_size, size_t chunk_count,
                              const Widen& widen, std::chrono::milliseconds timeout);

  // Two ranks only (next and previous are the peer): sends `message` to the peer while
  // receiving the peer's message into the front of `received` (grown once to the longest
  // message, never shrunk, so that no call refills it) and returns its length. The peer's message starts with
  // `prefix_bytes` that say how many bytes follow: `rest_of(prefix)` reads them (at most
  // `max_rest_bytes`; it throws for a prefix it refuses, which leaves the connections unusable). Messages of any length
  // meet, so the peers stay in step whatever they sent (the desync check's records, alone or
  // followed by a small allreduce's data: process_group_gloo.h).
  size_t swap(const std::vector<char>& message, size_t prefix_bytes, size_t max_rest_bytes,
              const std::function<size_t(const char*)>& rest_of, std::vector<char>& received,
              std::chrono::milliseconds timeout);

 private:
  // Sends send_bytes to rank + 1 while receiving recv_bytes from rank - 1; `on_receive(bytes
  // received so far)`, if given, runs after every receive (and may raise recv_bytes, up to
  // the room at recv_data).
  void exchange(const char* send_data, size_t send_bytes, char* recv_data, const size_t& recv_bytes,
                std::chrono::steady_clock::time_point deadline, const std::function<void(size_t)>& on_receive);
  [[noreturn]] void fail(const std::string& message, bool timed_out);
  // The ring's two phases over `count` elements at `bytes` cut into size_ nearly equal chunks:
  // after reduce_scatter_phase chunk (rank + 1 + shift) holds every rank's contribution;
  // allgather_phase starts from chunk (rank + 1 + shift) complete on each rank and ends with
  // every chunk everywhere. The allreduce runs both with shift 0; the reduce-scatter and the
  // allgather alone use shift -1, so that rank r's own chunk is chunk r.
  void reduce_scatter_phase(char* bytes, size_t count, size_t element_size, const Reduce& reduce, int shift,
                            std::chrono::steady_clock::time_point deadline);
  void allgather_phase(char* bytes, size_t count, size_t element_size, int shift,
                       std::chrono::steady_clock::time_point deadline);
  // Throws the first failure again if there was one; names the operation for the messages.
  void check_usable(const char* operation);

  int rank_;
  int size_;
  int send_fd_ = -1;    // to rank + 1
  int recv_fd_ = -1;    // from rank - 1
  std::string broken_;  // the first failure; later runs repeat it
  bool broken_by_timeout_ = false;
  std::vector<char> scratch_;
  std::string operation_ = "allreduce";  // what the current exchange is part of, for messages
  std::string right_name_, left_name_;   // "[10.0.0.2]:40123 (rank 1)": rank + 1's and rank - 1's
};

}  // namespace tinyddp::comm::detail
