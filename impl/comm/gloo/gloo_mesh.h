// Connecting a Gloo TCP context to every peer within one deadline. Gloo's own connectFullMesh
// waits for each peer's address and then each pair's connection in turn, each wait up to the
// context's timeout and a pair's first connection up to five times it, so a rank whose peer left
// during creation returned long after the timeout its caller gave (15 s for 3 s was seen).
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <memory>

#include "impl/comm/peer_probe.h"
#include "impl/comm/rendezvous/store.h"
#include "impl/core/status.h"

namespace gloo::transport {
class Device;
}  // namespace gloo::transport

namespace shardrec::comm {

// A Gloo context whose pairs ConnectMesh creates and connects.
class MeshContext : public gloo::Context {
 public:
  MeshContext(int rank, int size) : gloo::Context(rank, size) {}
  // Closes the pairs side by side before Gloo destroys them one by one: each close waits for a
  // tick of Gloo's event loop (10 ms), which made a failed or destroyed world of 1000 ranks
  // take 10 s; a pair already closed is destroyed at once.
  ~MeshContext() override;

  // Creates a pair to every other rank on `device`, publishes their addresses under this rank's
  // key of `store` and connects each pair to its peer's published address, all before
  // `deadline`: the store's waits get the time left, and at the deadline a watchdog fails the
  // pair still connecting, which wakes its wait at once (a later pair is not started). A store
  // failure (a peer's addresses did not arrive, or the store broke) is returned as the store
  // reported it; a pair that could not connect throws Gloo's exception, for the caller to map (a
  // peer refused or vanished, or the deadline passed). Called once, before the context is shared;
  // `store` is not kept.
  Status ConnectMesh(Store* store, const std::shared_ptr<gloo::transport::Device>& device,
                     std::chrono::steady_clock::time_point deadline);

  // Each peer's Gloo address as it published it (those of another transport are left out);
  // complete once ConnectMesh succeeded.
  const std::vector<PeerAddress>& peers() const { return peers_; }

 private:
  std::vector<PeerAddress> peers_;
};

}  // namespace shardrec::comm
