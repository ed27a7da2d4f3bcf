// Input distribution's routing (input_dist.h): every id of a checked batch written once, straight
// into its place in its destination's message, with the return bookkeeping of the sample side.
#include <algorithm>
#include <cstring>

#include "impl/embedding/dynamic/placement.h"
#include "impl/embedding/input_dist.h"

namespace shardrec::embedding {

namespace {

size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// memcpy that accepts empty ranges: an empty vector's data() may be null, and memcpy with a null
// pointer is undefined even for zero bytes.
void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

inline int64_t IdAt(const Batch& b, size_t i) {
  return b.values_dtype == DType::kInt64 ? static_cast<const int64_t*>(b.values)[i]
                                         : static_cast<const int32_t*>(b.values)[i];
}

// Walks every id of (feature, table) pair `p` in order and hands each accepted id to
// `fn(sample, position, row, weight)`; ids the bounds policy drops are skipped, clamped ids
// arrive as row 0. Returns the error for an id outside the table under kError.
template <typename Fn>
Status ForEachIdOfPair(const Layout& l, BoundsPolicy bounds, const Batch& batch,
                       const std::vector<size_t>& feature_begin, size_t p, Fn&& fn) {
  const auto& plan = *l.plan;
  const int64_t B = batch.batch_size;
  const BagIndex bags = BagIndex::Plain(B);
  const Pair& pair = l.pairs[p];
  const auto& cfg = plan.tables[pair.table];
  // A dynamic table takes every id (a data-parallel one's copy translates them after the
  // agreement, dynamic/dp_agree.h).
  const bool dynamic = cfg.dynamic.enabled;
  size_t pos = feature_begin[pair.feature];
  for (int64_t b = 0; b < B; ++b) {
    const int32_t len = batch.lengths[bags.bag(pair.feature, b)];
    for (int32_t k = 0; k < len; ++k) {
      const size_t i = pos + static_cast<size_t>(k);
      int64_t x = IdAt(batch, i);
      if ((x < 0 || x >= cfg.rows) && !dynamic) {
        if (bounds == BoundsPolicy::kSkip) continue;
        if (bounds != BoundsPolicy::kClamp)
          return IdOutOfRangeError(plan, pair.feature, pair.table, b, i, x);
        x = 0;
      }
      fn(b, i, x, batch.weights != nullptr ? batch.weights[i] : 1.0f);
    }
    pos += static_cast<size_t>(len);
  }
  return Status::Ok();
}

// The walk of sharded tables, compiled per id type: `fn(sample, position, row, weight)` sees the
// accepted ids as ForEachIdOfPair would (same order, same bounds policy, same error);
// `done(sample)` follows each sample's ids. Tables with a single row block (table-wise,
// column-wise, row-wise over one rank) send every id of the pair to the same units, so they
// search no row block per id; the others find it in a flattened PairBlocks.
template <typename IdT, typename Fn, typename Done>
Status ForEachIdOfShardedPairAs(const Layout& l, BoundsPolicy bounds, const Batch& batch,
                                const std::vector<size_t>& feature_begin, size_t p, Fn&& fn,
                                Done&& done) {
  const auto& plan = *l.plan;
  const int64_t B = batch.batch_size;
  const BagIndex bags = BagIndex::Plain(B);
  const Pair& pair = l.pairs[p];
  const auto& cfg = plan.tables[pair.table];
  const int64_t rows = cfg.rows;
  // A dynamic table takes every id (docs/dynamic-tables.md): no bounds policy applies.
  const bool dynamic = cfg.dynamic.enabled;
  const IdT* ids = static_cast<const IdT*>(batch.values);
  const int32_t* lengths = batch.lengths + bags.bag(pair.feature, 0);
  const float* weights = batch.weights;
  size_t pos = feature_begin[pair.feature];
  for (int64_t b = 0; b < B; ++b) {
    const size_t end = pos + static_cast<size_t>(lengths[b]);
    for (size_t i = pos; i < end; ++i) {
      int64_t x = ids[i];
      if ((x < 0 || x >= rows) && !dynamic) [[unlikely]] {
        if (bounds == BoundsPolicy::kSkip) continue;
        if (bounds != BoundsPolicy::kClamp)
          return IdOutOfRangeError(plan, pair.feature, pair.table, b, i, x);
        x = 0;
      }
      fn(b, i, x, weights != nullptr ? weights[i] : 1.0f);
    }
    done(b);
    pos = end;
  }
  return Status::Ok();
}

template <typename Fn, typename Done>
Status ForEachIdOfShardedPair(const Layout& l, BoundsPolicy bounds, const Batch& batch,
                              const std::vector<size_t>& feature_begin, size_t p, Fn&& fn,
                              Done&& done) {
  if (batch.values_dtype == DType::kInt64)
    return ForEachIdOfShardedPairAs<int64_t>(l, bounds, batch, feature_begin, p, fn, done);
  return ForEachIdOfShardedPairAs<int32_t>(l, bounds, batch, feature_begin, p, fn, done);
}

bool SingleBlock(const TableLayout& tl) { return !tl.data_parallel && tl.blocks.size() == 1; }

// A sharded table split into several row blocks (row-wise, table-row-wise, grid), flattened for
// one pair: the blocks' first rows in a short sorted array, and each block's units with their
// destination ranks, so an id finds its block and units without walking the layout's vectors.
// A dynamic table's id goes to the block its hash names and travels as itself (the owner
// translates it to a slot).
struct PairBlocks {
  std::vector<int64_t> first;       // per block: its first row (ascending)
  std::vector<int32_t> unit_begin;  // per block + 1: its range in units / ranks
  std::vector<int32_t> units;
  std::vector<int32_t> ranks;
  bool dynamic = false;

  PairBlocks(const Layout& l, size_t p) {
    const TableLayout& tl = l.tables[l.pairs[p].table];
    dynamic = tl.dynamic;
    unit_begin.push_back(0);
    for (const RowBlock& block : tl.blocks) {
      first.push_back(block.row_offset);
      for (int32_t s : block.shards) {
        const int32_t u = l.unit_of[p][s];
        units.push_back(u);
        ranks.push_back(l.units[u].rank);
      }
      unit_begin.push_back(static_cast<int32_t>(units.size()));
    }
  }
  // The block holding row x, as FindRowBlock finds it (the last block starting at or before x).
  // A few blocks are counted without branches: random ids would mispredict a search's branches.
  int32_t BlockOf(int64_t x) const {
    if (dynamic) return dynamic::BlockOfId(x, static_cast<int32_t>(first.size()));
    if (first.size() <= 8) {
      int32_t k = -1;
      for (int64_t f : first) k += x >= f ? 1 : 0;
      return k;
    }
    return static_cast<int32_t>(std::upper_bound(first.begin(), first.end(), x) - first.begin()) -
           1;
  }
};

// Runs fn(pair) for every pair on the context's threads. Every unit, DP cursor and divisor row
// belongs to one pair, so pairs never write the same memory. The error reported is the one of
// the first failing pair, as a sequential walk would find it.
template <typename Fn>
Status ForEachPair(const ExecContext& ctx, const Layout& l, std::vector<Status>* statuses,
                   Fn&& fn) {
  statuses->assign(l.pairs.size(), Status::Ok());
  ctx.ParallelFor(0, static_cast<int64_t>(l.pairs.size()), 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      (*statuses)[static_cast<size_t>(p)] = fn(static_cast<size_t>(p));
  });
  for (const Status& s : *statuses) SR_RETURN_IF_ERROR(s);
  return Status::Ok();
}

// Whether every id of pair `p` goes to the same units, whatever its value: a single row block
// under a bounds policy that drops no id (an id is accepted, clamped or rejects the batch) or of
// a dynamic table (which takes every id). Its units' lengths are then the feature's lengths, so
// the routing reads its ids once, in FillPass, which also checks them.
bool EveryIdTravels(const Layout& l, BoundsPolicy bounds, size_t p) {
  const TableLayout& tl = l.tables[l.pairs[p].table];
  return SingleBlock(tl) && (bounds != BoundsPolicy::kSkip || tl.dynamic);
}

// Zeroes the lengths of pair `p`'s units before they are counted.
void ZeroUnitLengths(const Layout& l, size_t p, int64_t B, RoutedBatch* rb) {
  const TableLayout& tl = l.tables[l.pairs[p].table];
  if (tl.data_parallel) return;
  for (const RowBlock& block : tl.blocks)
    for (int32_t s : block.shards) {
      int32_t* lens = rb->unit_lengths.data() + BagIndex::Plain(B).bag(l.unit_of[p][s], 0);
      std::fill(lens, lens + B, 0);
    }
}

// Pass 1: counts, per unit, the ids of each sample, checking the ids of the pairs EveryIdTravels
// leaves out (the others' counts are their lengths); data-parallel ids are counted per pair.
// Fills mean_div. The error is the one a sequential walk over every id finds first.
Status CountPass(const ExecContext& ctx, const Layout& l, BoundsPolicy bounds, const Batch& batch,
                 const std::vector<size_t>& feature_begin, RoutedBatch* rb,
                 std::vector<int64_t>* dp_counts) {
  const int64_t B = batch.batch_size;
  const BagIndex bags = BagIndex::Plain(B);
  const size_t nu = l.units.size();
  // Every unit's lengths are written by its pair (copied, or zeroed and counted), so they are
  // not zeroed here first.
  rb->unit_lengths.resize(nu * static_cast<size_t>(B));
  rb->unit_ids.assign(nu, 0);
  rb->mean_div.assign(l.sequence ? 0 : l.pairs.size() * static_cast<size_t>(B), 0.0f);
  dp_counts->assign(l.pairs.size(), 0);
  const Status counted = ForEachPair(ctx, l, &rb->pair_status, [&](size_t p) {
    const Pair& pair = l.pairs[p];
    const TableLayout& tl = l.tables[pair.table];
    if (EveryIdTravels(l, bounds, p)) {
      // The feature's lengths are its units' lengths: no id is read here (FillPass checks them
      // as it writes them). The MEAN divisor is the bag's weight sum in id order, or its length.
      const int32_t* lengths = batch.lengths + bags.bag(pair.feature, 0);
      const int64_t n =
          static_cast<int64_t>(feature_begin[pair.feature + 1] - feature_begin[pair.feature]);
      for (int32_t s : tl.blocks[0].shards) {
        const int32_t u = l.unit_of[p][s];
        CopyBytes(rb->unit_lengths.data() + bags.bag(u, 0), lengths, 4 * B);
        rb->unit_ids[u] += n;
      }
      if (!pair.mean) return Status::Ok();
      float* div = rb->mean_div.data() + bags.bag(static_cast<int64_t>(p), 0);
      const float* w = batch.weights;
      size_t pos = feature_begin[pair.feature];
      for (int64_t b = 0; b < B; ++b) {
        const auto len = static_cast<size_t>(lengths[b]);
        if (w == nullptr) {
          // The generic walk added 1.0f per id: exactly the count (bags are under 2^24 ids).
          div[b] = static_cast<float>(len);
        } else {
          float sum = 0.0f;
          for (size_t i = pos; i < pos + len; ++i) sum += w[i];
          div[b] = len != 0 ? sum : 0.0f;
        }
        pos += len;
      }
      return Status::Ok();
    }
    ZeroUnitLengths(l, p, B, rb);
    if (SingleBlock(tl)) {
      // Counts per sample in registers, then adds them to each of the block's units once.
      int32_t* counts = rb->unit_lengths.data();
      float* div = pair.mean ? rb->mean_div.data() + bags.bag(static_cast<int64_t>(p), 0) : nullptr;
      int32_t n = 0;
      float sum = 0.0f;
      SR_RETURN_IF_ERROR(ForEachIdOfShardedPair(
          l, bounds, batch, feature_begin, p,
          [&](int64_t, size_t, int64_t, float w) {
            ++n;
            sum += w;
          },
          [&](int64_t b) {
            if (n != 0) {
              for (int32_t s : tl.blocks[0].shards) {
                const int32_t u = l.unit_of[p][s];
                counts[bags.bag(u, b)] = n;
                rb->unit_ids[u] += n;
              }
              if (div != nullptr) div[b] = sum;
            }
            n = 0;
            sum = 0.0f;
          }));
      return Status::Ok();
    }
    if (!tl.data_parallel) {
      // Counts per sample and block in a small array, added to the blocks' units once per
      // sample; the MEAN divisor is summed in id order as the generic walk does.
      const PairBlocks pb(l, p);
      int32_t* counts = rb->unit_lengths.data();
      float* div = pair.mean ? rb->mean_div.data() + bags.bag(static_cast<int64_t>(p), 0) : nullptr;
      std::vector<int32_t> n(pb.first.size(), 0);
      int32_t total = 0;
      float sum = 0.0f;
      SR_RETURN_IF_ERROR(ForEachIdOfShardedPair(
          l, bounds, batch, feature_begin, p,
          [&](int64_t, size_t, int64_t x, float w) {
            ++n[static_cast<size_t>(pb.BlockOf(x))];
            ++total;
            sum += w;
          },
          [&](int64_t b) {
            if (total == 0) return;
            for (size_t k = 0; k < n.size(); ++k) {
              if (n[k] == 0) continue;
              for (int32_t j = pb.unit_begin[k]; j < pb.unit_begin[k + 1]; ++j) {
                const int32_t u = pb.units[j];
                counts[bags.bag(u, b)] = n[k];
                rb->unit_ids[u] += n[k];
              }
              n[k] = 0;
            }
            if (div != nullptr) div[b] = sum;
            total = 0;
            sum = 0.0f;
          }));
      return Status::Ok();
    }
    // Data-parallel: counted per pair, looked up locally.
    return ForEachIdOfPair(l, bounds, batch, feature_begin, p,
                           [&](int64_t b, size_t, int64_t, float w) {
                             if (pair.mean) rb->mean_div[bags.bag(static_cast<int64_t>(p), b)] += w;
                             ++(*dp_counts)[p];
                           });
  });
  if (counted.ok()) return counted;
  // A pair checked here failed: a pair before it whose ids FillPass would have checked may hold
  // the first bad id of a sequential walk, so those are checked now (only on this error path).
  for (size_t p = 0; p < l.pairs.size() && rb->pair_status[p].ok(); ++p) {
    if (!EveryIdTravels(l, bounds, p)) continue;
    SR_RETURN_IF_ERROR(ForEachIdOfShardedPair(
        l, bounds, batch, feature_begin, p, [](int64_t, size_t, int64_t, float) {},
        [](int64_t) {}));
  }
  return counted;
}

// Sizes every message and the return bookkeeping from the counts, and places each unit's rows
// in its message (unit_cursor: index of its first id among its destination's rows).
void SizeMessages(const Layout& l, RoutedBatch* rb) {
  const int32_t world = l.world;
  const int64_t B = rb->batch_size;
  const BagIndex bags = BagIndex::Plain(B);
  rb->send_bytes.assign(world, 0);
  rb->counts_send.assign(world * kCountFields, 0);
  rb->ret_count.assign(l.units.size(), 0);
  rb->ret_floats_from.assign(world, 0);
  rb->unit_cursor.assign(l.units.size(), 0);
  size_t total = 0, targets = 0;
  for (int32_t d = 0; d < world; ++d) {
    int64_t n = 0;
    for (int32_t u : l.units_to_rank[d]) {
      int64_t ret = rb->unit_ids[u];
      if (!l.sequence) {
        ret = 0;
        const int32_t* lens = rb->unit_lengths.data() + bags.bag(u, 0);
        for (int64_t b = 0; b < B; ++b) ret += lens[b] > 0;
      }
      rb->ret_count[u] = ret;
      targets += static_cast<size_t>(ret);
      rb->ret_floats_from[d] += static_cast<size_t>(ret) * l.units[u].cols;
      n += rb->unit_ids[u];
    }
    const MessageLayout m = SendLayout(l, *rb, d, n);
    int64_t at = 0;
    for (int32_t u : l.units_to_rank[d]) {
      rb->unit_cursor[u] = at;
      at += rb->unit_ids[u];
    }
    rb->send_bytes[d] = m.bytes;
    int64_t* c = &rb->counts_send[d * kCountFields];
    c[0] = 0;
    c[1] = B;
    c[2] = n;
    c[3] = SendForm(l, *rb, d);
    total += m.bytes;
  }
  rb->send.resize(total);
  rb->ret_target.resize(targets);
}

// Pass 2: writes each accepted id once, into its unit's place in its destination's message,
// checking the ids of the pairs CountPass did not read (EveryIdTravels).
Status FillPass(const ExecContext& ctx, const Layout& l, BoundsPolicy bounds, const Batch& batch,
                const std::vector<size_t>& feature_begin, const std::vector<int64_t>& dp_counts,
                RoutedBatch* rb) {
  const int64_t B = batch.batch_size;
  const BagIndex bags = BagIndex::Plain(B);
  // Per destination: where its rows and weights start in the send buffer.
  std::vector<uint8_t*> rows_at(l.world), weights_at(l.world);
  std::vector<size_t> target_at(l.units.size(), 0);
  // The message to every other rank in rank order, then the one this rank keeps for itself: it
  // is left out of the exchange, so the others must be contiguous in rank order.
  size_t others = 0;
  for (int32_t d = 0; d < l.world; ++d)
    if (d != l.rank) others += rb->send_bytes[d];
  rb->self_offset = others;
  size_t at = 0;
  size_t t = 0;
  for (int32_t d = 0; d < l.world; ++d) {
    const auto& units = l.units_to_rank[d];
    const MessageLayout m = SendLayout(l, *rb, d, rb->counts_send[d * kCountFields + 2]);
    uint8_t* msg = rb->send.data() + (d == l.rank ? rb->self_offset : at);
    if (d != l.rank) at += m.bytes;
    WriteLengths(l, *rb, d, msg);
    for (int32_t u : units) {
      target_at[u] = t;
      t += static_cast<size_t>(rb->ret_count[u]);
    }
    rows_at[d] = msg + m.rows;
    weights_at[d] = msg + m.weights;
  }
  // Pooled: one return row per (unit, non-empty sample), in sample order.
  if (!l.sequence) {
    for (size_t u = 0; u < l.units.size(); ++u) {
      const int32_t* lens = rb->unit_lengths.data() + bags.bag(static_cast<int64_t>(u), 0);
      size_t at = target_at[u];
      for (int64_t b = 0; b < B; ++b)
        if (lens[b] > 0) rb->ret_target[at++] = b;
    }
  }
  // Data-parallel ids keep their (pair, sample, id) order in dp_rows; each DP pair's ids start
  // where the previous pair's end, and its offsets are written as its samples go by.
  std::vector<int64_t> dp_cursor(l.pairs.size(), 0), dp_filled(l.pairs.size(), 0);
  int64_t dp_total = 0;
  for (int32_t p : l.dp_pairs) {
    dp_cursor[p] = dp_total;
    dp_total += dp_counts[p];
  }
  rb->dp_rows.resize(static_cast<size_t>(dp_total));
  rb->dp_weights.resize(rb->weighted ? static_cast<size_t>(dp_total) : 0);
  rb->dp_pos.resize(l.sequence ? static_cast<size_t>(dp_total) : 0);
  rb->dp_offsets.assign(l.dp_pairs.size() * (static_cast<size_t>(B) + 1), 0);
  rb->dp_offsets_begin.resize(l.dp_pairs.size());
  std::vector<int64_t*> dp_off(l.pairs.size(), nullptr);
  for (size_t k = 0; k < l.dp_pairs.size(); ++k) {
    rb->dp_offsets_begin[k] = k * (static_cast<size_t>(B) + 1);
    dp_off[l.dp_pairs[k]] = rb->dp_offsets.data() + rb->dp_offsets_begin[k];
  }
  std::vector<int64_t>& cursor = rb->unit_cursor;  // advanced in place
  // Each pair writes its own units' rows, cursors and targets, and its own DP slots. Only the walk
  // of a pair CountPass did not read can fail (kError), at the first bad id of a sequential walk
  // (CountPass accepted every pair).
  const Status filled = ForEachPair(ctx, l, &rb->pair_status, [&](size_t p) {
    const Pair& pair = l.pairs[p];
    const TableLayout& tl = l.tables[pair.table];
    if (SingleBlock(tl)) {
      // One walk per unit of the block (one for table-wise tables), rows written in order.
      const int64_t row_offset = tl.blocks[0].row_offset;
      for (int32_t s : tl.blocks[0].shards) {
        const int32_t u = l.unit_of[p][s];
        const int32_t d = l.units[u].rank;
        uint8_t* rows = rows_at[d] + 8 * cursor[u];
        uint8_t* wts = weights_at[d] + 4 * cursor[u];
        int64_t* targets = l.sequence ? rb->ret_target.data() + target_at[u] : nullptr;
        int64_t n = 0;
        const bool weighted = rb->weighted;
        SR_RETURN_IF_ERROR(ForEachIdOfShardedPair(
            l, bounds, batch, feature_begin, p,
            [&](int64_t, size_t i, int64_t x, float w) {
              const int64_t row = x - row_offset;
              std::memcpy(rows + 8 * n, &row, 8);
              if (weighted) std::memcpy(wts + 4 * n, &w, 4);
              if (targets != nullptr) targets[n] = static_cast<int64_t>(i);
              ++n;
            },
            [](int64_t) {}));
        cursor[u] += n;
        if (targets != nullptr) target_at[u] += static_cast<size_t>(n);
      }
      return Status::Ok();
    }
    if (!tl.data_parallel) {
      // Each id to every unit of its block, in id order (the order the generic walk writes).
      const PairBlocks pb(l, p);
      const bool weighted = rb->weighted;
      int64_t* targets = l.sequence ? rb->ret_target.data() : nullptr;
      (void)ForEachIdOfShardedPair(
          l, bounds, batch, feature_begin, p,
          [&](int64_t, size_t i, int64_t x, float w) {
            const int32_t k = pb.BlockOf(x);
            const int64_t row = pb.dynamic ? x : x - pb.first[k];
            for (int32_t j = pb.unit_begin[k]; j < pb.unit_begin[k + 1]; ++j) {
              const int32_t u = pb.units[j];
              const int32_t d = pb.ranks[j];
              const int64_t at = cursor[u]++;
              std::memcpy(rows_at[d] + 8 * at, &row, 8);
              if (weighted) std::memcpy(weights_at[d] + 4 * at, &w, 4);
              if (targets != nullptr) targets[target_at[u]++] = static_cast<int64_t>(i);
            }
          },
          [](int64_t) {});
      return Status::Ok();
    }
    return ForEachIdOfPair(l, bounds, batch, feature_begin, p,
                           [&](int64_t b, size_t i, int64_t x, float w) {
                             // Data-parallel: kept here in (pair, sample, id) order.
                             while (dp_filled[p] <= b) dp_off[p][dp_filled[p]++] = dp_cursor[p];
                             const size_t at = static_cast<size_t>(dp_cursor[p]++);
                             rb->dp_rows[at] = x;
                             if (rb->weighted) rb->dp_weights[at] = w;
                             if (l.sequence) rb->dp_pos[at] = static_cast<int64_t>(i);
                           });
  });
  SR_RETURN_IF_ERROR(filled);
  for (int32_t p : l.dp_pairs)
    while (dp_filled[p] <= B) dp_off[p][dp_filled[p]++] = dp_cursor[p];
  return Status::Ok();
}

}  // namespace

MessageLayout LayoutOf(size_t units, int64_t batch, int64_t ids, bool weighted) {
  MessageLayout m;
  m.rows = Align8(4 * units * static_cast<size_t>(batch));
  m.weights = m.rows + 8 * static_cast<size_t>(ids);
  m.bytes = m.weights + (weighted ? Align8(4 * static_cast<size_t>(ids)) : 0);
  return m;
}

Status RouteBatch(const ExecContext& ctx, const Layout& l, const RouteOptions& options,
                  const Batch& batch, RoutedBatch* rb, const OutputBuffer* output) {
  // The output buffer is judged by the batch's own sizes (which rb keeps), after its checks, so
  // the batch's errors come first, then its ids', then the buffer's.
  Status output_verdict;
  SR_RETURN_IF_ERROR(CheckBatch(l, batch, options.check_non_finite, output, &output_verdict));
  SR_RETURN_IF_ERROR(RouteCheckedBatch(ctx, l, options.bounds, batch, rb));
  return output_verdict;
}

Status RouteCheckedBatch(const ExecContext& ctx, const Layout& l, BoundsPolicy bounds,
                         const Batch& batch, RoutedBatch* rb) {
  const auto& plan = *l.plan;
  rb->batch_size = batch.batch_size;
  rb->num_values = static_cast<int64_t>(batch.num_values);
  rb->weighted = batch.weights != nullptr;
  SetUnitSlots(l, batch, rb);
  const int64_t B = batch.batch_size;
  const BagIndex bags = BagIndex::Plain(B);
  std::vector<size_t> feature_begin(plan.features.size() + 1, 0);
  for (size_t f = 0; f < plan.features.size(); ++f) {
    size_t n = 0;
    for (int64_t b = 0; b < B; ++b)
      n += static_cast<size_t>(batch.lengths[bags.bag(static_cast<int64_t>(f), b)]);
    feature_begin[f + 1] = feature_begin[f] + n;
  }
  std::vector<int64_t> dp_counts;
  SR_RETURN_IF_ERROR(CountPass(ctx, l, bounds, batch, feature_begin, rb, &dp_counts));
  SizeMessages(l, rb);
  return FillPass(ctx, l, bounds, batch, feature_begin, dp_counts, rb);
}

}  // namespace shardrec::embedding
