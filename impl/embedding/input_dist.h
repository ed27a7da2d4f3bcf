// Input distribution: validates a local batch, routes every id to the shards holding its row
// (all column shards of its row block), exchanges the ids with the shard owners, and rebuilds
// per-shard bags on the owner side. Also records what must come back to whom.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/check.h"
#include "impl/core/status.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/layout.h"

namespace shardrec::embedding {

// Bags received for one local shard, ordered (source rank, unit, sample). Pooled collections
// keep only non-empty bags; sequence collections treat every id as its own one-row "bag".
struct ShardBags {
  std::vector<int64_t> offsets;  // pooled: num_bags + 1 CSR offsets into rows
  std::vector<int64_t> rows;     // local row indices
  std::vector<float> weights;    // empty when no source sent weights
  int64_t num_bags = 0;          // rows of this shard in the staging buffer
  size_t staging_offset = 0;     // floats
};

// A run of `count` staging rows of one local shard that travel in one piece of the return
// (and gradient) message of one source rank.
struct Segment {
  int32_t local = 0;
  int64_t bag_begin = 0;
  int64_t count = 0;
  size_t buf_offset = 0;  // floats, in the owner's return buffer (all sources)
};

// Everything about one batch in flight on this rank.
struct RoutedBatch {
  // Sender side.
  int64_t batch_size = 0;
  int64_t num_values = 0;
  bool weighted = false;
  std::vector<int64_t> counts_send;  // kCountFields per rank
  std::vector<size_t> send_bytes;    // per destination
  std::vector<uint8_t> send;
  std::vector<int64_t> ret_count;        // per unit: rows that come back
  std::vector<int64_t> ret_target;       // (destination, unit, row) order: output row of each
  std::vector<size_t> ret_floats_from;   // per destination: floats that come back
  std::vector<float> mean_div;           // [pair * batch_size + b] (MEAN pairs; 0 = empty bag)
  std::vector<int64_t> dp_offsets;       // per DP pair: batch_size + 1 offsets into dp_rows
  std::vector<size_t> dp_offsets_begin;  // per DP pair (index in Layout::dp_pairs)
  std::vector<int64_t> dp_rows;          // rows of DP tables (full-table copies)
  std::vector<float> dp_weights;         // empty when unweighted
  std::vector<int64_t> dp_pos;           // sequence: output row of each DP id

  // Owner side.
  std::vector<int64_t> counts_recv;  // kCountFields per rank
  std::vector<size_t> recv_bytes;    // per source
  std::vector<uint8_t> recv;
  std::vector<ShardBags> shards;  // per local shard
  std::vector<Segment> segments;
  std::vector<size_t> ret_floats_to;  // per source: floats this rank returns
  size_t staging_size = 0;            // floats

  // Scratch reused between batches.
  std::vector<std::vector<int64_t>> unit_rows;
  std::vector<std::vector<float>> unit_weights;
  std::vector<std::vector<int32_t>> unit_lengths;
  std::vector<std::vector<int64_t>> unit_targets;
};

// Per-rank fields of the count exchange: rejected flag, batch size, ids sent, weighted.
constexpr size_t kCountFields = 4;

// Checks `batch` and routes it into `rb` (sender side). On failure nothing outside `rb` has
// changed and the returned message names the feature, sample, position and id.
Status RouteBatch(const Layout& layout, BoundsPolicy bounds, const Batch& batch, RoutedBatch* rb);

// The collective part: exchanges counts (and the rejected flag, so a rejecting rank and its
// peers all stop here) and then the routed ids over `comm`. `local_error` is this rank's
// RouteBatch failure (OK if none): it is returned unchanged, and peers learn which rank
// rejected its batch.
Status ExchangeInput(const Layout& layout, comm::Communicator& comm, const Status& local_error,
                     RoutedBatch* rb);

// Owner side: rebuilds per-shard bags and the return segments from the received ids.
Status UnpackInput(const Layout& layout, RoutedBatch* rb);

}  // namespace shardrec::embedding
