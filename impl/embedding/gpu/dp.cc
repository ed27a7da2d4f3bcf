// The data-parallel tables' backward on a GPU collection's device (dp.h).
#include "impl/embedding/gpu/dp.h"

#include <algorithm>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"

namespace shardrec::embedding {

namespace dk = kernels::device;
namespace sb = kernels::simt_body;

DpStaticTables MakeDpStaticTables(const Layout& l, const DpBlockLayout& at) {
  const auto& plan = *l.plan;
  DpStaticTables st;
  st.index_of.assign(plan.tables.size(), -1);
  st.key_first.assign(1, 0);
  for (int32_t t : l.dp_tables) {
    st.index_of[t] = static_cast<int32_t>(st.tables.size());
    sb::DpTable rec;
    rec.grad_at = static_cast<int64_t>(at.grad_at[t]);
    rec.touch_at = static_cast<int64_t>(at.touch_at[t]);
    rec.dim = plan.tables[t].dim;
    st.tables.push_back(rec);
    st.key_first.push_back(st.key_first.back() + plan.tables[t].rows);
  }
  return st;
}

void MakeDpPairs(const Layout& l, const DpStaticTables& st, const RoutedBatch& rb,
                 const int64_t* offsets, const float* mean_div, std::vector<sb::DpPair>* pairs,
                 std::vector<int64_t>* pair_first) {
  const int64_t B = rb.batch_size;
  pairs->clear();
  pair_first->clear();
  for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
    const int32_t p = l.dp_pairs[i];
    const Pair& pair = l.pairs[p];
    sb::DpPair rec;
    rec.offsets = offsets + rb.dp_offsets_begin[i];
    rec.div = pair.mean && mean_div != nullptr ? mean_div + static_cast<int64_t>(p) * B : nullptr;
    rec.col = pair.out_offset;
    rec.table = st.index_of[pair.table];
    pairs->push_back(rec);
    pair_first->push_back(rb.dp_offsets[rb.dp_offsets_begin[i]]);
  }
  pair_first->push_back(static_cast<int64_t>(rb.dp_rows.size()));
}

Status DeviceDataParallel::Init(const Layout* l, ParamStore* params, int device, Stream stream,
                                int64_t max_ids, size_t upload_bytes) {
  layout_ = l;
  params_ = params;
  device_ = device;
  stream_ = stream;
  ctx_ = ExecContext::Cuda(device, stream);
  if (l->dp_tables.empty()) return Status::Ok();
  at_ = MakeDpBlockLayout(*l);
  st_ = MakeDpStaticTables(*l, at_);
  for (int32_t p : l->dp_pairs) any_mean_ = any_mean_ || l->pairs[p].mean;
  stats_at_.clear();
  stats_floats_ = 0;
  const auto& plan = *l->plan;
  for (int32_t t : l->dp_tables) {
    stats_at_.push_back(stats_floats_);
    stats_floats_ += plan.tables[t].rows * l->tables[t].num_row_stats;
  }
  const int64_t keys = st_.key_first.back();
  const size_t dense = sizeof(float) * l->dp_grad_size;
  SR_RETURN_IF_ERROR(dense_.Reserve(device, dense, "the data-parallel gradients", stream));
  SR_RETURN_IF_ERROR(rows_out_.Reserve(device, sizeof(int64_t) * static_cast<size_t>(keys),
                                       "the data-parallel touched rows", stream));
  SR_RETURN_IF_ERROR(
      grads_out_.Reserve(device, dense, "the data-parallel touched rows' gradients", stream));
  SR_RETURN_IF_ERROR(counts_.Reserve(device, sizeof(int64_t) * st_.tables.size(),
                                     "the data-parallel row counts", stream));
  SR_RETURN_IF_ERROR(stats_.Reserve(device, sizeof(float) * static_cast<size_t>(stats_floats_),
                                    "the data-parallel row statistics", stream));
  if (max_ids > 0) {
    size_t ws = 0;
    SR_RETURN_IF_ERROR(dk::DpWorkspaceBytes(ctx_, max_ids, keys, &ws));
    SR_RETURN_IF_ERROR(workspace_.Reserve(device, ws, "the data-parallel workspace", stream));
    SR_RETURN_IF_ERROR(
        batch_.Reserve(device, upload_bytes, "the data-parallel ids on the device", stream));
  }
  // The static tables go up once.
  const DeviceStaging::Piece p[2] = {
      {st_.tables.data(), sizeof(sb::DpTable) * st_.tables.size()},
      {st_.key_first.data(), sizeof(int64_t) * st_.key_first.size()}};
  SR_RETURN_IF_ERROR(static_.Reserve(device, DeviceStaging::PackedBytes(p, 2),
                                     "the data-parallel tables", stream));
  DeviceStaging up;
  up.Init(device, stream);
  SR_RETURN_IF_ERROR(up.Reserve(DeviceStaging::PackedBytes(p, 2)));
  SR_RETURN_IF_ERROR(up.Begin());
  size_t at[2] = {};
  SR_RETURN_IF_ERROR(up.Upload(static_.data(), p, 2, at));
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  SR_RETURN_IF_ERROR(rt->StreamWait(device, stream, core::kDeviceWaitMs));
  up.Deliver();
  return Status::Ok();
}

void DeviceDataParallel::Pieces(const RoutedBatch& rb, const float* host_grad,
                                size_t host_grad_floats, DeviceStaging::Piece* p) const {
  const size_t pairs = layout_->dp_pairs.size();
  p[0] = {nullptr, sizeof(sb::DpPair) * pairs};
  p[1] = {nullptr, sizeof(int64_t) * (pairs + 1)};
  p[2] = {rb.dp_offsets.data(), sizeof(int64_t) * rb.dp_offsets.size()};
  p[3] = {rb.dp_rows.data(), sizeof(int64_t) * rb.dp_rows.size()};
  p[4] = {rb.dp_weights.data(), sizeof(float) * rb.dp_weights.size()};
  p[5] = {rb.dp_pos.data(), sizeof(int64_t) * rb.dp_pos.size()};
  p[6] = {any_mean_ ? rb.mean_div.data() : nullptr,
          any_mean_ ? sizeof(float) * rb.mean_div.size() : 0};
  p[7] = {host_grad, host_grad != nullptr ? sizeof(float) * host_grad_floats : 0};
}

size_t DeviceDataParallel::UploadBytes(const RoutedBatch& rb, size_t host_grad_floats) const {
  if (!active()) return 0;
  DeviceStaging::Piece p[kPieces];
  Pieces(rb, nullptr, 0, p);
  p[7].bytes = sizeof(float) * host_grad_floats;
  return DeviceStaging::PackedBytes(p, kPieces);
}

Status DeviceDataParallel::Reserve(const RoutedBatch& rb, size_t host_grad_floats) {
  if (!active()) return Status::Ok();
  SR_RETURN_IF_ERROR(batch_.Reserve(device_, UploadBytes(rb, host_grad_floats),
                                    "the data-parallel ids on the device", stream_));
  size_t ws = 0;
  SR_RETURN_IF_ERROR(dk::DpWorkspaceBytes(ctx_, static_cast<int64_t>(rb.dp_rows.size()),
                                          st_.key_first.back(), &ws));
  return workspace_.Reserve(device_, ws, "the data-parallel workspace", stream_);
}

Status DeviceDataParallel::Upload(DeviceStaging& staging, const RoutedBatch& rb,
                                  const float* host_grad, size_t host_grad_floats) {
  if (!active()) return Status::Ok();
  const Layout& l = *layout_;
  // The pieces' places in the batch block (DeviceStaging's packing: 16-byte aligned, in order),
  // so the pair records can point at the offsets and divisors that ride in the same copy.
  DeviceStaging::Piece p[kPieces];
  Pieces(rb, host_grad, host_grad_floats, p);
  size_t at[kPieces] = {};
  for (size_t k = 1; k < kPieces; ++k) at[k] = at[k - 1] + DeviceStaging::PackedBytes(&p[k - 1], 1);
  auto* base = batch_.as<uint8_t>();
  const auto* d_offsets = reinterpret_cast<const int64_t*>(base + at[2]);
  const auto* d_div = any_mean_ ? reinterpret_cast<const float*>(base + at[6]) : nullptr;
  MakeDpPairs(l, st_, rb, d_offsets, d_div, &pairs_, &pair_first_);
  p[0].host = pairs_.data();
  p[1].host = pair_first_.data();
  size_t got[kPieces] = {};
  SR_RETURN_IF_ERROR(staging.Upload(base, p, kPieces, got));
  const auto* statics = static_.as<uint8_t>();
  const DeviceStaging::Piece sp[1] = {{nullptr, sizeof(sb::DpTable) * st_.tables.size()}};
  sb::DpParams& d = params_dev_;
  d = sb::DpParams{};
  host_grad_ = host_grad != nullptr;
  d.grad = host_grad_ ? reinterpret_cast<const float*>(base + at[7]) : nullptr;
  d.stride = l.output_dim;
  d.batch_size = rb.batch_size;
  d.num_pairs = static_cast<int64_t>(l.dp_pairs.size());
  d.pairs = reinterpret_cast<const sb::DpPair*>(base + at[0]);
  d.pair_first = reinterpret_cast<const int64_t*>(base + at[1]);
  d.num_ids = static_cast<int64_t>(rb.dp_rows.size());
  d.rows = reinterpret_cast<const int64_t*>(base + at[3]);
  d.weights = rb.dp_weights.empty() ? nullptr : reinterpret_cast<const float*>(base + at[4]);
  d.pos = rb.dp_pos.empty() ? nullptr : reinterpret_cast<const int64_t*>(base + at[5]);
  d.num_tables = static_cast<int64_t>(st_.tables.size());
  d.tables = reinterpret_cast<const sb::DpTable*>(statics);
  d.key_first = reinterpret_cast<const int64_t*>(statics + DeviceStaging::PackedBytes(sp, 1));
  d.num_keys = st_.key_first.back();
  d.dense = dense_.as<float>();
  d.dense_floats = static_cast<int64_t>(l.dp_grad_size);
  d.rows_out = rows_out_.as<int64_t>();
  d.grads_out = grads_out_.as<float>();
  d.counts_out = counts_.as<int64_t>();
  return Status::Ok();
}

Status DeviceDataParallel::Queue(const float* grad_dev, comm::Communicator* comm, int32_t comm_size,
                                 const int64_t* gate,
                                 const std::vector<optim::OptimizerConfig>& configs, int64_t step) {
  if (!active()) return Status::Ok();
  const Layout& l = *layout_;
  sb::DpParams& d = params_dev_;
  if (!host_grad_) d.grad = grad_dev;
  d.scale = 1.0f / static_cast<float>(comm_size);
  d.gate = gate;
  SR_RETURN_IF_ERROR(dk::DpStep(ctx_, d, sb::kDpAccumulate, workspace_.data(), workspace_.bytes()));
  if (comm != nullptr) {
    // Every rank's dense block summed in place, behind the accumulation on the stream.
    comm::CallOptions o;
    o.stream = stream_;
    SR_RETURN_IF_ERROR(comm->AllReduce(d.dense, d.dense, l.dp_grad_size, DType::kFloat32,
                                       comm::ReduceOp::kSum, o));
  }
  SR_RETURN_IF_ERROR(dk::DpStep(ctx_, d, sb::kDpCompact, workspace_.data(), workspace_.bytes()));
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  const auto& plan = *l.plan;
  for (size_t k = 0; k < l.dp_tables.size(); ++k) {
    const int32_t t = l.dp_tables[k];
    const int32_t local = l.tables[t].shard_local[l.rank];
    const int K = l.tables[t].num_row_stats;
    kernels::CountedRows rows;
    rows.rows = d.rows_out + st_.key_first[k];
    rows.grads = d.grads_out + st_.tables[k].grad_at;
    rows.count = d.counts_out + k;
    rows.max_rows = plan.tables[t].rows;
    optim::ShardParams params = params_->Params(local);
    float* stats = nullptr;
    if (K > 0) {
      // Zeroed first, as the host path's statistics are.
      stats = stats_.as<float>() + stats_at_[k];
      SR_RETURN_IF_ERROR(rt->MemsetAsync(
          device_, stats, 0, sizeof(float) * static_cast<size_t>(rows.max_rows * K), stream_));
      SR_RETURN_IF_ERROR(dk::RowPhaseCounted(ctx_, configs[t], step, plan.tables[t].dim, params,
                                             rows, stats, nullptr, 1));
    }
    SR_RETURN_IF_ERROR(dk::RowPhaseCounted(ctx_, configs[t], step, plan.tables[t].dim, params, rows,
                                           nullptr, stats, 2));
  }
  return Status::Ok();
}

}  // namespace shardrec::embedding
