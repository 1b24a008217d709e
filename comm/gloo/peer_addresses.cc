// PeerAddresses (peer_addresses.h): each rank publishes the addresses of its connections in
// the store, so that an address in one of Gloo's errors can be turned into the rank behind it.
#include "tinyddp/comm/gloo/peer_addresses.h"

#include <gloo/context.h>
#include <gloo/transport/tcp/address.h>

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tinyddp::comm::detail {

namespace {
std::string published_key(const char* mesh, int rank, int peer) {
  return fmt::format("tinyddp/gloo-address/{}/{}/{}", mesh, rank, peer);
}
}  // namespace

PeerAddresses::PeerAddresses(Store& store, int rank, int size, const std::vector<Mesh>& meshes) {
  for (const Mesh& mesh : meshes) {
    for (int peer = 0; peer < size; ++peer) {
      if (peer == rank) continue;
      const auto& own = dynamic_cast<const gloo::transport::tcp::Address&>(mesh.context->getPair(peer)->address());
      store.set(published_key(mesh.name, rank, peer), own.str());
    }
  }
  const size_t encoded_size = gloo::transport::tcp::Address().bytes().size();
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    for (const Mesh& mesh : meshes) {
      const std::vector<uint8_t> text = store.get(published_key(mesh.name, peer, rank));
      add(std::string(text.begin(), text.end()), peer);
      // A Gloo that keeps its rendezvous under other keys or in another encoding: skip.
      const std::string offered_key = fmt::format("{}/{}", mesh.rendezvous_prefix, peer);
      if (!store.check({offered_key})) continue;
      const Bytes offered = store.get(offered_key);
      if (offered.size() % encoded_size != 0) continue;
      for (size_t at = 0; at < offered.size(); at += encoded_size) {
        add(gloo::transport::tcp::Address(std::vector<char>(offered.begin() + at, offered.begin() + at + encoded_size))
                .str(),
            peer);
      }
    }
  }
}

void PeerAddresses::add(const std::string& address, int peer) {
  std::vector<int>& ranks = ranks_[address];
  if (std::find(ranks.begin(), ranks.end(), peer) == ranks.end()) ranks.push_back(peer);
}

std::string PeerAddresses::name_ranks(const std::string& message) const {
  std::string out = message;
  for (const auto& [address, peers] : ranks_) {
    const std::string label = fmt::format(" (rank {})", fmt::join(peers, " or "));  // "(rank 2)", "(rank 1 or 2)"
    for (size_t at = out.find(address); at != std::string::npos; at = out.find(address, at + 1)) {
      const size_t end = at + address.size();
      // "[ip]:port" followed by a digit is another port; and do not name a rank twice.
      if (end < out.size() && std::isdigit(static_cast<unsigned char>(out[end]))) continue;
      if (out.compare(end, label.size(), label) == 0) continue;
      out.insert(end, label);
    }
  }
  return out;
}

}  // namespace tinyddp::comm::detail
