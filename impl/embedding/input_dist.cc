// Input distribution: validation and routing (sender side), the two-step exchange, and the
// owner-side rebuild of per-shard bags.
#include "impl/embedding/input_dist.h"

#include <cstring>

namespace shardrec::embedding {

namespace {

size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// memcpy that accepts empty ranges: an empty vector's data() may be null, and memcpy with a null
// pointer is undefined even for zero bytes.
void CopyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

// Bytes of one routed message: lengths (int32, unit-major), rows (int64), weights (float).
size_t MessageBytes(size_t units, int64_t batch, int64_t ids, bool weighted) {
  return Align8(4 * units * static_cast<size_t>(batch)) + 8 * static_cast<size_t>(ids) +
         (weighted ? Align8(4 * static_cast<size_t>(ids)) : 0);
}

Status CheckStructure(const sharding::Plan& plan, const Batch& b) {
  const int64_t nf = static_cast<int64_t>(plan.features.size());
  if (b.batch_size < 0)
    return Status::InvalidArgument("batch: batch_size must be >= 0, got ", b.batch_size);
  if (b.num_features != nf)
    return Status::InvalidArgument("batch: num_features is ", b.num_features, " but the plan has ",
                                   nf, " features");
  const size_t expect = static_cast<size_t>(nf * b.batch_size);
  if (b.num_lengths != expect)
    return Status::InvalidArgument("batch: num_lengths is ", b.num_lengths, ", expected ",
                                   "num_features * batch_size = ", expect);
  if (expect > 0 && b.lengths == nullptr)
    return Status::InvalidArgument("batch: lengths is NULL but ", expect, " lengths are expected");
  if (b.values_dtype != DType::kInt64 && b.values_dtype != DType::kInt32)
    return Status::InvalidArgument("batch: values dtype must be int32 or int64, got ",
                                   DTypeName(b.values_dtype));
  if (b.num_values > 0 && b.values == nullptr)
    return Status::InvalidArgument("batch: values is NULL but num_values is ", b.num_values);
  if (b.weights == nullptr && b.num_weights != 0)
    return Status::InvalidArgument("batch: weights is NULL but num_weights is ", b.num_weights);
  if (b.weights != nullptr && b.num_weights != b.num_values)
    return Status::InvalidArgument("batch: num_weights is ", b.num_weights, " but num_values is ",
                                   b.num_values, " (weights are per id)");
  size_t sum = 0;
  for (size_t i = 0; i < expect; ++i) {
    const int32_t len = b.lengths[i];
    if (len < 0) {
      const size_t f = i / static_cast<size_t>(b.batch_size);
      return Status::InvalidArgument("batch: feature '", plan.features[f].name, "' sample ",
                                     i % static_cast<size_t>(b.batch_size), ": negative length ",
                                     len);
    }
    sum += static_cast<size_t>(len);
  }
  if (sum != b.num_values)
    return Status::InvalidArgument("batch: lengths sum to ", sum, " but num_values is ",
                                   b.num_values);
  return Status::Ok();
}

inline int64_t IdAt(const Batch& b, size_t i) {
  return b.values_dtype == DType::kInt64 ? static_cast<const int64_t*>(b.values)[i]
                                         : static_cast<const int32_t*>(b.values)[i];
}

void ResetSender(const Layout& l, const Batch& batch, RoutedBatch* rb) {
  const size_t nu = l.units.size();
  rb->batch_size = batch.batch_size;
  rb->num_values = static_cast<int64_t>(batch.num_values);
  rb->weighted = batch.weights != nullptr;
  rb->unit_rows.resize(nu);
  rb->unit_weights.resize(nu);
  rb->unit_lengths.resize(nu);
  rb->unit_targets.resize(nu);
  for (size_t u = 0; u < nu; ++u) {
    rb->unit_rows[u].clear();
    rb->unit_weights[u].clear();
    rb->unit_targets[u].clear();
    rb->unit_lengths[u].assign(static_cast<size_t>(batch.batch_size), 0);
  }
  rb->mean_div.assign(l.sequence ? 0 : l.pairs.size() * static_cast<size_t>(batch.batch_size),
                      0.0f);
  rb->dp_offsets.clear();
  rb->dp_offsets_begin.clear();
  rb->dp_rows.clear();
  rb->dp_weights.clear();
  rb->dp_pos.clear();
}

void Pack(const Layout& l, RoutedBatch* rb) {
  const int32_t world = l.world;
  const size_t B = static_cast<size_t>(rb->batch_size);
  rb->send_bytes.assign(world, 0);
  rb->counts_send.assign(world * kCountFields, 0);
  rb->ret_count.assign(l.units.size(), 0);
  rb->ret_target.clear();
  rb->ret_floats_from.assign(world, 0);
  size_t total = 0;
  for (int32_t d = 0; d < world; ++d) {
    int64_t n = 0;
    for (int32_t u : l.units_to_rank[d]) n += static_cast<int64_t>(rb->unit_rows[u].size());
    rb->send_bytes[d] = MessageBytes(l.units_to_rank[d].size(), rb->batch_size, n, rb->weighted);
    int64_t* c = &rb->counts_send[d * kCountFields];
    c[0] = 0;
    c[1] = rb->batch_size;
    c[2] = n;
    c[3] = rb->weighted ? 1 : 0;
    total += rb->send_bytes[d];
  }
  rb->send.resize(total);
  uint8_t* p = rb->send.data();
  for (int32_t d = 0; d < world; ++d) {
    const auto& units = l.units_to_rank[d];
    uint8_t* base = p;
    for (int32_t u : units) {
      CopyBytes(p, rb->unit_lengths[u].data(), 4 * B);
      p += 4 * B;
    }
    p = base + Align8(4 * units.size() * B);
    for (int32_t u : units) {
      const auto& r = rb->unit_rows[u];
      CopyBytes(p, r.data(), 8 * r.size());
      p += 8 * r.size();
    }
    if (rb->weighted) {
      uint8_t* wbase = p;
      for (int32_t u : units) {
        const auto& w = rb->unit_weights[u];
        CopyBytes(p, w.data(), 4 * w.size());
        p += 4 * w.size();
      }
      p = wbase + Align8(static_cast<size_t>(p - wbase));
    }
    for (int32_t u : units) {
      rb->ret_count[u] = static_cast<int64_t>(rb->unit_targets[u].size());
      rb->ret_target.insert(rb->ret_target.end(), rb->unit_targets[u].begin(),
                            rb->unit_targets[u].end());
      rb->ret_floats_from[d] += static_cast<size_t>(rb->ret_count[u]) * l.units[u].cols;
    }
  }
}

}  // namespace

Status RouteBatch(const Layout& l, BoundsPolicy bounds, const Batch& batch, RoutedBatch* rb) {
  const auto& plan = *l.plan;
  SR_RETURN_IF_ERROR(CheckStructure(plan, batch));
  ResetSender(l, batch, rb);
  const int64_t B = batch.batch_size;
  std::vector<size_t> feature_begin(plan.features.size() + 1, 0);
  for (size_t f = 0; f < plan.features.size(); ++f) {
    size_t n = 0;
    for (int64_t b = 0; b < B; ++b) n += static_cast<size_t>(batch.lengths[f * B + b]);
    feature_begin[f + 1] = feature_begin[f] + n;
  }
  for (size_t p = 0; p < l.pairs.size(); ++p) {
    const Pair& pair = l.pairs[p];
    const auto& cfg = plan.tables[pair.table];
    const TableLayout& tl = l.tables[pair.table];
    const auto& unit_of = l.unit_of[p];
    if (tl.data_parallel) {
      rb->dp_offsets_begin.push_back(rb->dp_offsets.size());
      rb->dp_offsets.push_back(static_cast<int64_t>(rb->dp_rows.size()));
    }
    size_t pos = feature_begin[pair.feature];
    for (int64_t b = 0; b < B; ++b) {
      const int32_t len = batch.lengths[pair.feature * B + b];
      float div = 0.0f;
      for (int32_t k = 0; k < len; ++k) {
        const size_t i = pos + static_cast<size_t>(k);
        int64_t x = IdAt(batch, i);
        if (x < 0 || x >= cfg.rows) {
          if (bounds == BoundsPolicy::kSkip) continue;
          if (bounds != BoundsPolicy::kClamp)
            return Status::InvalidArgument("batch: feature '", plan.features[pair.feature].name,
                                           "' sample ", b, " (value position ", i, "): id ", x,
                                           " is out of range [0, ", cfg.rows, ") of table '",
                                           cfg.name, "'");
          x = 0;
        }
        const float w = rb->weighted ? batch.weights[i] : 1.0f;
        div += w;
        if (tl.data_parallel) {
          rb->dp_rows.push_back(x);
          if (rb->weighted) rb->dp_weights.push_back(w);
          if (l.sequence) rb->dp_pos.push_back(static_cast<int64_t>(i));
          continue;
        }
        const RowBlock& block = tl.blocks[FindRowBlock(tl, x)];
        for (int32_t s : block.shards) {
          const int32_t u = unit_of[s];
          rb->unit_rows[u].push_back(x - block.row_offset);
          if (rb->weighted) rb->unit_weights[u].push_back(w);
          ++rb->unit_lengths[u][b];
          if (l.sequence) rb->unit_targets[u].push_back(static_cast<int64_t>(i));
        }
      }
      pos += static_cast<size_t>(len);
      if (tl.data_parallel) rb->dp_offsets.push_back(static_cast<int64_t>(rb->dp_rows.size()));
      if (pair.mean) rb->mean_div[p * B + b] = div;
    }
    if (!l.sequence && !tl.data_parallel) {
      for (int32_t u : unit_of) {
        if (u < 0) continue;
        for (int64_t b = 0; b < B; ++b)
          if (rb->unit_lengths[u][b] > 0) rb->unit_targets[u].push_back(b);
      }
    }
  }
  Pack(l, rb);
  return Status::Ok();
}

Status ExchangeInput(const Layout& l, comm::Communicator& comm, const Status& local_error,
                     RoutedBatch* rb) {
  const int32_t world = l.world;
  if (!local_error.ok()) {
    rb->counts_send.assign(world * kCountFields, 0);
    for (int32_t d = 0; d < world; ++d) rb->counts_send[d * kCountFields] = 1;
  }
  rb->counts_recv.assign(world * kCountFields, 0);
  std::vector<size_t> counts(world, kCountFields);
  SR_RETURN_IF_ERROR(comm.AllToAllV(rb->counts_send.data(), counts, rb->counts_recv.data(), counts,
                                    DType::kInt64));
  if (!local_error.ok()) return local_error;
  for (int32_t s = 0; s < world; ++s) {
    if (rb->counts_recv[s * kCountFields] != 0)
      return Status::InvalidArgument("rank ", s, " rejected its batch (its error says why); ",
                                     "no rank changed any state");
  }
  const size_t units = l.units_to_rank[l.rank].size();
  rb->recv_bytes.assign(world, 0);
  size_t total = 0;
  for (int32_t s = 0; s < world; ++s) {
    const int64_t* c = &rb->counts_recv[s * kCountFields];
    rb->recv_bytes[s] = MessageBytes(units, c[1], c[2], c[3] != 0);
    total += rb->recv_bytes[s];
  }
  rb->recv.resize(total);
  return comm.AllToAllV(rb->send.data(), rb->send_bytes, rb->recv.data(), rb->recv_bytes,
                        DType::kUInt8);
}

Status UnpackInput(const Layout& l, RoutedBatch* rb) {
  const auto& my_units = l.units_to_rank[l.rank];
  bool any_weighted = false;
  for (int32_t s = 0; s < l.world; ++s) any_weighted |= rb->counts_recv[s * kCountFields + 3] != 0;
  rb->shards.resize(l.local.size());
  for (auto& sb : rb->shards) {
    sb.offsets.assign(1, 0);
    sb.rows.clear();
    sb.weights.clear();
    sb.num_bags = 0;
  }
  rb->segments.clear();
  rb->ret_floats_to.assign(l.world, 0);
  size_t byte_off = 0;
  size_t float_base = 0;
  for (int32_t s = 0; s < l.world; ++s) {
    const int64_t* c = &rb->counts_recv[s * kCountFields];
    const int64_t B = c[1];
    const int64_t n = c[2];
    const bool weighted = c[3] != 0;
    const uint8_t* msg = rb->recv.data() + byte_off;
    const auto* lens = reinterpret_cast<const int32_t*>(msg);
    const auto* rows = reinterpret_cast<const int64_t*>(msg + Align8(4 * my_units.size() * B));
    const auto* wts = reinterpret_cast<const float*>(rows + n);
    int64_t cursor = 0;
    size_t floats = 0;
    for (size_t ui = 0; ui < my_units.size(); ++ui) {
      const Unit& unit = l.units[my_units[ui]];
      ShardBags& sb = rb->shards[unit.local];
      const int64_t shard_rows = l.local[unit.local].rows;
      Segment seg{unit.local, sb.num_bags, 0, float_base + floats};
      for (int64_t b = 0; b < B; ++b) {
        const int32_t len = lens[ui * B + b];
        if (len == 0) continue;
        if (len < 0 || cursor + len > n)
          return Status::Internal("input dist: malformed message from rank ", s);
        for (int32_t k = 0; k < len; ++k) {
          const int64_t r = rows[cursor + k];
          if (r < 0 || r >= shard_rows)
            return Status::Internal("input dist: rank ", s, " sent local row ", r,
                                    " outside a shard of ", shard_rows, " rows");
          sb.rows.push_back(r);
          if (any_weighted) sb.weights.push_back(weighted ? wts[cursor + k] : 1.0f);
        }
        cursor += len;
        if (l.sequence) {
          sb.num_bags += len;
          seg.count += len;
        } else {
          sb.offsets.push_back(static_cast<int64_t>(sb.rows.size()));
          ++sb.num_bags;
          ++seg.count;
        }
      }
      floats += static_cast<size_t>(seg.count) * unit.cols;
      if (seg.count > 0) rb->segments.push_back(seg);
    }
    if (cursor != n) return Status::Internal("input dist: rank ", s, " sent unused ids");
    rb->ret_floats_to[s] = floats;
    float_base += floats;
    byte_off += rb->recv_bytes[s];
  }
  rb->staging_size = 0;
  for (size_t i = 0; i < rb->shards.size(); ++i) {
    rb->shards[i].staging_offset = rb->staging_size;
    rb->staging_size += static_cast<size_t>(rb->shards[i].num_bags) * l.local[i].cols;
  }
  return Status::Ok();
}

}  // namespace shardrec::embedding
