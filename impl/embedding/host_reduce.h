// The return exchange of row-split tables whose shards share one host (table-row-wise, and each
// column block of grid), reduced inside that host before it crosses to the samples' host, as
// TorchRec's intra-node reduce-scatter before its cross-node all-to-all: the shards' partial
// sums for a remote sample rank go over the host's own communicator to one rank of the host (the
// aggregator), which sums them and sends one row per sample across; in backward that rank
// receives one gradient row per sample and hands it to the host's shards. The host link carries
// a table's rows once instead of once per shard. docs/multihost.md has the figures.
//
// Results are bit-identical to the flat exchange (output_dist.h): the flat combine adds a
// sample's partial sums one after the other, starting from +0, in combine order (by owner rank,
// then unit); the aggregator adds the same partial sums in that same order starting from +0
// (a shard with no ids for the sample adds +0, which changes no sum that started at +0), and the
// receiving rank writes the sum into the slot of the first contributing unit and +0 into the
// others, so CombineOutput's adds give the sum unchanged. That order is why a group must hold
// every row split of its columns: a table whose row blocks span hosts (row-wise) keeps the flat
// exchange, since summing per host first would change the order of the adds.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/status.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"

namespace shardrec::embedding {

// Not thread-safe: one per collection, used by one thread at a time (the forward's exchange runs
// on the communication worker, the backward's on the caller; they never overlap).
class HostReduce {
 public:
  // Finds the groups of `layout` (which must outlive this) and, when there are any, splits the
  // host communicator off `comm` (collective: every rank of `comm` calls Init, and every rank
  // finds the same groups, since they come from the plan). Hosts are the plan's
  // local_world_size consecutive ranks. Sequence collections, one host, a plan whose
  // host_reduce is 0 (the planner found the flat exchange cheaper) and SHARDREC_HOST_REDUCE=0 in
  // the environment leave it inactive; SHARDREC_HOST_REDUCE=1 overrides the plan's 0 (both are
  // switches for measuring one exchange against the other). Any rank's "inactive" wins.
  Status Init(const Layout& layout, comm::Communicator& comm);
  bool active() const { return host_comm_ != nullptr; }

  // The forward's fp32 return exchange over `comm` (the collection's communicator), in place of
  // AllToAllV(send, ReturnSendCounts, recv, ReturnRecvCounts): `send` is this rank's return
  // message (its travelling part is read), `recv` is filled in the flat receive layout, ready for
  // CombineOutput. Needs the host input distribution (rb.recv holds the received ids).
  Status Forward(comm::Communicator& comm, const RoutedBatch& rb, const float* send, float* recv);

  // The backward's fp32 gradient exchange of the same batch (the last Forward's), in place of
  // AllToAllV(send, ReturnRecvCounts, recv, ReturnSendCounts): `send` is packed in the forward's
  // receive layout (PackGradients), `recv` is filled in the forward's send layout.
  Status Backward(comm::Communicator& comm, const RoutedBatch& rb, const float* send, float* recv);

 private:
  // Units of one pair and column range, every row split of those columns, all on one host.
  struct Group {
    int32_t host = 0;
    int32_t cols = 0;
    std::vector<int32_t> units;  // in combine order: by rank, then unit index
    std::vector<int32_t> ranks;  // the distinct owner ranks, ascending
  };
  // Rows of one unit for one peer in a flat buffer: `count` rows from float `at`, their samples
  // at targets[first .. first + count).
  struct Slot {
    int64_t at = 0;
    int64_t count = 0;
    int64_t first = 0;
  };

  int32_t HostOf(int32_t rank) const { return rank / rpn_; }
  int32_t Aggregator(const Group& g, int32_t d) const {
    return g.ranks[static_cast<size_t>(d) % g.ranks.size()];
  }
  // Whether unit u's rows for samples of rank d take the reduced route.
  bool Reduced(int32_t u, int32_t d) const {
    return group_of_[u] >= 0 && groups_[group_of_[u]].host != HostOf(d);
  }
  int64_t BatchOf(const RoutedBatch& rb, int32_t d) const;
  // Owner slots (own_slot_, own_targets_) from the received ids, sample slots (peer_slot_) and the
  // union of each remote group's samples (peer_union_) from the routing.
  Status Describe(const RoutedBatch& rb);
  const Slot& OwnSlot(int32_t source, int32_t u) const;
  int64_t LocalIndex(int32_t rank) const { return rank - HostOf(rank) * rpn_; }

  const Layout* layout_ = nullptr;
  int32_t rpn_ = 1;
  std::unique_ptr<comm::Communicator> host_comm_;
  std::vector<Group> groups_;
  std::vector<int32_t> group_of_;       // per unit: its group or -1
  std::vector<int32_t> my_unit_index_;  // per unit: index in units_to_rank[rank] or -1

  // Per batch.
  std::vector<Slot> own_slot_;  // [source * my_units + i]
  std::vector<int64_t> own_targets_;
  std::vector<Slot> peer_slot_;         // per unit of another rank (sample side)
  std::vector<int64_t> peer_union_at_;  // per group + 1: peer_union_ offsets (remote groups)
  std::vector<int64_t> peer_union_;     // samples, ascending
  std::vector<int64_t> peer_first_;     // per peer_union_ entry: float offset of its first slot row
  // The aggregator's union of each (group, sample rank) it serves, kept from Forward for Backward.
  const RoutedBatch* union_batch_ = nullptr;
  std::vector<int64_t> agg_union_at_;  // [group * world + d] + 1
  std::vector<int64_t> agg_union_;
  // Scratch.
  std::vector<float> send1_, recv1_, send2_, recv2_, dense_;
  std::vector<int64_t> map_;
  std::vector<size_t> c1s_, c1r_, c2s_, c2r_;
};

}  // namespace shardrec::embedding
