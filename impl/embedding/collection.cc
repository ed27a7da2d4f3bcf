// Collection lifecycle and the forward path: creation (plan agreement, arenas, init), input
// distribution (synchronous or on a background thread) and lookup + output distribution.
#include "impl/embedding/collection.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "impl/core/rng.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

using sharding::InitConfig;

Status EmbeddingCollection::Create(std::shared_ptr<const sharding::Plan> plan,
                                   std::shared_ptr<comm::Communicator> comm,
                                   const optim::OptimizerConfig& optimizer,
                                   const CollectionOptions& options,
                                   std::unique_ptr<EmbeddingCollection>* out) {
  if (comm == nullptr) return Status::InvalidArgument("comm must not be null");
  if (plan == nullptr) return Status::InvalidArgument("plan must not be null");
  std::unique_ptr<EmbeddingCollection> c(new EmbeddingCollection());
  Status local;
  if (!comm->device().is_host()) {
    local = Status::Unsupported("the embedding collection runs on host communicators only in ",
                                "this build; got a ", comm->device().ToString(), " communicator");
  } else if (comm->Size() != plan->world_size) {
    local = Status::InvalidArgument("the communicator has ", comm->Size(),
                                    " ranks but the plan was made for ", plan->world_size);
  } else if (static_cast<int32_t>(options.bounds) < 0 || static_cast<int32_t>(options.bounds) > 2) {
    local = Status::InvalidArgument("options: unknown bounds policy ",
                                    static_cast<int32_t>(options.bounds));
  } else {
    local = optim::ValidateConfig(optimizer);
    if (local.ok()) local = BuildLayout(plan, comm->Rank(), optimizer.type, &c->layout_);
  }
  // One allreduce(max) agrees on the plan hash (max of h and of ~h: equal iff min == max) and
  // on whether any rank failed, so every rank returns instead of waiting on a peer.
  const uint64_t hash = plan->Hash();
  int64_t agree[3] = {static_cast<int64_t>(hash), static_cast<int64_t>(~hash),
                      local.ok() ? 0 : comm->Rank() + 1};
  SR_RETURN_IF_ERROR(comm->AllReduce(agree, agree, 3, DType::kInt64, comm::ReduceOp::kMax));
  if (!local.ok()) return local;
  if (agree[2] != 0)
    return Status::InvalidArgument("rank ", agree[2] - 1,
                                   " rejected the collection configuration (its error says why)");
  if (static_cast<uint64_t>(agree[0]) != hash || ~static_cast<uint64_t>(agree[1]) != hash)
    return Status::InvalidArgument(
        "ranks were given different plans (plan hashes differ); "
        "every rank must create the collection from the same plan");
  SR_RETURN_IF_ERROR(comm->Split(0, comm->Rank(), &c->input_comm_));
  if (c->input_comm_ == nullptr) return Status::Internal("input communicator split failed");
  c->comm_ = std::move(comm);
  c->dp_comm_ = options.dp_comm ? options.dp_comm : c->comm_;
  c->optim_ = optimizer;
  c->options_ = options;
  c->options_.dp_comm.reset();
  if (options.num_threads > 1) c->pool_ = std::make_unique<ThreadPool>(options.num_threads);
  c->Initialise();
  *out = std::move(c);
  return Status::Ok();
}

EmbeddingCollection::~EmbeddingCollection() {
  if (worker_.joinable()) worker_.join();
}

void EmbeddingCollection::Initialise() {
  const auto& plan = *layout_.plan;
  params_.assign(layout_.weights_size + layout_.states_size, 0.0f);
  weights_fp16_.assign(layout_.weights_fp16_size, 0);
  weights_bf16_.assign(layout_.weights_bf16_size, 0);
  std::vector<float> row;
  for (const LocalShard& ls : layout_.local) {
    const auto& cfg = plan.tables[ls.table];
    float low = cfg.init.low;
    float high = cfg.init.high;
    if (cfg.init.kind == InitConfig::Kind::kDefault) {
      high = static_cast<float>(std::sqrt(1.0 / static_cast<double>(cfg.rows)));
      low = -high;
    }
    const bool constant = cfg.init.kind == InitConfig::Kind::kConstant;
    const uint64_t key = layout_.tables[ls.table].key;
    // The fp32 value is drawn first and rounded to the storage type, so a 16-bit table starts
    // as the rounded fp32 table under every plan.
    row.resize(static_cast<size_t>(ls.cols));
    for (int64_t r = 0; r < ls.rows; ++r) {
      const uint64_t grow = static_cast<uint64_t>(ls.row_offset + r);
      for (int32_t c = 0; c < ls.cols; ++c) {
        const uint64_t col = static_cast<uint64_t>(ls.col_offset + c);
        row[c] = constant ? low : low + (high - low) * UniformAt(options_.seed, key, grow, col);
      }
      WriteRow(ls, r, row.data());
    }
  }
  dp_grad_offset_.assign(plan.tables.size(), 0);
  dp_touch_offset_.assign(plan.tables.size(), 0);
  size_t off = 0;
  for (int32_t t : layout_.dp_tables) {
    dp_grad_offset_[t] = off;
    off += static_cast<size_t>(plan.tables[t].rows) * plan.tables[t].dim;
  }
  for (int32_t t : layout_.dp_tables) {
    dp_touch_offset_[t] = off;
    off += static_cast<size_t>(plan.tables[t].rows);
  }
  uniq_rows_.resize(layout_.local.size());
  uniq_grads_.resize(layout_.local.size());
  partial_stats_.resize(layout_.local.size());
  workspaces_.resize(layout_.local.size());
}

optim::ShardParams EmbeddingCollection::Params(int32_t local) {
  const LocalShard& ls = layout_.local[local];
  optim::ShardParams p;
  p.weights = ShardWeights(ls);
  p.dtype = ls.dtype;
  p.rows = ls.rows;
  p.cols = ls.cols;
  p.stride = ls.cols;
  for (size_t off : ls.state_offsets) p.states.push_back(states_data() + off);
  p.table_key = layout_.tables[ls.table].key;
  p.row_offset = ls.row_offset;
  p.col_offset = ls.col_offset;
  return p;
}

std::unique_ptr<RoutedBatch> EmbeddingCollection::TakeSpare() {
  if (spare_) return std::move(spare_);
  return std::make_unique<RoutedBatch>();
}

Status EmbeddingCollection::Agree(const Status& local, const char* what) {
  int64_t flag = local.ok() ? 0 : comm_->Rank() + 1;
  SR_RETURN_IF_ERROR(comm_->AllReduce(&flag, &flag, 1, DType::kInt64, comm::ReduceOp::kMax));
  if (!local.ok()) return local;
  if (flag != 0)
    return Status::InvalidArgument("rank ", flag - 1, " rejected ", what,
                                   " (its error says why); no rank changed any state");
  return Status::Ok();
}

Status EmbeddingCollection::Forward(const Batch& batch, float* out, size_t out_len) {
  if (pending_ != nullptr)
    return Status::InvalidUsage(
        "an input distribution is in flight; finish it with "
        "input_dist_wait and forward_distributed first");
  ScopedTimer total(&timings_.total_seconds);
  std::unique_ptr<RoutedBatch> rb = TakeSpare();
  Status local = RouteBatch(layout_, options_.bounds, batch, rb.get());
  Status s;
  {
    ScopedTimer t(&timings_.comm_seconds);
    s = ExchangeInput(layout_, *input_comm_, local, rb.get());
  }
  if (s.ok()) s = UnpackInput(layout_, rb.get());
  if (!s.ok()) {
    spare_ = std::move(rb);
    return s;
  }
  pending_ = std::move(rb);
  pending_ready_ = true;
  return ForwardDistributed(out, out_len);
}

Status EmbeddingCollection::StartInputDist(const Batch& batch) {
  if (pending_ != nullptr)
    return Status::InvalidUsage(
        "an input distribution is already in flight; call "
        "input_dist_wait and forward_distributed first");
  ScopedTimer total(&timings_.total_seconds);
  std::unique_ptr<RoutedBatch> rb = TakeSpare();
  Status local = RouteBatch(layout_, options_.bounds, batch, rb.get());
  if (!local.ok()) {
    // The rejecting rank takes part in the count exchange so its peers' waits fail too.
    Status s = ExchangeInput(layout_, *input_comm_, local, rb.get());
    spare_ = std::move(rb);
    return s;
  }
  pending_ = std::move(rb);
  pending_ready_ = false;
  RoutedBatch* p = pending_.get();
  worker_ = std::thread([this, p] {
    Status s;
    try {
      s = ExchangeInput(layout_, *input_comm_, Status::Ok(), p);
      if (s.ok()) s = UnpackInput(layout_, p);
    } catch (const StatusError& e) {
      s = e.status();
    } catch (const std::exception& e) {
      s = Status::Internal("input distribution thread: ", e.what());
    }
    worker_status_ = s;
  });
  return Status::Ok();
}

Status EmbeddingCollection::WaitInputDist() {
  if (pending_ == nullptr) return Status::InvalidUsage("no input distribution was started");
  if (pending_ready_) return Status::Ok();
  ScopedTimer total(&timings_.total_seconds);
  {
    ScopedTimer t(&timings_.comm_seconds);
    worker_.join();
  }
  if (!worker_status_.ok()) {
    spare_ = std::move(pending_);
    return worker_status_;
  }
  pending_ready_ = true;
  return Status::Ok();
}

Status EmbeddingCollection::ForwardDistributed(float* out, size_t out_len) {
  if (pending_ == nullptr || !pending_ready_)
    return Status::InvalidUsage(pending_ == nullptr
                                    ? "no input distribution was started"
                                    : "call input_dist_wait before forward_distributed");
  ScopedTimer total(&timings_.total_seconds);
  std::unique_ptr<RoutedBatch> rb = std::move(pending_);
  pending_ready_ = false;
  const size_t rows = static_cast<size_t>(layout_.sequence ? rb->num_values : rb->batch_size);
  const size_t need = rows * static_cast<size_t>(layout_.output_dim);
  Status local;
  if (out_len != need)
    local = Status::InvalidArgument(
        "out_len is ", out_len, " but this batch needs ", need,
        layout_.sequence ? " (num_values x dim)" : " (batch_size x output_dim)");
  else if (need > 0 && out == nullptr)
    local = Status::InvalidArgument("out must not be NULL");
  // The output exchange is collective: a rank with a bad output buffer still takes part.
  Status s = LookupAndReturn(*rb);
  if (!s.ok() || !local.ok()) {
    spare_ = std::move(rb);
    return s.ok() ? local : s;
  }
  Combine(*rb, out);
  spare_ = std::move(current_);
  current_ = std::move(rb);
  current_consumed_ = false;
  ++timings_.forwards;
  return Status::Ok();
}

Status EmbeddingCollection::LookupAndReturn(RoutedBatch& rb) {
  staging_.resize(rb.staging_size);
  for (size_t i = 0; i < layout_.local.size(); ++i) {
    const ShardBags& sb = rb.shards[i];
    if (sb.num_bags == 0) continue;
    const LocalShard& ls = layout_.local[i];
    const kernels::WeightsView w = View(ls);
    const float* bw = sb.weights.empty() ? nullptr : sb.weights.data();
    float* dst = staging_.data() + sb.staging_offset;
    if (layout_.sequence) {
      kernels::SequenceLookup(w, sb.rows.data(), bw, sb.num_bags, dst, ls.cols, pool());
    } else {
      kernels::Bags bags{sb.offsets.data(), sb.num_bags, sb.rows.data(), bw};
      kernels::PooledLookup(w, bags, dst, ls.cols, pool());
    }
  }
  size_t send_total = 0, recv_total = 0;
  for (size_t v : rb.ret_floats_to) send_total += v;
  for (size_t v : rb.ret_floats_from) recv_total += v;
  ret_send_.resize(send_total);
  ret_recv_.resize(recv_total);
  for (const Segment& seg : rb.segments) {
    const int32_t cols = layout_.local[seg.local].cols;
    const float* src = staging_.data() + rb.shards[seg.local].staging_offset +
                       static_cast<size_t>(seg.bag_begin) * cols;
    std::memcpy(ret_send_.data() + seg.buf_offset, src,
                sizeof(float) * static_cast<size_t>(seg.count) * cols);
  }
  ScopedTimer t(&timings_.comm_seconds);
  return comm_->AllToAllV(ret_send_.data(), rb.ret_floats_to, ret_recv_.data(), rb.ret_floats_from,
                          DType::kFloat32);
}

void EmbeddingCollection::Combine(const RoutedBatch& rb, float* out) {
  const int64_t D = layout_.output_dim;
  const size_t rows = static_cast<size_t>(layout_.sequence ? rb.num_values : rb.batch_size);
  if (rows > 0) std::memset(out, 0, sizeof(float) * rows * static_cast<size_t>(D));
  // Partials of row shards add up in unit order: fixed, so results do not depend on timing.
  const float* src = ret_recv_.data();
  size_t k = 0;
  for (int32_t d = 0; d < layout_.world; ++d) {
    for (int32_t u : layout_.units_to_rank[d]) {
      const Unit& unit = layout_.units[u];
      const int64_t col = layout_.pairs[unit.pair].out_offset + unit.col_offset;
      for (int64_t j = 0; j < rb.ret_count[u]; ++j, ++k) {
        float* dst = out + rb.ret_target[k] * D + col;
        for (int32_t c = 0; c < unit.cols; ++c) dst[c] += src[c];
        src += unit.cols;
      }
    }
  }
  const int64_t B = rb.batch_size;
  for (size_t i = 0; i < layout_.dp_pairs.size(); ++i) {
    const Pair& pair = layout_.pairs[layout_.dp_pairs[i]];
    const LocalShard& ls = layout_.local[layout_.tables[pair.table].shard_local[layout_.rank]];
    const kernels::WeightsView w = View(ls);
    const int64_t* offsets = rb.dp_offsets.data() + rb.dp_offsets_begin[i];
    const float* bw = rb.dp_weights.empty() ? nullptr : rb.dp_weights.data();
    if (!layout_.sequence) {
      kernels::Bags bags{offsets, B, rb.dp_rows.data(), bw};
      kernels::PooledLookup(w, bags, out + pair.out_offset, D, pool());
      continue;
    }
    const int64_t first = offsets[0];
    const int64_t n = offsets[B] - first;
    for (int64_t j = 0; j < n; ++j) {
      float* dst = out + rb.dp_pos[first + j] * D;
      ReadRow(ls, rb.dp_rows[first + j], dst);
      if (bw == nullptr) continue;
      const float scale = bw[first + j];
      for (int32_t c = 0; c < ls.cols; ++c) dst[c] *= scale;
    }
  }
  if (layout_.sequence) return;
  for (size_t p = 0; p < layout_.pairs.size(); ++p) {
    const Pair& pair = layout_.pairs[p];
    if (!pair.mean) continue;
    const int32_t dim = layout_.plan->tables[pair.table].dim;
    for (int64_t b = 0; b < B; ++b) {
      const float div = rb.mean_div[p * B + b];
      float* dst = out + b * D + pair.out_offset;
      for (int32_t c = 0; c < dim; ++c) dst[c] = div != 0.0f ? dst[c] / div : 0.0f;
    }
  }
}

Status EmbeddingCollection::SetLearningRate(float lr) {
  optim::OptimizerConfig c = optim_;
  c.learning_rate = lr;
  SR_RETURN_IF_ERROR(optim::ValidateConfig(c));
  optim_ = c;
  return Status::Ok();
}

std::vector<StateInfo> EmbeddingCollection::States() const {
  std::vector<StateInfo> out;
  for (const auto& s : layout_.state_specs) out.push_back({s.name, s.row_wise});
  return out;
}

}  // namespace shardrec::embedding
