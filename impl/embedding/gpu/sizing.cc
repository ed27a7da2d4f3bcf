// Worst-case per-step buffer sizes of a GPU collection (sizing.h). The message bounds
// follow input_dist.cc's layout: per source, int32 lengths for every (unit, sample), then int64
// rows and float weights per id, each section 8-byte aligned.
#include "impl/embedding/gpu/sizing.h"

#include <algorithm>

#include "impl/embedding/kernels/simt/route_body.h"

namespace shardrec::embedding {

namespace {

// Checked size arithmetic: the first overflow sticks.
struct Sizer {
  bool overflow = false;
  size_t Mul(size_t a, size_t b) {
    size_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) overflow = true;
    return r;
  }
  size_t Add(size_t a, size_t b) {
    size_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) overflow = true;
    return r;
  }
  size_t Align16(size_t n) { return Add(n, 15) & ~size_t{15}; }
};

}  // namespace

Status ComputeStepSizes(const Layout& l, const StepCapacity& capacity,
                        const std::vector<bool>& fused, bool device_input, StepSizes* out) {
  *out = StepSizes();
  Sizer z;
  const auto W = static_cast<size_t>(l.world);
  const auto B = static_cast<size_t>(capacity.max_batch_size);
  const auto N = static_cast<size_t>(capacity.max_ids_per_batch);
  const size_t F = l.feature_pairs.size();
  // Units this rank looks up: per feature, how many and how wide (an id of the feature may go to
  // each of them).
  std::vector<size_t> units_of(F, 0), cols_of(F, 0), dp_pairs_of(F, 0);
  size_t units = 0, unit_cols = 0;
  for (const Unit& u : l.units) {
    if (u.rank != l.rank) continue;
    const auto f = static_cast<size_t>(l.pairs[u.pair].feature);
    ++units_of[f];
    cols_of[f] += static_cast<size_t>(u.cols);
    ++units;
    unit_cols += static_cast<size_t>(u.cols);
  }
  for (int32_t p : l.dp_pairs) ++dp_pairs_of[static_cast<size_t>(l.pairs[p].feature)];
  const size_t fan = F == 0 ? 0 : *std::max_element(units_of.begin(), units_of.end());
  const size_t fan_cols = F == 0 ? 0 : *std::max_element(cols_of.begin(), cols_of.end());
  const size_t dp_fan = F == 0 ? 0 : *std::max_element(dp_pairs_of.begin(), dp_pairs_of.end());
  const size_t D = static_cast<size_t>(l.output_dim);

  // The batch's runs: W messages (the others' and this rank's own), the CSR bag offsets.
  const size_t ids_per_source = z.Mul(N, fan);
  const size_t message = z.Add(z.Add(z.Mul(4, z.Mul(units, B)), z.Mul(12, ids_per_source)), 16);
  const size_t offsets = z.Mul(8, z.Mul(W, z.Mul(units, B + 1)));
  const size_t runs = z.Add(z.Add(z.Mul(W, message), offsets), 3 * 16);
  out->io_bytes =
      z.Mul(4, l.sequence ? z.Mul(W, z.Mul(N, fan_cols)) : z.Mul(W, z.Mul(B, unit_cols)));
  // A pooled forward combined on the device (DeviceStep::LookupCombine): the other ranks' rows
  // land behind the return message (each unit of any rank returns at most B rows), the bags of
  // the combine (per column group B + 1 offsets, an id per returned row; at most a group per
  // unit) and the data-parallel ids ride with the runs, and the output has its own block.
  // A sequence output has a row per id (at most N), each returned row filling one of them.
  size_t combine_bags = 0;
  {
    size_t all_cols = 0;
    for (const Unit& u : l.units) all_cols += static_cast<size_t>(u.cols);
    const size_t rows = l.sequence ? N : B;
    if (W > 1)
      out->io_bytes = z.Add(out->io_bytes, z.Mul(4, l.sequence ? z.Mul(N, D) : z.Mul(B, all_cols)));
    const size_t groups = l.units.size();
    combine_bags = z.Add(z.Mul(8, z.Mul(groups, rows + 1)), z.Mul(8, z.Mul(groups, rows)));
    // A device output's MEAN divisors ride along too.
    if (!l.sequence) combine_bags = z.Add(combine_bags, z.Mul(4, z.Mul(l.pairs.size(), B)));
    out->out_bytes = z.Mul(4, z.Mul(rows, D));
  }
  out->runs_bytes = z.Add(runs, z.Align16(out->io_bytes));
  // Ids one shard receives: each id of a feature reaches a shard at most once.
  const size_t shard_ids = z.Mul(W, N);
  out->shard_ids = static_cast<int64_t>(std::min<size_t>(shard_ids, INT64_MAX));
  const size_t n = l.local.size();
  out->rows_bytes.assign(n, 0);
  out->grads_bytes.assign(n, 0);
  out->stats_bytes.assign(n, 0);
  size_t rows_phase = 0;
  for (size_t i = 0; i < n; ++i) {
    const LocalShard& ls = l.local[i];
    const TableLayout& tl = l.tables[ls.table];
    const auto K = static_cast<size_t>(tl.num_row_stats);
    const auto cols = static_cast<size_t>(ls.cols);
    const size_t unique = std::min(shard_ids, static_cast<size_t>(ls.rows));
    if (tl.data_parallel) {
      // The touched rows of the all-reduced gradient and their gradients, packed.
      out->rows_bytes[i] =
          z.Add(z.Align16(z.Mul(8, unique)), z.Align16(z.Mul(4, z.Mul(unique, cols))));
      out->stats_bytes[i] = z.Mul(4, z.Mul(unique, K));
      rows_phase = z.Add(rows_phase, out->rows_bytes[i]);
      continue;
    }
    if (fused[i]) continue;
    // Aggregation buffers are sized for every id, as the device kernel's contract asks.
    out->rows_bytes[i] = z.Mul(8, shard_ids);
    out->grads_bytes[i] = z.Mul(4, z.Mul(shard_ids, cols));
    out->stats_bytes[i] = z.Mul(4, z.Mul(unique, K));
    out->full_stats_bytes = z.Add(out->full_stats_bytes, out->stats_bytes[i]);
  }
  // Data-parallel lookups: per pair B + 1 offsets, and the rows and weights of its ids.
  const size_t dp_ids = z.Mul(N, dp_fan);
  out->dp_ids_bytes =
      l.dp_pairs.empty()
          ? 0
          : z.Add(z.Add(z.Mul(8, z.Mul(l.dp_pairs.size(), B + 1)), z.Mul(12, dp_ids)), 3 * 16);
  out->dp_out_bytes = l.dp_pairs.empty() ? 0 : z.Mul(4, z.Mul(D, l.sequence ? dp_ids : B));
  out->dp_ids = static_cast<int64_t>(std::min<size_t>(dp_ids, INT64_MAX));
  if (!l.dp_pairs.empty()) {
    // A backward's data-parallel upload (dp.h): pair records (32 bytes) and first
    // positions, the offsets, rows, weights and positions of the ids, every pair's MEAN
    // divisors, and a host output gradient; each piece 16-byte aligned.
    const size_t pairs = l.dp_pairs.size();
    const size_t grad_rows = l.sequence ? N : B;
    out->dp_upload_bytes =
        z.Add(z.Add(z.Add(z.Mul(32, pairs), z.Mul(8, pairs + 1)), z.Mul(8, z.Mul(pairs, B + 1))),
              z.Add(z.Add(z.Mul(20, dp_ids), z.Mul(4, z.Mul(l.pairs.size(), B))),
                    z.Add(z.Mul(4, z.Mul(grad_rows, D)), 8 * 16)));
  }
  // The pinned block: the largest phase (statistics phases move full_stats_bytes each way, one
  // 16-byte aligned block per shard).
  const size_t stats_phase = z.Add(out->full_stats_bytes, z.Mul(16, n));
  // The runs' block also carries the combine's bags, the data-parallel ids and the MEAN
  // divisors (6 more pieces).
  out->runs_bytes = z.Add(out->runs_bytes, z.Add(z.Add(combine_bags, out->dp_ids_bytes), 6 * 16));
  size_t staging = z.Add(runs, z.Align16(out->io_bytes));  // forward owner / backward phase 1
  // The combined forward: its runs, bags and data-parallel ids up, the output down.
  staging = std::max(staging, z.Add(z.Add(z.Add(runs, combine_bags), out->dp_ids_bytes),
                                    z.Add(6 * 16, z.Align16(out->out_bytes))));
  staging = std::max(staging, z.Add(out->dp_ids_bytes, z.Align16(out->dp_out_bytes)));
  staging = std::max(staging, stats_phase);
  staging = std::max(staging, rows_phase);
  {
    // The pack's tables: the rows that come back to this rank (pooled: a row per unit and sample;
    // sequence: per id, one per unit its row block spreads it over), MEAN divisors, a job per
    // unit and its first row.
    size_t reach = 0;  // most units one id of a feature reaches (every pair of the feature)
    std::vector<size_t> reach_of(F, 0);
    for (size_t p = 0; p < l.pairs.size(); ++p) {
      const TableLayout& tl = l.tables[l.pairs[p].table];
      size_t most = 0;
      for (const RowBlock& block : tl.blocks) most = std::max(most, block.shards.size());
      reach_of[static_cast<size_t>(l.pairs[p].feature)] += most;
    }
    for (size_t r : reach_of) reach = std::max(reach, r);
    const size_t targets = l.sequence ? z.Mul(N, reach) : z.Mul(B, l.units.size());
    out->pack_bytes = z.Add(z.Add(z.Mul(8, targets), z.Mul(4, z.Mul(l.pairs.size(), B))),
                            z.Add(z.Mul(48 + 8, l.units.size()), 8 + 4 * 16));
    staging = std::max(staging, z.Add(z.Add(runs, out->dp_upload_bytes),
                                      z.Add(z.Align16(out->io_bytes), out->pack_bytes)));
  }
  for (const StatMessage& m : l.stat_messages) {
    const TableLayout& tl = l.tables[m.table];
    if (m.from_rank == l.rank)
      out->stat_send_bytes =
          z.Add(out->stat_send_bytes, out->stats_bytes[tl.shard_local[m.from_shard]]);
    if (m.to_rank == l.rank)
      out->stat_recv_bytes =
          z.Add(out->stat_recv_bytes, out->stats_bytes[tl.shard_local[m.to_shard]]);
  }
  // The route summaries' all-gather (its header and body up, every rank's down).
  out->summary_bytes = 4 * sizeof(int64_t) + sizeof(kernels::simt_body::RouteStatus) +
                       8 * (2 * l.units.size() + l.dp_pairs.size() + 2);
  staging = std::max(staging, z.Add(z.Mul(W + 1, out->summary_bytes), 64));
  if (device_input) {
    // A batch slot: the messages this rank routes (to each rank at most the bound of a message to
    // it), those it receives, the CSR offsets. The unpack walks one length per (source, unit,
    // sample); its tables (run and cell tables) ride in the runs' block, the routed messages
    // and its status word in the pinned block of the lookup phase.
    size_t send = 0;
    for (int32_t d = 0; d < l.world; ++d) {
      std::vector<size_t> fan_d(F, 0);
      for (int32_t u : l.units_to_rank[d])
        ++fan_d[static_cast<size_t>(l.pairs[l.units[u].pair].feature)];
      const size_t fd = F == 0 ? 0 : *std::max_element(fan_d.begin(), fan_d.end());
      const size_t msg =
          z.Add(z.Add(z.Mul(4, z.Mul(l.units_to_rank[d].size(), B)), z.Mul(12, z.Mul(N, fd))), 16);
      send = z.Add(send, msg);
    }
    const size_t recv = z.Mul(W, message);
    out->slot_bytes = z.Add(z.Add(z.Align16(send), z.Align16(recv)), offsets);
    out->unpack_cells = l.sequence ? 0 : z.Mul(W, z.Mul(units, B));
    out->unpack_scan_bytes = out->unpack_cells == 0 ? 0 : z.Mul(24, out->unpack_cells + 1);
    const size_t tables = z.Add(z.Mul(32, z.Mul(W, units)), z.Mul(8, z.Add(z.Mul(W, units), 1)));
    out->runs_bytes = z.Add(out->runs_bytes, z.Add(tables, 2 * 16));
    staging = std::max(staging, z.Add(z.Add(z.Add(z.Align16(send), tables),
                                            z.Add(combine_bags, out->dp_ids_bytes)),
                                      z.Add(8 * 16, z.Align16(out->out_bytes))));
  }
  out->staging_bytes = staging;
  if (z.overflow)
    return Status::InvalidArgument("the capacity hints (max_batch_size ", capacity.max_batch_size,
                                   ", max_ids_per_batch ", capacity.max_ids_per_batch,
                                   ") give buffer sizes that overflow");
  return Status::Ok();
}

}  // namespace shardrec::embedding
