// Mesh: the world communicator cut into a sharding-group communicator (model parallel, ranks
// 0..S-1 = plan ranks) and a replica-group communicator (weight sync) for this rank.
#pragma once

#include <memory>

#include "impl/comm/communicator.h"
#include "impl/replica/layout.h"

namespace shardrec::replica {

class Mesh {
 public:
  // Collective over `world`: splits it twice. Errors: kInvalidArgument for a bad group size,
  // plus whatever the splits return (kTimeout/kRemote).
  static Status Create(std::shared_ptr<comm::Communicator> world, int shard_size, MeshKind kind,
                       std::unique_ptr<Mesh>* out);

  const Layout& layout() const { return layout_; }
  int rank() const { return world_->Rank(); }
  const std::shared_ptr<comm::Communicator>& world() const { return world_; }
  const std::shared_ptr<comm::Communicator>& sharding() const { return sharding_; }
  const std::shared_ptr<comm::Communicator>& replica() const { return replica_; }

 private:
  Layout layout_;
  std::shared_ptr<comm::Communicator> world_;
  std::shared_ptr<comm::Communicator> sharding_;
  std::shared_ptr<comm::Communicator> replica_;
};

}  // namespace shardrec::replica
