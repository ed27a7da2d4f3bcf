// The return exchange reduced inside the owners' host (host_reduce.h). Every loop that lays out a
// message walks (group, sample rank, unit) in the same order on the sending and the receiving
// side, so both compute the same counts and offsets without exchanging them.
#include "impl/embedding/host_reduce.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

namespace shardrec::embedding {

Status HostReduce::Init(const Layout& l, comm::Communicator& comm) {
  layout_ = &l;
  host_comm_.reset();
  groups_.clear();
  union_batch_ = nullptr;
  group_of_.assign(l.units.size(), -1);
  my_unit_index_.assign(l.units.size(), -1);
  const auto& mine = l.units_to_rank[l.rank];
  for (size_t i = 0; i < mine.size(); ++i) my_unit_index_[mine[i]] = static_cast<int32_t>(i);
  const int32_t R = l.plan->local_world_size;
  if (l.sequence || R < 1 || R >= l.world || l.world % R != 0) return Status::Ok();
  rpn_ = R;
  for (size_t p = 0; p < l.pairs.size(); ++p) {
    std::vector<int32_t> us;
    for (int32_t u : l.unit_of[p])
      if (u >= 0 && !l.tables[l.units[u].table].data_parallel) us.push_back(u);
    // Units of a pair either cover the same columns or none in common; anything else (never
    // planned today) keeps the flat exchange.
    bool aligned = true;
    for (int32_t a : us) {
      for (int32_t b : us) {
        const Unit& x = l.units[a];
        const Unit& y = l.units[b];
        const bool overlap =
            x.col_offset < y.col_offset + y.cols && y.col_offset < x.col_offset + x.cols;
        if (overlap && (x.col_offset != y.col_offset || x.cols != y.cols)) aligned = false;
      }
    }
    if (!aligned) continue;
    std::map<int32_t, std::vector<int32_t>> by_cols;
    for (int32_t u : us) by_cols[l.units[u].col_offset].push_back(u);
    for (auto& [col, members] : by_cols) {
      if (members.size() < 2) continue;
      Group g;
      g.host = HostOf(l.units[members[0]].rank);
      g.cols = l.units[members[0]].cols;
      bool one_host = true;
      for (int32_t u : members) one_host = one_host && HostOf(l.units[u].rank) == g.host;
      if (!one_host) continue;
      // Combine order (output_dist.cc): by owner rank, then unit index.
      std::sort(members.begin(), members.end(), [&](int32_t a, int32_t b) {
        return std::pair(l.units[a].rank, a) < std::pair(l.units[b].rank, b);
      });
      for (int32_t u : members) g.ranks.push_back(l.units[u].rank);
      g.ranks.erase(std::unique(g.ranks.begin(), g.ranks.end()), g.ranks.end());
      g.units = std::move(members);
      groups_.push_back(std::move(g));
    }
  }
  // The plan's choice (the planner's, from the topology's measured bandwidths and latency:
  // planner.cc ChooseHostReduce), unless SHARDREC_HOST_REDUCE=0 or 1 overrides it; agreed (any
  // rank's "off" turns it off everywhere), so that ranks started with different environments or
  // plans that differ only there still run the same exchanges.
  const char* env = std::getenv("SHARDREC_HOST_REDUCE");
  int32_t off = l.plan->host_reduce == 0 ? 1 : 0;
  if (env != nullptr && std::strcmp(env, "0") == 0) off = 1;
  if (env != nullptr && std::strcmp(env, "1") == 0) off = 0;
  if (groups_.empty()) return Status::Ok();
  SR_RETURN_IF_ERROR(comm.AllReduce(&off, &off, 1, DType::kInt32, comm::ReduceOp::kMax));
  if (off != 0) {
    groups_.clear();
    return Status::Ok();
  }
  for (size_t g = 0; g < groups_.size(); ++g)
    for (int32_t u : groups_[g].units) group_of_[u] = static_cast<int32_t>(g);
  SR_RETURN_IF_ERROR(comm.Split(HostOf(l.rank), l.rank, &host_comm_));
  if (host_comm_ == nullptr) return Status::Internal("host communicator split failed");
  return Status::Ok();
}

int64_t HostReduce::BatchOf(const RoutedBatch& rb, int32_t d) const {
  return rb.counts_recv[static_cast<size_t>(d) * kCountFields + 1];
}

const HostReduce::Slot& HostReduce::OwnSlot(int32_t source, int32_t u) const {
  const size_t m = layout_->units_to_rank[layout_->rank].size();
  return own_slot_[static_cast<size_t>(source) * m + static_cast<size_t>(my_unit_index_[u])];
}

Status HostReduce::Describe(const RoutedBatch& rb) {
  const Layout& l = *layout_;
  const int32_t me = l.rank;
  const auto& mine = l.units_to_rank[me];
  const size_t M = mine.size();
  if (rb.device_input) return Status::Internal("host reduce: the ids travelled between devices");
  // Owner side: the received lengths say which samples each of this rank's runs holds.
  own_slot_.assign(static_cast<size_t>(l.world) * M, Slot{});
  own_targets_.clear();
  size_t byte_off = 0;
  int64_t base = 0;
  for (int32_t s = 0; s < l.world; ++s) {
    if (s == me) continue;
    MessageLengths lengths(rb.recv.data() + byte_off, M, &rb.counts_recv[s * kCountFields]);
    int64_t floats = 0;
    for (size_t i = 0; i < M; ++i) {
      const int32_t u = mine[i];
      Slot& sl = own_slot_[static_cast<size_t>(s) * M + i];
      sl.at = base + floats;
      sl.first = static_cast<int64_t>(own_targets_.size());
      const bool keep = Reduced(u, s);
      int64_t bags = 0;
      const int32_t* lens = lengths.Next(&bags);
      for (int64_t b = 0; b < bags; ++b) {
        if (lens[b] == 0) continue;
        ++sl.count;
        if (keep) own_targets_.push_back(b);
      }
      floats += sl.count * l.units[u].cols;
    }
    if (static_cast<size_t>(floats) != rb.ret_floats_to[s])
      return Status::Internal("host reduce: rank ", s, "'s rows do not match its message");
    base += floats;
    byte_off += rb.recv_bytes[s];
  }
  // Sample side: where each other rank's unit's rows land in the flat receive buffer.
  peer_slot_.assign(l.units.size(), Slot{});
  int64_t k = 0, at = 0;
  for (int32_t d = 0; d < l.world; ++d) {
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t c = rb.ret_count[u];
      if (d != me) {
        peer_slot_[u] = Slot{at, c, k};
        at += c * l.units[u].cols;
      }
      k += c;
    }
  }
  // The samples of each remote group (ascending), each with the row of its first contributing
  // unit in combine order.
  const int64_t B = rb.batch_size;
  map_.assign(static_cast<size_t>(B), -1);
  peer_union_at_.assign(groups_.size() + 1, 0);
  peer_union_.clear();
  peer_first_.clear();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Group& grp = groups_[g];
    if (grp.host != HostOf(me)) {
      for (int32_t u : grp.units) {
        const Slot& sl = peer_slot_[u];
        for (int64_t i = 0; i < sl.count; ++i) {
          const int64_t t = rb.ret_target[sl.first + i];
          if (map_[t] < 0) map_[t] = sl.at + i * grp.cols;
        }
      }
      for (int64_t t = 0; t < B; ++t) {
        if (map_[t] < 0) continue;
        peer_union_.push_back(t);
        peer_first_.push_back(map_[t]);
        map_[t] = -1;
      }
    }
    peer_union_at_[g + 1] = static_cast<int64_t>(peer_union_.size());
  }
  return Status::Ok();
}

Status HostReduce::Forward(comm::Communicator& comm, const RoutedBatch& rb, const float* send,
                           float* recv) {
  const Layout& l = *layout_;
  const int32_t me = l.rank, W = l.world, H = HostOf(me);
  union_batch_ = nullptr;
  SR_RETURN_IF_ERROR(Describe(rb));
  const size_t G = groups_.size();

  // Stage 1, inside the host: each owner's rows for remote samples, as dense blocks of
  // [samples x (cols + 1)] (the last column flags a sample the shard has ids for), to the
  // aggregator of its (group, sample rank).
  c1s_.assign(rpn_, 0);
  c1r_.assign(rpn_, 0);
  auto each_piece = [&](auto&& fn) {
    for (size_t g = 0; g < G; ++g) {
      if (groups_[g].host != H) continue;
      for (int32_t d = 0; d < W; ++d) {
        if (HostOf(d) == H) continue;
        const int32_t a = Aggregator(groups_[g], d);
        for (int32_t u : groups_[g].units) fn(g, d, a, u, l.units[u].rank);
      }
    }
  };
  each_piece([&](size_t g, int32_t d, int32_t a, int32_t, int32_t o) {
    if (o == a) return;
    const size_t n = static_cast<size_t>(BatchOf(rb, d) * (groups_[g].cols + 1));
    if (o == me) c1s_[LocalIndex(a)] += n;
    if (a == me) c1r_[LocalIndex(o)] += n;
  });
  std::vector<size_t> cur(rpn_, 0), rcur(rpn_, 0);
  size_t total_s = 0, total_r = 0;
  for (int32_t j = 0; j < rpn_; ++j) {
    cur[j] = total_s;
    rcur[j] = total_r;
    total_s += c1s_[j];
    total_r += c1r_[j];
  }
  send1_.assign(total_s, 0.0f);
  recv1_.resize(total_r);
  each_piece([&](size_t g, int32_t d, int32_t a, int32_t u, int32_t o) {
    if (o != me || a == me) return;
    const int32_t cols = groups_[g].cols;
    float* blk = send1_.data() + cur[LocalIndex(a)];
    cur[LocalIndex(a)] += static_cast<size_t>(BatchOf(rb, d) * (cols + 1));
    const Slot& sl = OwnSlot(d, u);
    for (int64_t i = 0; i < sl.count; ++i) {
      float* row = blk + own_targets_[sl.first + i] * (cols + 1);
      std::memcpy(row, send + sl.at + i * cols, sizeof(float) * cols);
      row[cols] = 1.0f;
    }
  });
  SR_RETURN_IF_ERROR(
      host_comm_->AllToAllV(send1_.data(), c1s_, recv1_.data(), c1r_, DType::kFloat32));

  // The aggregator's sums: every unit of the group in combine order, from +0 (a unit without the
  // sample adds +0: the same bits as the flat combine, which skips it).
  std::vector<int64_t> agg_at(G * W, -1), agg_n(G * W, 0), rows_at(G * W, 0);
  agg_union_.clear();
  std::vector<float>& rows = dense_;
  std::vector<float> sums;
  rows.clear();
  for (size_t g = 0; g < G; ++g) {
    const Group& grp = groups_[g];
    if (grp.host != H) continue;
    const int32_t cols = grp.cols;
    for (int32_t d = 0; d < W; ++d) {
      if (HostOf(d) == H || Aggregator(grp, d) != me) continue;
      const int64_t Bd = BatchOf(rb, d);
      sums.assign(static_cast<size_t>(Bd * cols), 0.0f);
      map_.assign(static_cast<size_t>(Bd), 0);
      for (int32_t u : grp.units) {
        const int32_t o = l.units[u].rank;
        if (o == me) {
          const Slot& sl = OwnSlot(d, u);
          for (int64_t i = 0; i < sl.count; ++i) {
            const int64_t t = own_targets_[sl.first + i];
            float* dst = sums.data() + t * cols;
            const float* src = send + sl.at + i * cols;
            for (int32_t c = 0; c < cols; ++c) dst[c] += src[c];
            map_[t] = 1;
          }
          continue;
        }
        const float* blk = recv1_.data() + rcur[LocalIndex(o)];
        rcur[LocalIndex(o)] += static_cast<size_t>(Bd * (cols + 1));
        for (int64_t b = 0; b < Bd; ++b) {
          const float* src = blk + b * (cols + 1);
          float* dst = sums.data() + b * cols;
          for (int32_t c = 0; c < cols; ++c) dst[c] += src[c];
          if (src[cols] != 0.0f) map_[b] = 1;
        }
      }
      agg_at[g * W + d] = static_cast<int64_t>(agg_union_.size());
      rows_at[g * W + d] = static_cast<int64_t>(rows.size());
      for (int64_t b = 0; b < Bd; ++b) {
        if (map_[b] == 0) continue;
        agg_union_.push_back(b);
        rows.insert(rows.end(), sums.begin() + b * cols, sums.begin() + (b + 1) * cols);
      }
      agg_n[g * W + d] = static_cast<int64_t>(agg_union_.size()) - agg_at[g * W + d];
    }
  }
  agg_union_at_.assign(agg_at.begin(), agg_at.end());
  agg_union_at_.insert(agg_union_at_.end(), agg_n.begin(), agg_n.end());

  // Stage 2, across hosts: to each rank its flat rows of the units that stay flat for it, then
  // the sums of the groups this rank aggregates for it (group order).
  c2s_.assign(W, 0);
  c2r_.assign(W, 0);
  send2_.clear();
  const auto& mine = l.units_to_rank[me];
  for (int32_t d = 0; d < W; ++d) {
    if (d == me) continue;
    const size_t begin = send2_.size();
    for (int32_t u : mine) {
      if (Reduced(u, d)) continue;
      const Slot& sl = OwnSlot(d, u);
      send2_.insert(send2_.end(), send + sl.at, send + sl.at + sl.count * l.units[u].cols);
    }
    for (size_t g = 0; g < G; ++g) {
      const int64_t at = agg_at[g * W + d];
      if (at < 0) continue;
      const int64_t from = rows_at[g * W + d];
      send2_.insert(send2_.end(), rows.begin() + from,
                    rows.begin() + from + agg_n[g * W + d] * groups_[g].cols);
    }
    c2s_[d] = send2_.size() - begin;
  }
  std::vector<int64_t> union_rows_at(G, -1);
  size_t total2 = 0;
  for (int32_t a = 0; a < W; ++a) {
    if (a == me) continue;
    size_t n = 0;
    for (int32_t u : l.units_to_rank[a])
      if (!Reduced(u, me)) n += static_cast<size_t>(peer_slot_[u].count * l.units[u].cols);
    for (size_t g = 0; g < G; ++g) {
      if (groups_[g].host == H || Aggregator(groups_[g], me) != a) continue;
      union_rows_at[g] = static_cast<int64_t>(total2 + n);
      n += static_cast<size_t>((peer_union_at_[g + 1] - peer_union_at_[g]) * groups_[g].cols);
    }
    c2r_[a] = n;
    total2 += n;
  }
  recv2_.resize(total2);
  SR_RETURN_IF_ERROR(comm.AllToAllV(send2_.data(), c2s_, recv2_.data(), c2r_, DType::kFloat32));

  // The flat receive layout: flat units copied; a reduced group's sum in its first contributing
  // unit's row of each sample, +0 in the others' (the combine adds them in that order).
  size_t pos = 0;
  for (int32_t a = 0; a < W; ++a) {
    if (a == me) continue;
    size_t n = 0;
    for (int32_t u : l.units_to_rank[a]) {
      const Slot& sl = peer_slot_[u];
      const size_t floats = static_cast<size_t>(sl.count * l.units[u].cols);
      if (Reduced(u, me)) {
        std::fill(recv + sl.at, recv + sl.at + floats, 0.0f);
        continue;
      }
      if (floats == 0) continue;  // an empty batch's buffers may be null
      std::memcpy(recv + sl.at, recv2_.data() + pos + n, sizeof(float) * floats);
      n += floats;
    }
    pos += c2r_[a];
  }
  for (size_t g = 0; g < G; ++g) {
    if (groups_[g].host == H) continue;
    const int32_t cols = groups_[g].cols;
    for (int64_t j = peer_union_at_[g]; j < peer_union_at_[g + 1]; ++j)
      std::memcpy(recv + peer_first_[j],
                  recv2_.data() + union_rows_at[g] + (j - peer_union_at_[g]) * cols,
                  sizeof(float) * cols);
  }
  union_batch_ = &rb;
  return Status::Ok();
}

Status HostReduce::Backward(comm::Communicator& comm, const RoutedBatch& rb, const float* send,
                            float* recv) {
  const Layout& l = *layout_;
  const int32_t me = l.rank, W = l.world, H = HostOf(me);
  if (union_batch_ != &rb)
    return Status::Internal("host reduce: a backward whose forward did not take this exchange");
  const size_t G = groups_.size();
  const auto& mine = l.units_to_rank[me];

  // Stage 2 reversed: to each owner rank the gradient rows of its flat units, then one row per
  // sample of each group it aggregates for this rank (every unit's row of a sample is the same
  // slice of the output gradient; the first one is sent).
  std::vector<size_t> gs(W, 0), gr(W, 0);
  send2_.clear();
  for (int32_t a = 0; a < W; ++a) {
    if (a == me) continue;
    const size_t begin = send2_.size();
    for (int32_t u : l.units_to_rank[a]) {
      if (Reduced(u, me)) continue;
      const Slot& sl = peer_slot_[u];
      send2_.insert(send2_.end(), send + sl.at, send + sl.at + sl.count * l.units[u].cols);
    }
    for (size_t g = 0; g < G; ++g) {
      if (groups_[g].host == H || Aggregator(groups_[g], me) != a) continue;
      for (int64_t j = peer_union_at_[g]; j < peer_union_at_[g + 1]; ++j)
        send2_.insert(send2_.end(), send + peer_first_[j], send + peer_first_[j] + groups_[g].cols);
    }
    gs[a] = send2_.size() - begin;
  }
  const int64_t* agg_n = agg_union_at_.data() + G * W;
  std::vector<int64_t> grad_at(G * W, -1);
  size_t total = 0;
  for (int32_t d = 0; d < W; ++d) {
    if (d == me) continue;
    size_t n = 0;
    for (int32_t u : mine)
      if (!Reduced(u, d)) n += static_cast<size_t>(OwnSlot(d, u).count * l.units[u].cols);
    for (size_t g = 0; g < G; ++g) {
      if (agg_union_at_[g * W + d] < 0) continue;
      grad_at[g * W + d] = static_cast<int64_t>(total + n);
      n += static_cast<size_t>(agg_n[g * W + d] * groups_[g].cols);
    }
    gr[d] = n;
    total += n;
  }
  recv2_.resize(total);
  SR_RETURN_IF_ERROR(comm.AllToAllV(send2_.data(), gs, recv2_.data(), gr, DType::kFloat32));
  size_t pos = 0;
  for (int32_t d = 0; d < W; ++d) {
    if (d == me) continue;
    size_t n = 0;
    for (int32_t u : mine) {
      if (Reduced(u, d)) continue;
      const Slot& sl = OwnSlot(d, u);
      const size_t floats = static_cast<size_t>(sl.count * l.units[u].cols);
      if (floats == 0) continue;  // an empty batch's buffers may be null
      std::memcpy(recv + sl.at, recv2_.data() + pos + n, sizeof(float) * floats);
      n += floats;
    }
    pos += gr[d];
  }

  // Stage 1 reversed, inside the host: the aggregator hands each owner its group's rows as dense
  // [samples x cols] blocks; each owner (the aggregator too) reads its samples' rows.
  c1s_.assign(rpn_, 0);
  c1r_.assign(rpn_, 0);
  auto each_piece = [&](auto&& fn) {
    for (size_t g = 0; g < G; ++g) {
      if (groups_[g].host != H) continue;
      for (int32_t d = 0; d < W; ++d) {
        if (HostOf(d) == H) continue;
        const int32_t a = Aggregator(groups_[g], d);
        for (int32_t u : groups_[g].units) fn(g, d, a, u, l.units[u].rank);
      }
    }
  };
  each_piece([&](size_t g, int32_t d, int32_t a, int32_t, int32_t o) {
    if (o == a) return;
    const size_t n = static_cast<size_t>(BatchOf(rb, d) * groups_[g].cols);
    if (a == me) c1s_[LocalIndex(o)] += n;
    if (o == me) c1r_[LocalIndex(a)] += n;
  });
  std::vector<size_t> cur(rpn_, 0), rcur(rpn_, 0);
  size_t total_s = 0, total_r = 0;
  for (int32_t j = 0; j < rpn_; ++j) {
    cur[j] = total_s;
    rcur[j] = total_r;
    total_s += c1s_[j];
    total_r += c1r_[j];
  }
  send1_.assign(total_s, 0.0f);
  recv1_.resize(total_r);
  bool missing = false;
  each_piece([&](size_t g, int32_t d, int32_t a, int32_t u, int32_t o) {
    if (a != me) return;
    const int32_t cols = groups_[g].cols;
    const int64_t begin = agg_union_at_[g * W + d];
    const float* grads = recv2_.data() + grad_at[g * W + d];
    if (o != me) {
      float* blk = send1_.data() + cur[LocalIndex(o)];
      cur[LocalIndex(o)] += static_cast<size_t>(BatchOf(rb, d) * cols);
      for (int64_t j = 0; j < agg_n[g * W + d]; ++j)
        std::memcpy(blk + agg_union_[begin + j] * cols, grads + j * cols, sizeof(float) * cols);
      return;
    }
    // This rank's own unit: its samples are a subset of the union, both ascending.
    const Slot& sl = OwnSlot(d, u);
    int64_t j = 0;
    for (int64_t i = 0; i < sl.count; ++i) {
      const int64_t t = own_targets_[sl.first + i];
      while (j < agg_n[g * W + d] && agg_union_[begin + j] != t) ++j;
      if (j == agg_n[g * W + d]) {
        missing = true;
        return;
      }
      std::memcpy(recv + sl.at + i * cols, grads + j * cols, sizeof(float) * cols);
    }
  });
  if (missing) return Status::Internal("host reduce: a sample of this rank's shard was not sent");
  SR_RETURN_IF_ERROR(
      host_comm_->AllToAllV(send1_.data(), c1s_, recv1_.data(), c1r_, DType::kFloat32));
  each_piece([&](size_t g, int32_t d, int32_t a, int32_t u, int32_t o) {
    if (o != me || a == me) return;
    const int32_t cols = groups_[g].cols;
    const float* blk = recv1_.data() + rcur[LocalIndex(a)];
    rcur[LocalIndex(a)] += static_cast<size_t>(BatchOf(rb, d) * cols);
    const Slot& sl = OwnSlot(d, u);
    for (int64_t i = 0; i < sl.count; ++i)
      std::memcpy(recv + sl.at + i * cols, blk + own_targets_[sl.first + i] * cols,
                  sizeof(float) * cols);
  });
  return Status::Ok();
}

}  // namespace shardrec::embedding
