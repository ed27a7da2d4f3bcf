// The backward path: gradients travel back along the forward routing, are aggregated per
// unique row on the shard owners (scaled by 1/W), row statistics are summed across column
// shards, and the fused optimizer updates each touched row once. Data-parallel tables
// all-reduce a dense gradient instead.
#include <cstring>

#include "impl/embedding/collection.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

Status EmbeddingCollection::Backward(const float* grad, size_t grad_len) {
  ScopedTimer total(&timings_.total_seconds);
  Status local;
  if (current_ == nullptr || current_consumed_) {
    local = Status::InvalidUsage("backward needs a forward first (one backward per forward)");
  } else {
    const size_t rows =
        static_cast<size_t>(layout_.sequence ? current_->num_values : current_->batch_size);
    const size_t need = rows * static_cast<size_t>(layout_.output_dim);
    if (grad_len != need)
      local = Status::InvalidArgument("grad_len is ", grad_len, " but the last forward's output ",
                                      "has ", need, " elements");
    else if (need > 0 && grad == nullptr)
      local = Status::InvalidArgument("grad must not be NULL");
  }
  {
    ScopedTimer t(&timings_.comm_seconds);
    SR_RETURN_IF_ERROR(Agree(local, "its backward call"));
  }
  const RoutedBatch& rb = *current_;
  current_consumed_ = true;
  ++step_;
  SR_RETURN_IF_ERROR(SendGradients(rb, grad));
  AggregateShardGradients(rb);
  SR_RETURN_IF_ERROR(ApplySharded());
  SR_RETURN_IF_ERROR(BackwardDataParallel(rb, grad));
  ++timings_.backwards;
  return Status::Ok();
}

// Reverse of the output distribution: every row that came back in forward now carries its
// slice of the output gradient (divided by the bag's divisor for MEAN) to the shard owner.
Status EmbeddingCollection::SendGradients(const RoutedBatch& rb, const float* grad) {
  const int64_t D = layout_.output_dim;
  const int64_t B = rb.batch_size;
  size_t send_total = 0, recv_total = 0;
  for (size_t v : rb.ret_floats_from) send_total += v;
  for (size_t v : rb.ret_floats_to) recv_total += v;
  ret_recv_.resize(send_total);  // reused as the gradient send buffer
  ret_send_.resize(recv_total);  // and this as the receive buffer
  float* dst = ret_recv_.data();
  size_t k = 0;
  for (int32_t d = 0; d < layout_.world; ++d) {
    for (int32_t u : layout_.units_to_rank[d]) {
      const Unit& unit = layout_.units[u];
      const Pair& pair = layout_.pairs[unit.pair];
      const int64_t col = pair.out_offset + unit.col_offset;
      for (int64_t j = 0; j < rb.ret_count[u]; ++j, ++k) {
        const int64_t target = rb.ret_target[k];
        const float* g = grad + target * D + col;
        if (pair.mean) {
          const float div = rb.mean_div[unit.pair * B + target];
          for (int32_t c = 0; c < unit.cols; ++c) dst[c] = div != 0.0f ? g[c] / div : 0.0f;
        } else {
          std::memcpy(dst, g, sizeof(float) * unit.cols);
        }
        dst += unit.cols;
      }
    }
  }
  ScopedTimer t(&timings_.comm_seconds);
  return comm_->AllToAllV(ret_recv_.data(), rb.ret_floats_from, ret_send_.data(), rb.ret_floats_to,
                          DType::kFloat32);
}

void EmbeddingCollection::AggregateShardGradients(const RoutedBatch& rb) {
  staging_.resize(rb.staging_size);
  for (const Segment& seg : rb.segments) {
    const int32_t cols = layout_.local[seg.local].cols;
    float* dst = staging_.data() + rb.shards[seg.local].staging_offset +
                 static_cast<size_t>(seg.bag_begin) * cols;
    std::memcpy(dst, ret_send_.data() + seg.buf_offset,
                sizeof(float) * static_cast<size_t>(seg.count) * cols);
  }
  // TorchRec's gradient division: the sum over the global batch divided by the group size.
  const float scale = 1.0f / static_cast<float>(layout_.world);
  for (size_t i = 0; i < layout_.local.size(); ++i) {
    uniq_rows_[i].clear();
    uniq_grads_[i].clear();
    const LocalShard& ls = layout_.local[i];
    if (layout_.tables[ls.table].data_parallel) continue;
    const ShardBags& sb = rb.shards[i];
    if (sb.num_bags == 0) continue;
    const float* bw = sb.weights.empty() ? nullptr : sb.weights.data();
    const float* g = staging_.data() + sb.staging_offset;
    if (layout_.sequence) {
      kernels::AggregateSequenceGrads(sb.rows.data(), bw, sb.num_bags, g, ls.cols, ls.cols, scale,
                                      &uniq_rows_[i], &uniq_grads_[i], pool(), &workspaces_[i]);
      continue;
    }
    kernels::Bags bags{sb.offsets.data(), sb.num_bags, sb.rows.data(), bw};
    if (FusedEligible(i)) {
      // Sum and update blocks of rows while they are in cache; the result is bit-identical to
      // aggregate + PartialRowStats + Apply. ApplySharded then skips this shard (no rows left).
      optim::ShardParams params = Params(static_cast<int32_t>(i));
      kernels::PooledBackwardFused(bags, g, ls.cols, scale, optim_, step_,
                                   layout_.plan->tables[ls.table].dim, params, pool(),
                                   &workspaces_[i]);
      continue;
    }
    kernels::AggregatePooledGrads(bags, g, ls.cols, ls.cols, scale, &uniq_rows_[i], &uniq_grads_[i],
                                  pool(), &workspaces_[i]);
  }
}

// A pooled shard can take the fused backward when its optimizer needs no row statistics or the
// shard holds whole rows (no sibling column shard to exchange statistics with).
bool EmbeddingCollection::FusedEligible(size_t local) const {
  if (layout_.sequence) return false;
  if (layout_.num_row_stats == 0) return true;
  const LocalShard& ls = layout_.local[local];
  const TableLayout& tl = layout_.tables[ls.table];
  return tl.blocks[FindRowBlock(tl, ls.row_offset)].shards.size() == 1;
}

// Row statistics (row-wise Adagrad, partial row-wise Adam, LAMB) are computed per column shard
// and summed over the whole row in column order, so every column shard applies the same
// row-wise update as the unsharded table would.
Status EmbeddingCollection::ApplySharded() {
  const int K = layout_.num_row_stats;
  std::vector<optim::ShardParams> params(layout_.local.size());
  for (size_t i = 0; i < layout_.local.size(); ++i) {
    if (layout_.tables[layout_.local[i].table].data_parallel) continue;
    params[i] = Params(static_cast<int32_t>(i));
    if (K == 0 || uniq_rows_[i].empty()) {
      partial_stats_[i].clear();
      continue;
    }
    partial_stats_[i].resize(uniq_rows_[i].size() * K);
    optim::RowUpdate up{uniq_rows_[i], uniq_grads_[i].data()};
    optim::PartialRowStats(optim_, step_, params[i], up, partial_stats_[i].data(), pool());
  }
  // Exchange partial statistics between sibling column shards (all ranks take part).
  std::vector<size_t> recv_at(layout_.stat_messages.size(), 0);
  if (!layout_.stat_messages.empty()) {
    const int32_t me = layout_.rank;
    std::vector<size_t> send_counts(layout_.world, 0), recv_counts(layout_.world, 0);
    for (const StatMessage& m : layout_.stat_messages) {
      const auto& tl = layout_.tables[m.table];
      if (m.from_rank == me)
        send_counts[m.to_rank] += partial_stats_[tl.shard_local[m.from_shard]].size();
      if (m.to_rank == me)
        recv_counts[m.from_rank] += partial_stats_[tl.shard_local[m.to_shard]].size();
    }
    stat_send_.clear();
    for (int32_t d = 0; d < layout_.world; ++d) {
      for (const StatMessage& m : layout_.stat_messages) {
        if (m.from_rank != me || m.to_rank != d) continue;
        const auto& ps = partial_stats_[layout_.tables[m.table].shard_local[m.from_shard]];
        stat_send_.insert(stat_send_.end(), ps.begin(), ps.end());
      }
    }
    size_t off = 0;
    for (int32_t s = 0; s < layout_.world; ++s) {
      for (size_t j = 0; j < layout_.stat_messages.size(); ++j) {
        const StatMessage& m = layout_.stat_messages[j];
        if (m.from_rank != s || m.to_rank != me) continue;
        recv_at[j] = off;
        off += partial_stats_[layout_.tables[m.table].shard_local[m.to_shard]].size();
      }
    }
    stat_recv_.resize(off);
    ScopedTimer t(&timings_.comm_seconds);
    SR_RETURN_IF_ERROR(comm_->AllToAllV(stat_send_.data(), send_counts, stat_recv_.data(),
                                        recv_counts, DType::kFloat32));
  }
  for (size_t i = 0; i < layout_.local.size(); ++i) {
    const LocalShard& ls = layout_.local[i];
    const TableLayout& tl = layout_.tables[ls.table];
    if (tl.data_parallel || uniq_rows_[i].empty()) continue;
    optim::RowUpdate up{uniq_rows_[i], uniq_grads_[i].data()};
    const float* full = nullptr;
    if (K > 0) {
      const RowBlock& block = tl.blocks[FindRowBlock(tl, ls.row_offset)];
      if (block.shards.size() == 1) {
        full = partial_stats_[i].data();
      } else {
        const size_t n = partial_stats_[i].size();
        full_stats_.assign(n, 0.0f);
        for (int32_t sib : block.shards) {
          const float* src = nullptr;
          if (sib == ls.shard) {
            src = partial_stats_[i].data();
          } else {
            for (size_t j = 0; j < layout_.stat_messages.size(); ++j) {
              const StatMessage& m = layout_.stat_messages[j];
              if (m.table == ls.table && m.from_shard == sib && m.to_shard == ls.shard) {
                src = stat_recv_.data() + recv_at[j];
                break;
              }
            }
          }
          if (src == nullptr) return Status::Internal("missing row statistics of a column shard");
          for (size_t k = 0; k < n; ++k) full_stats_[k] += src[k];
        }
        full = full_stats_.data();
      }
    }
    optim::Apply(optim_, step_, layout_.plan->tables[ls.table].dim, params[i], up, full, pool());
  }
  return Status::Ok();
}

// Data-parallel tables: a dense table gradient plus a touched-row mask, all-reduced over the
// data-parallel group and divided by its size; every rank then applies the same update.
Status EmbeddingCollection::BackwardDataParallel(const RoutedBatch& rb, const float* grad) {
  if (layout_.dp_tables.empty()) return Status::Ok();
  const auto& plan = *layout_.plan;
  const int64_t D = layout_.output_dim;
  const int64_t B = rb.batch_size;
  dp_grad_.assign(layout_.dp_grad_size, 0.0f);
  for (size_t i = 0; i < layout_.dp_pairs.size(); ++i) {
    const int32_t p = layout_.dp_pairs[i];
    const Pair& pair = layout_.pairs[p];
    const int32_t dim = plan.tables[pair.table].dim;
    float* tg = dp_grad_.data() + dp_grad_offset_[pair.table];
    float* touched = dp_grad_.data() + dp_touch_offset_[pair.table];
    const int64_t* offsets = rb.dp_offsets.data() + rb.dp_offsets_begin[i];
    const bool weighted = !rb.dp_weights.empty();
    for (int64_t b = 0; b < B; ++b) {
      const float div = pair.mean ? rb.mean_div[p * B + b] : 1.0f;
      for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
        const int64_t row = rb.dp_rows[j];
        const int64_t target = layout_.sequence ? rb.dp_pos[j] : b;
        const float* g = grad + target * D + pair.out_offset;
        const float w = weighted ? rb.dp_weights[j] : 1.0f;
        float* dst = tg + row * dim;
        touched[row] = 1.0f;
        if (div == 0.0f) continue;
        for (int32_t c = 0; c < dim; ++c) dst[c] += (pair.mean ? g[c] / div : g[c]) * w;
      }
    }
  }
  {
    ScopedTimer t(&timings_.comm_seconds);
    SR_RETURN_IF_ERROR(dp_comm_->AllReduce(dp_grad_.data(), dp_grad_.data(), dp_grad_.size(),
                                           DType::kFloat32, comm::ReduceOp::kSum));
  }
  const float scale = 1.0f / static_cast<float>(dp_comm_->Size());
  const int K = layout_.num_row_stats;
  for (int32_t t : layout_.dp_tables) {
    const int32_t dim = plan.tables[t].dim;
    const int32_t local = layout_.tables[t].shard_local[layout_.rank];
    const float* tg = dp_grad_.data() + dp_grad_offset_[t];
    const float* touched = dp_grad_.data() + dp_touch_offset_[t];
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
    optim::ShardParams params = Params(local);
    optim::RowUpdate up{rows, grads.data()};
    std::vector<float>& stats = partial_stats_[local];
    stats.assign(rows.size() * K, 0.0f);
    if (K > 0) optim::PartialRowStats(optim_, step_, params, up, stats.data(), pool());
    optim::Apply(optim_, step_, dim, params, up, K > 0 ? stats.data() : nullptr, pool());
  }
  return Status::Ok();
}

}  // namespace shardrec::embedding
