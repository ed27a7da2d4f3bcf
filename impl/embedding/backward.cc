// The backward stage: the gradient's packing on the sample side, the host engine's gradient
// exchange, and the updates of sharded and data-parallel tables on the shard owners.
#include "impl/embedding/backward.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/embedding/dp_accumulate.h"
#include "impl/embedding/dynamic/tables.h"
#include "impl/embedding/host_reduce.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/step_state.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

std::span<const kernels::BagRun> SelfGradRows::Apply(std::span<const kernels::BagRun> runs,
                                                     std::vector<kernels::BagRun>* out) const {
  out->clear();
  if (this->runs.empty()) return runs;
  for (size_t j = 0; j < runs.size(); ++j) {
    const auto it = std::lower_bound(this->runs.begin(), this->runs.end(), runs[j].io_offset,
                                     [](const Run& r, int64_t io) { return r.io < io; });
    if (it == this->runs.end() || it->io != runs[j].io_offset) continue;
    if (out->empty()) out->assign(runs.begin(), runs.end());
    (*out)[j].grads_at = it->at;
  }
  return out->empty() ? runs : std::span<const kernels::BagRun>(*out);
}

void SparseUpdater::Init(const Layout* layout, ParamStore* params,
                         const dynamic::DynamicTables* dynamic) {
  layout_ = layout;
  params_ = params;
  dynamic_ = dynamic;
  const size_t n = layout->local.size();
  uniq_rows_.assign(n, {});
  uniq_grads_.assign(n, {});
  partial_stats_.assign(n, {});
  dp_at_ = MakeDpBlockLayout(*layout);
}

optim::ShardParams SparseUpdater::ParamsOf(size_t local) const {
  optim::ShardParams p = params_->Params(static_cast<int32_t>(local));
  if (dynamic_ == nullptr || !layout_->tables[layout_->local[local].table].dynamic) return p;
  const dynamic::DynamicShard* d = dynamic_->Shard(static_cast<int32_t>(local));
  // A tiered shard's rows are cache slots, keyed by the tier (tiered/dynamic_tier.h).
  if (d != nullptr && p.row_ids == nullptr) {
    p.row_ids = d->id_base();
    p.row_ids_stride = dynamic::DynamicShard::id_stride();
    p.num_row_ids = d->size();
  }
  return p;
}

bool SparseUpdater::StatsStayInShard(size_t local) const {
  const LocalShard& ls = layout_->local[local];
  const TableLayout& tl = layout_->tables[ls.table];
  if (tl.num_row_stats == 0) return true;
  return tl.blocks[FindRowBlock(tl, ls.row_offset)].shards.size() == 1;
}

// On a device, a pooled shard takes the fused backward when its statistics stay in the shard;
// the device step keeps sequence collections on the two-phase path.
bool SparseUpdater::FusedEligible(size_t local) const {
  return !layout_->sequence && StatsStayInShard(local);
}

Status SparseUpdater::ApplySharded(const ExecContext& ctx, comm::Communicator& comm,
                                   const RoutedBatch& rb, const float* grads,
                                   const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                                   double* comm_seconds, const SelfGradRows* self) {
  const Layout& l = *layout_;
  shard_order_.clear();
  for (size_t i = 0; i < l.local.size(); ++i) {
    uniq_rows_[i].clear();
    uniq_grads_[i].clear();
    partial_stats_[i].clear();
    if (!l.tables[l.local[i].table].data_parallel && rb.shards[i].num_ids > 0)
      shard_order_.push_back(i);
  }
  const size_t threads = static_cast<size_t>(ctx.num_threads());
  auto work = [&](size_t i) { return rb.shards[i].num_ids * int64_t{l.local[i].cols}; };
  int64_t total = 0, largest = 0;
  for (size_t i : shard_order_) {
    total += work(i);
    largest = std::max(largest, work(i));
  }
  if (threads > 1 && shard_order_.size() >= 2 * threads &&
      largest * static_cast<int64_t>(threads) <= total) {
    // Enough shards to keep every thread busy, none larger than a thread's share: each shard's
    // grouping and update run on one thread, several shards at a time (the kernels give the same
    // bits on any thread count), instead of one shard at a time with its serial grouping between
    // parallel phases. Largest first, so the shards that start last are short.
    std::stable_sort(shard_order_.begin(), shard_order_.end(),
                     [&](size_t a, size_t b) { return work(a) > work(b); });
    shard_status_.assign(shard_order_.size(), Status::Ok());
    if (workspaces_.size() < threads) workspaces_.resize(threads);
    free_workspaces_.clear();
    for (size_t w = 0; w < threads; ++w) free_workspaces_.push_back(w);
    ctx.ParallelFor(0, static_cast<int64_t>(shard_order_.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        size_t w;
        {
          std::lock_guard<std::mutex> lock(workspace_mu_);
          w = free_workspaces_.back();
          free_workspaces_.pop_back();
        }
        shard_status_[k] = BackwardShard(ExecContext::Host(nullptr), shard_order_[k], rb, grads,
                                         self, configs, step, &workspaces_[w]);
        std::lock_guard<std::mutex> lock(workspace_mu_);
        free_workspaces_.push_back(w);
      }
    });
    for (const Status& st : shard_status_) SR_RETURN_IF_ERROR(st);
  } else {
    if (workspaces_.empty()) workspaces_.resize(1);
    for (size_t i : shard_order_)
      SR_RETURN_IF_ERROR(BackwardShard(ctx, i, rb, grads, self, configs, step, &workspaces_[0]));
  }
  SR_RETURN_IF_ERROR(ExchangeRowStats(comm, comm_seconds));
  for (size_t i = 0; i < l.local.size(); ++i)
    SR_RETURN_IF_ERROR(Update(ctx, configs[l.local[i].table], step, i));
  return Status::Ok();
}

Status SparseUpdater::BackwardShard(const ExecContext& ctx, size_t i, const RoutedBatch& rb,
                                    const float* grads, const SelfGradRows* self,
                                    const std::vector<optim::OptimizerConfig>& configs,
                                    int64_t step, std::vector<uint8_t>* workspace) {
  const Layout& l = *layout_;
  // TorchRec's gradient division: the sum over the global batch divided by the group size.
  const float scale = 1.0f / static_cast<float>(l.world);
  const LocalShard& ls = l.local[i];
  const optim::OptimizerConfig& config = configs[ls.table];
  const int K = l.tables[ls.table].num_row_stats;
  // The own runs whose rows were left where they lie read them there (PackGradients' in_place).
  thread_local std::vector<kernels::BagRun> placed;
  const std::span<const kernels::BagRun> runs =
      self != nullptr ? self->Apply(rb.shards[i].runs, &placed)
                      : std::span<const kernels::BagRun>(rb.shards[i].runs);
  const size_t need = kernels::BackwardWorkspaceBytes(ctx, rb.shards[i].num_ids, ls.cols, K);
  if (workspace->size() < need) workspace->resize(need);
  int64_t num_unique = 0;
  SR_RETURN_IF_ERROR(
      kernels::GroupRows(ctx, runs, workspace->data(), workspace->size(), &num_unique));
  optim::ShardParams params = ParamsOf(i);
  if (StatsStayInShard(i)) {
    // Each row summed and updated at once (pooled and sequence runs alike); bit-identical to
    // aggregate + PartialRowStats + Apply. No rows are left for the steps below.
    return kernels::FusedBackward(ctx, runs, grads, ls.cols, scale, config, step,
                                  l.plan->tables[ls.table].dim, params, workspace->data());
  }
  // A column shard whose row statistics its siblings need: aggregated with its partial
  // statistics now, updated once they are summed (Update).
  uniq_rows_[i].resize(static_cast<size_t>(num_unique));
  uniq_grads_[i].resize(static_cast<size_t>(num_unique) * ls.cols);
  partial_stats_[i].resize(uniq_rows_[i].size() * K);
  return kernels::AggregateWithRowStats(ctx, runs, grads, ls.cols, scale, config, step, params,
                                        workspace->data(), uniq_rows_[i].data(),
                                        uniq_grads_[i].data(), partial_stats_[i].data());
}

// Row statistics (row-wise Adagrad, partial row-wise Adam, LAMB) are computed per column shard
// and sent to every sibling column shard of the same rows; all ranks take part.
Status SparseUpdater::ExchangeRowStats(comm::Communicator& comm, double* comm_seconds) {
  if (layout_->stat_messages.empty()) {
    stat_recv_at_.clear();
    return Status::Ok();
  }
  std::vector<size_t> send_counts, recv_counts, send_shards;
  PlanRowStats(&send_counts, &recv_counts, &send_shards);
  stat_send_.clear();
  for (size_t i : send_shards)
    stat_send_.insert(stat_send_.end(), partial_stats_[i].begin(), partial_stats_[i].end());
  ScopedTimer t(comm_seconds);
  return comm.AllToAllV(stat_send_.data(), send_counts, stat_recv_.data(), recv_counts,
                        DType::kFloat32);
}

void SparseUpdater::PlanRowStats(std::vector<size_t>* send_counts, std::vector<size_t>* recv_counts,
                                 std::vector<size_t>* send_shards) {
  const Layout& l = *layout_;
  stat_recv_at_.assign(l.stat_messages.size(), 0);
  const int32_t me = l.rank;
  send_counts->assign(l.world, 0);
  recv_counts->assign(l.world, 0);
  send_shards->clear();
  for (const StatMessage& m : l.stat_messages) {
    const auto& tl = l.tables[m.table];
    if (m.from_rank == me)
      (*send_counts)[m.to_rank] += partial_stats_[tl.shard_local[m.from_shard]].size();
    if (m.to_rank == me)
      (*recv_counts)[m.from_rank] += partial_stats_[tl.shard_local[m.to_shard]].size();
  }
  for (int32_t d = 0; d < l.world; ++d) {
    for (const StatMessage& m : l.stat_messages) {
      if (m.from_rank != me || m.to_rank != d) continue;
      send_shards->push_back(static_cast<size_t>(l.tables[m.table].shard_local[m.from_shard]));
    }
  }
  size_t off = 0;
  for (int32_t s = 0; s < l.world; ++s) {
    for (size_t j = 0; j < l.stat_messages.size(); ++j) {
      const StatMessage& m = l.stat_messages[j];
      if (m.from_rank != s || m.to_rank != me) continue;
      stat_recv_at_[j] = off;
      off += partial_stats_[l.tables[m.table].shard_local[m.to_shard]].size();
    }
  }
  stat_recv_.resize(off);
}

// Applies the optimizer to the aggregated rows of one (non-fused) local shard, with the row
// statistics summed over the whole row in column order.
Status SparseUpdater::Update(const ExecContext& ctx, const optim::OptimizerConfig& config,
                             int64_t step, size_t i) {
  const Layout& l = *layout_;
  const LocalShard& ls = l.local[i];
  const TableLayout& tl = l.tables[ls.table];
  const int K = tl.num_row_stats;
  if (tl.data_parallel || uniq_rows_[i].empty()) return Status::Ok();
  const float* full = nullptr;
  if (K > 0) SR_RETURN_IF_ERROR(FullRowStats(i, &full));
  optim::ShardParams params = ParamsOf(i);
  return kernels::ApplyRows(ctx, config, step, l.plan->tables[ls.table].dim, params, uniq_rows_[i],
                            uniq_grads_[i].data(), full);
}

Status SparseUpdater::FullRowStats(size_t i, const float** full) {
  const Layout& l = *layout_;
  const LocalShard& ls = l.local[i];
  const TableLayout& tl = l.tables[ls.table];
  *full = nullptr;
  if (partial_stats_[i].empty()) return Status::Ok();
  const RowBlock& block = tl.blocks[FindRowBlock(tl, ls.row_offset)];
  if (block.shards.size() == 1) {
    *full = partial_stats_[i].data();
    return Status::Ok();
  }
  const size_t n = partial_stats_[i].size();
  full_stats_.assign(n, 0.0f);
  for (int32_t sib : block.shards) {
    const float* src = nullptr;
    if (sib == ls.shard) {
      src = partial_stats_[i].data();
    } else {
      for (size_t j = 0; j < l.stat_messages.size(); ++j) {
        const StatMessage& m = l.stat_messages[j];
        if (m.table == ls.table && m.from_shard == sib && m.to_shard == ls.shard) {
          src = stat_recv_.data() + stat_recv_at_[j];
          break;
        }
      }
    }
    if (src == nullptr) return Status::Internal("missing row statistics of a column shard");
    for (size_t k = 0; k < n; ++k) full_stats_[k] += src[k];
  }
  *full = full_stats_.data();
  return Status::Ok();
}

Status SparseUpdater::ApplyDataParallel(const ExecContext& ctx, comm::Communicator& dp_comm,
                                        comm::Encoding encoding, const RoutedBatch& rb,
                                        const float* grad,
                                        const std::vector<optim::OptimizerConfig>& configs,
                                        int64_t step, double* comm_seconds, RowApplier* device,
                                        const PairRows* places) {
  const Layout& l = *layout_;
  if (l.dp_tables.empty()) return Status::Ok();
  const auto& plan = *l.plan;
  dp_grad_.assign(l.dp_grad_size, 0.0f);
  AccumulateDataParallel(l, dp_at_, rb, grad, dp_grad_.data(), places);
  {
    ScopedTimer t(comm_seconds);
    // The touched flags travel with the gradients; only whether a flag's sum is non-zero matters,
    // and a sum of ones stays non-zero in any encoding, unless an FP8 block (one scale for 32
    // values, comm/encoded_fp8.h) holds both a flag and a gradient 2^10 times larger, which
    // flushes the flag to zero: under FP8 the flags (after every gradient, dp_accumulate.h) go
    // in a call of their own.
    const size_t flags_at = IsFp8Format(encoding) ? dp_at_.touch_at[l.dp_tables.front()] : 0;
    if (flags_at > 0)
      SR_RETURN_IF_ERROR(
          comm::EncodedAllReduceSum(dp_comm, encoding, dp_grad_.data(), flags_at, &dp_wire_));
    SR_RETURN_IF_ERROR(comm::EncodedAllReduceSum(dp_comm, encoding, dp_grad_.data() + flags_at,
                                                 dp_grad_.size() - flags_at, &dp_wire_));
  }
  const float scale = 1.0f / static_cast<float>(dp_comm.Size());
  for (int32_t t : l.dp_tables) {
    const int32_t dim = plan.tables[t].dim;
    const optim::OptimizerConfig& config = configs[t];
    const int32_t local = l.tables[t].shard_local[l.rank];
    const float* tg = dp_grad_.data() + dp_at_.grad_at[t];
    const float* touched = dp_grad_.data() + dp_at_.touch_at[t];
    std::vector<int64_t>& rows = uniq_rows_[local];
    std::vector<float>& grads = uniq_grads_[local];
    rows.clear();
    grads.clear();
    for (int64_t r = 0; r < plan.tables[t].rows; ++r) {
      if (touched[r] == 0.0f) continue;
      rows.push_back(r);
      for (int32_t c = 0; c < dim; ++c) grads.push_back(tg[r * dim + c] * scale);
    }
    if (rows.empty()) continue;
    if (device != nullptr) {
      SR_RETURN_IF_ERROR(device->ApplyRows(local, config, step, rows, grads.data()));
      continue;
    }
    // Whole rows (every rank holds the full table): the statistics come from the row itself.
    optim::ShardParams params = ParamsOf(static_cast<size_t>(local));
    SR_RETURN_IF_ERROR(
        kernels::ApplyRows(ctx, config, step, dim, params, rows, grads.data(), nullptr));
  }
  // The device updates were only queued: one wait for all of them.
  return device != nullptr ? device->FinishRows() : Status::Ok();
}

namespace {

// One unit's returned rows in the packing: where its rows start in ret_target, where their
// gradients are read and where they go.
struct PackSegment {
  int64_t k_begin;
  int64_t count;
  int32_t unit;
  const float* base;  // the unit's first column of gradient row 0
  int64_t stride;     // floats from one gradient row to the next
  float* dst;         // fp32 rows, or
  uint16_t* dst16;    // encoded rows (another rank's, over an encoded exchange)
};

// Rows [r0, r1) of `seg`. Plain fp32 rows (the common case) are one strided gather, no call per
// row; a MEAN pair's rows are divided, and an encoded row is divided into a row of the thread's,
// then encoded from there.
void PackRows(const Layout& l, const RoutedBatch& rb, const PackSegment& seg, const WireRows& wire,
              int64_t r0, int64_t r1) {
  const Unit& unit = l.units[seg.unit];
  const Pair& pair = l.pairs[unit.pair];
  const int32_t cols = unit.cols;
  const int64_t* targets = rb.ret_target.data() + seg.k_begin;
  if (!pair.mean && seg.dst != nullptr) {
    float* dst = seg.dst + r0 * cols;
    for (int64_t r = r0; r < r1; ++r, dst += cols) {
      const float* g = seg.base + targets[r] * seg.stride;
      for (int32_t c = 0; c < cols; ++c) dst[c] = g[c];
    }
    return;
  }
  const BagIndex bags = BagIndex::Plain(rb.batch_size);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t target = targets[r];
    const float* g = seg.base + target * seg.stride;
    const int64_t at = r * cols;
    thread_local std::vector<float> row;
    float* dst = seg.dst != nullptr ? seg.dst + at : nullptr;
    if (dst == nullptr && pair.mean) {
      if (row.size() < static_cast<size_t>(cols)) row.resize(cols);
      dst = row.data();
    }
    if (pair.mean) {
      const float div = rb.mean_div[bags.bag(unit.pair, target)];
      for (int32_t c = 0; c < cols; ++c) dst[c] = div != 0.0f ? g[c] / div : 0.0f;
    } else if (dst != nullptr) {
      std::memcpy(dst, g, sizeof(float) * cols);
    }
    if (seg.dst16 != nullptr)
      wire.encode(pair.mean ? dst : g, static_cast<size_t>(cols), seg.dst16 + at);
  }
}

}  // namespace

void PackGradients(const ExecContext& ctx, const Layout& l, const RoutedBatch& rb,
                   const float* grad, float* send, float* self, const WireRows& wire,
                   const PairRows* places, SelfGradRows* in_place) {
  // Every unit's returned rows are one segment; each row has its own place.
  std::vector<PackSegment> segs;
  if (in_place != nullptr) in_place->runs.clear();
  int64_t others = 0;  // element offset of the next other rank's rows in send / the wire
  int64_t k = 0;
  int64_t longest = 0;
  for (int32_t d = 0; d < l.world; ++d) {
    const bool mine = d == l.rank;
    int64_t at = mine ? 0 : others;
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;
      const Unit& unit = l.units[u];
      PackSegment seg{
          k,       count,  u, grad + l.pairs[unit.pair].out_offset + unit.col_offset, l.output_dim,
          nullptr, nullptr};
      if (places != nullptr) {
        const PairRows::Place& pl = places->pairs[static_cast<size_t>(unit.pair)];
        seg.base = (pl.aux ? places->aux : grad) + pl.offset + unit.col_offset;
        seg.stride = pl.stride;
      }
      if (mine && in_place != nullptr && !l.pairs[unit.pair].mean &&
          static_cast<size_t>(u) < rb.unit_ids.size() && rb.unit_ids[u] <= count) {
        // Rows of one id each (an item's bags, sequence ids): a copy would move the same bits,
        // read once, so the shards read them where they lie (a MEAN divisor changes them on the
        // way). Rows that several ids read stay copied: the kernels read each several times in
        // random order, from the compact copy (a feature's 12800 rows of 128 B fit in L2) rather
        // than spread over the whole output (12-15 % slower steps of the repeated batch,
        // RESULTS.md, branch vbe8).
        in_place->runs.push_back({static_cast<int64_t>(rb.ret_self_offset) + at,
                                  {seg.base, rb.ret_target.data() + k, seg.stride}});
        k += count;
        at += count * unit.cols;
        continue;
      }
      if (mine)
        seg.dst = self + at;
      else if (wire.data != nullptr)
        seg.dst16 = wire.data + at;
      else
        seg.dst = send + at;
      segs.push_back(seg);
      longest = std::max(longest, count);
      k += count;
      at += count * unit.cols;
    }
    if (!mine) others = at;
  }
  // The segments are walked in tiles of kTile of their rows, every segment's tile before the next
  // tile, so that the gradient rows a tile reads (the same sample rows for every unit of a
  // feature whose bags are all returned) are loaded once for all the segments, in memory order,
  // instead of once per segment in strides of a whole output row (1.1-1.7 CPU ms of a 30 ms VBE
  // step at world 1, RESULTS.md). Each element is computed as it would be alone: the bits do not
  // depend on the tiling or the thread count.
  constexpr int64_t kTile = 32;
  const int64_t tiles = (longest + kTile - 1) / kTile;
  ctx.ParallelFor(0, tiles, std::max<int64_t>(1, 1024 / kTile), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (const PackSegment& seg : segs) {
        const int64_t r0 = t * kTile;
        if (r0 < seg.count) PackRows(l, rb, seg, wire, r0, std::min(seg.count, r0 + kTile));
      }
  });
}

Status ApplyDataParallelTables(StepState& s, const RoutedBatch& rb, const float* grad, int64_t step,
                               RowApplier* rows) {
  // The data-parallel all-reduce is this step's only collective: its comm time is all embedding
  // communication.
  const double before = s.timings.comm_seconds;
  SR_RETURN_IF_ERROR(s.updater.ApplyDataParallel(s.exec, *s.dp_comm, s.options.backward_encoding,
                                                 rb, grad, s.table_optim, step,
                                                 &s.timings.comm_seconds, rows, s.pair_rows));
  s.timings.embedding_comm_seconds += s.timings.comm_seconds - before;
  ++s.timings.backwards;
  return Status::Ok();
}

Status ExchangeAndApplyGradients(StepState& s, const RoutedBatch& rb, const float* grad,
                                 int64_t step, HostReduce* reduce) {
  // The gradient travels the forward's return route backwards: the sample side packs into the
  // buffer it received into, the owners receive into the buffer they looked up into; the rows of
  // this rank's own samples are read where they lie in `grad` (s.self_grads), or, divided by a
  // MEAN divisor, written to where its shards read them (SelfRows). A copy of the own rows cost
  // the VBE step at world 1 up to 3.4 ms (RESULTS.md, vbe5).
  const comm::Encoding benc = s.options.backward_encoding;
  if (WireInKernels(s.layout, benc)) {
    // The other ranks' gradient rows are encoded as they are packed, sent 16-bit, and decoded
    // once into the blocks the kernels read; this rank's own rows stay fp32 (SelfRows).
    size_t send_total = 0;
    for (size_t v : ReturnRecvCounts(rb)) send_total += v;
    if (s.wire.send.size() < send_total) s.wire.send.resize(send_total);
    if (s.wire.recv.size() < rb.ret_self_offset) s.wire.recv.resize(rb.ret_self_offset);
    PackGradients(s.exec, s.layout, rb, grad, s.ret_recv.data(), s.SelfRows(rb),
                  WireRows{s.wire.send.data(), comm::EncoderFor(benc), nullptr}, s.pair_rows,
                  &s.self_grads);
    {
      ScopedTimer t(&s.timings.comm_seconds);
      ScopedTimer e(&s.timings.embedding_comm_seconds);
      SR_RETURN_IF_ERROR(s.comm->AllToAllV(s.wire.send.data(), ReturnRecvCounts(rb),
                                           s.wire.recv.data(), ReturnSendCounts(rb),
                                           comm::WireType(benc)));
    }
    // One decoding pass, not a widening per id in the kernels: each gradient row is read once per
    // id of its bag (~20 times), and widening it each time cost the compute threads ~1.5 ms per
    // step at world 2 where this pass costs ~0.1 ms (RESULTS.md, 2026-11-24 evening).
    const uint16_t* arrived = s.wire.recv.data();
    float* decoded = s.ret_send.data();
    s.exec.ParallelFor(
        0, static_cast<int64_t>(rb.ret_self_offset), int64_t{1} << 16, [&](int64_t b, int64_t e) {
          comm::DecodeFloats(benc, arrived + b, static_cast<size_t>(e - b), decoded + b);
        });
    SR_RETURN_IF_ERROR(s.updater.ApplySharded(s.exec, *s.comm, rb, s.ret_send.data(), s.table_optim,
                                              step, &s.timings.comm_seconds, &s.self_grads));
    return ApplyDataParallelTables(s, rb, grad, step, nullptr);
  }
  PackGradients(s.exec, s.layout, rb, grad, s.ret_recv.data(), s.SelfRows(rb), {}, s.pair_rows,
                &s.self_grads);
  {
    ScopedTimer t(&s.timings.comm_seconds);
    ScopedTimer e(&s.timings.embedding_comm_seconds);
    // The reduced gradient exchange reverses the forward's reduced return exchange, which only
    // an exact forward takes (output_dist.cc): after an encoded forward the rows came back flat.
    if (benc == comm::Encoding::kFp32 && s.options.forward_encoding == comm::Encoding::kFp32 &&
        reduce != nullptr && reduce->active()) {
      SR_RETURN_IF_ERROR(reduce->Backward(*s.comm, rb, s.ret_recv.data(), s.ret_send.data()));
    } else {
      SR_RETURN_IF_ERROR(comm::EncodedAllToAllV(*s.comm, benc, s.ret_recv.data(),
                                                ReturnRecvCounts(rb), s.ret_send.data(),
                                                ReturnSendCounts(rb), &s.wire));
    }
  }
  SR_RETURN_IF_ERROR(s.updater.ApplySharded(s.exec, *s.comm, rb, s.ret_send.data(), s.table_optim,
                                            step, &s.timings.comm_seconds, &s.self_grads));
  return ApplyDataParallelTables(s, rb, grad, step, nullptr);
}

}  // namespace shardrec::embedding
