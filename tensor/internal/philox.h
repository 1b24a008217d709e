// Counter-based random numbers for kernels that draw on the device (dropout on a GPU): the
// Philox4x32-10 generator of Salmon, Moraes, Dror and Shaw ("Parallel random numbers: as easy
// as 1, 2, 3", SC11), the one cuRAND and PyTorch's GPU kernels use. Four 32-bit words are a
// pure function of a 128-bit counter and a 64-bit key, so every thread computes its own
// numbers with no shared state, and host code computes the same ones (tests rebuild a GPU
// mask on the host from this header).
//
// How dropout uses it (dropout_keep below): the key is one 64-bit draw from the op's host
// generator; element i of the mask takes word i % 4 of the block at counter i / 4.
#pragma once

#include <cstdint>

#include "tinyddp/tensor/internal/math_functions.h"

namespace tinyddp::tensor::philox {

struct Block {
  uint32_t w[4];
};

// The high and low 32 bits of a * b.
TINYDDP_HOST_DEVICE inline void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(product >> 32);
  lo = static_cast<uint32_t>(product);
}

// Ten rounds of Philox4x32 on `counter` under `key` (k0, k1). The round: two 32 x 32 -> 64-bit
// products of the even words by the two multipliers; the odd words and the key mix into the
// high halves, the low halves move across; the key grows by the two Weyl constants after each
// round but the last.
TINYDDP_HOST_DEVICE inline Block philox4x32_10(Block counter, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t* c = counter.w;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kMul0, c[0], hi0, lo0);
    mul_hi_lo(kMul1, c[2], hi1, lo1);
    const uint32_t next[4] = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    for (int i = 0; i < 4; ++i) c[i] = next[i];
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return counter;
}

// The block of mask elements 4 b .. 4 b + 3 under a 64-bit seed.
TINYDDP_HOST_DEVICE inline Block block_at(uint64_t seed, uint64_t b) {
  Block counter{{static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), 0u, 0u}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// A word as a uniform float in [0, 1): its top 24 bits times 2^-24 (exact in float).
TINYDDP_HOST_DEVICE inline float uniform(uint32_t word) { return static_cast<float>(word >> 8) * (1.0f / 16777216.0f); }

// Whether dropout keeps element i under `seed`, keeping with probability `keep` (1 - p):
// uniform(word) < keep, with `keep` rounded to float as the comparison's.
TINYDDP_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint64_t i, float keep) {
  return uniform(block_at(seed, i >> 2).w[i & 3]) < keep;
}

// dropout_keep for indices asked in increasing order (a row of a mask): one Philox block per
// four consecutive indices, not one per index.
class KeepStream {
 public:
  TINYDDP_HOST_DEVICE KeepStream(uint64_t seed, float keep) : seed_(seed), keep_(keep) {}
  TINYDDP_HOST_DEVICE bool operator()(uint64_t i) {
    if (!cached_ || i >> 2 != block_) {
      block_ = i >> 2;
      bits_ = block_at(seed_, block_);
      cached_ = true;
    }
    return uniform(bits_.w[i & 3]) < keep_;
  }

 private:
  uint64_t seed_;
  float keep_;
  uint64_t block_ = 0;
  Block bits_{};
  bool cached_ = false;
};

}  // namespace tinyddp::tensor::philox
