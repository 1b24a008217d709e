// PeerAddresses (internal to ProcessGroupGloo): which rank is behind each address that Gloo's
// errors print ("Read timeout [10.0.0.2]:4242"), so that a failure can name the rank.
//
// A pair's error names the peer by one of two addresses, depending on which side connected
// and when: the address the peer's end had once connected (each rank publishes its own, one
// per connection, under tinyddp/gloo-address/<mesh>/<rank>/<peer>), or the one the peer
// offered in the rendezvous (its value under the mesh's rendezvous prefix: one address per
// pair, each in Gloo's fixed-size encoding).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tinyddp/comm/store.h"

namespace gloo {
class Context;
}

namespace tinyddp::comm::detail {

class PeerAddresses {
 public:
  // One connected mesh: a short name for the published keys, the store prefix its rendezvous
  // used, and the context.
  struct Mesh {
    const char* name;
    const char* rendezvous_prefix;
    gloo::Context* context;
  };

  PeerAddresses() = default;
  // Publishes this rank's addresses of every mesh, then reads every peer's.
  PeerAddresses(Store& store, int rank, int size, const std::vector<Mesh>& meshes);

  // `message` with " (rank r)" after each peer address it holds ("(rank 1 or 2)" where one
  // address was both, at different times: a port reused).
  std::string name_ranks(const std::string& message) const;

 private:
  void add(const std::string& address, int peer);
  std::map<std::string, std::vector<int>> ranks_;  // "[ip]:port" -> the peer(s) behind it
};

}  // namespace tinyddp::comm::detail
