// The TCPStore wire format shared by its client (tcp_store.cc) and server
// (tcp_store_server.cc): see tcp_store.h for the layout (internal to comm).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "tinyddp/comm/store.h"

namespace tinyddp::comm::store_protocol {

enum Command : uint8_t { kSet = 1, kGet, kAdd, kCompareSet, kCheck, kWait, kDelete, kNumKeys };
enum Status : uint8_t { kOk = 0, kFailed = 1, kTimedOut = 2 };

// Field encoding.
inline void put_u32(Bytes& out, uint32_t v) {
  out.insert(out.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4);
}
inline void put_i64(Bytes& out, int64_t v) {
  out.insert(out.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8);
}
inline void put_bytes(Bytes& out, const uint8_t* data, size_t size) {
  put_u32(out, static_cast<uint32_t>(size));
  out.insert(out.end(), data, data + size);
}
inline void put_bytes(Bytes& out, const Bytes& b) { put_bytes(out, b.data(), b.size()); }
inline void put_string(Bytes& out, const std::string& s) {
  put_bytes(out, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

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

}  // namespace tinyddp::comm::store_protocol
