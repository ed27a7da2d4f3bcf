// The device step's forward phases (step.h): lookups into the return message staged or
// exchanged between device buffers, and the combine of the returned rows (with the data-parallel
// lookups) on the device.
#include <algorithm>
#include <cstring>
#include <span>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/gpu/dispatch.h"
#include "impl/embedding/gpu/sizing.h"
#include "impl/embedding/gpu/step.h"

namespace shardrec::embedding {

namespace dk = kernels::device;

Status DeviceStep::LookupToSend(const RoutedBatch& rb, float* send) {
  size_t runs = 0;
  for (const ShardRuns& sr : rb.shards) runs += sr.runs.size();
  if (runs == 0) return Status::Ok();
  const size_t bytes = sizeof(float) * rb.ret_floats_total;
  // Device buffers first: one that grows waits for the stream, which must not happen while this
  // phase's copies are queued from the staging block.
  SR_RETURN_IF_ERROR(ReserveRuns(rb, 0, "the batch's ids on the device"));
  SR_RETURN_IF_ERROR(io_.Reserve(device_, bytes, "the return message on the device", stream_));
  SR_RETURN_IF_ERROR(staging_.Begin());
  SR_RETURN_IF_ERROR(QueueLookups(rb, nullptr, 0, nullptr));
  SR_RETURN_IF_ERROR(staging_.Download(send, io_.data(), bytes));
  // Routing checked every id on the host, so a row outside its shard here is an internal error.
  return EndPhase("device lookup");
}

Status DeviceStep::LookupExchange(const RoutedBatch& rb, const DeviceExchange& x, float* recv,
                                  float* send) {
  size_t runs = 0;
  for (const ShardRuns& sr : rb.shards) runs += sr.runs.size();
  size_t recv_floats = 0;
  for (size_t c : x.recv_counts) recv_floats += c;
  const size_t bytes = sizeof(float) * rb.ret_floats_total;
  if (rb.device_input) {
    SR_RETURN_IF_ERROR(ReserveDeviceInput(rb));
  } else if (runs > 0) {
    SR_RETURN_IF_ERROR(ReserveRuns(rb, 0, "the batch's ids on the device"));
  }
  SR_RETURN_IF_ERROR(io_.Reserve(device_, bytes, "the return message on the device", stream_));
  SR_RETURN_IF_ERROR(a2a_recv_.Reserve(device_, sizeof(float) * recv_floats,
                                       "the received return message on the device", stream_));
  SR_RETURN_IF_ERROR(staging_.Begin());
  auto* io = io_.as<float>();
  if (rb.device_input) {
    // Sequence runs have no bag offsets: nothing to unpack, the ids are read where they land.
    SR_RETURN_IF_ERROR(QueueDeviceInput(rb, x, nullptr, nullptr));
    if (runs > 0) SR_RETURN_IF_ERROR(QueueLookupJobs());
  } else if (runs > 0) {
    SR_RETURN_IF_ERROR(QueueLookups(rb, nullptr, 0, nullptr));
  }
  // Behind the lookups on the stream: the message leaves from the device block they wrote.
  comm::CallOptions o;
  o.stream = stream_;
  launched_ = true;
  SR_RETURN_IF_ERROR(
      x.comm->AllToAllV(io, x.send_counts, a2a_recv_.data(), x.recv_counts, DType::kFloat32, o));
  if (recv_floats > 0)
    SR_RETURN_IF_ERROR(staging_.Download(recv, a2a_recv_.data(), sizeof(float) * recv_floats));
  const size_t self = rb.ret_floats_total - rb.ret_self_offset;
  if (self > 0)
    SR_RETURN_IF_ERROR(staging_.Download(send + rb.ret_self_offset, io + rb.ret_self_offset,
                                         sizeof(float) * self));
  SR_RETURN_IF_ERROR(EndPhase(runs > 0 ? "device lookup" : nullptr));
  // NCCL reports a peer that failed during the exchange here, not at the enqueue.
  SR_RETURN_IF_ERROR(x.comm->AsyncError());
  return rb.device_input ? CheckUnpack(rb) : Status::Ok();
}

void DeviceStep::BuildCombine(const RoutedBatch& rb) {
  const Layout& l = *layout_;
  const size_t G = groups_.size();
  // Each group's output rows [lo, hi): those its returned rows aim at (a unit's targets
  // increase). A sequence group's rows are positions of its one feature, so bags never cover
  // another feature's rows (nor the data-parallel columns written in the same launch).
  group_lo_.assign(G, INT64_MAX);
  group_hi_.assign(G, 0);
  const int64_t* targets = rb.ret_target.data();
  for (int32_t d = 0; d < l.world; ++d)
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count > 0) {
        const auto g = static_cast<size_t>(unit_group_[u]);
        group_lo_[g] = std::min(group_lo_[g], targets[0]);
        group_hi_[g] = std::max(group_hi_[g], targets[count - 1] + 1);
      }
      targets += count;
    }
  group_begin_.assign(G + 1, 0);
  for (size_t g = 0; g < G; ++g) {
    const int64_t rows = group_hi_[g] > group_lo_[g] ? group_hi_[g] - group_lo_[g] : 0;
    group_begin_[g + 1] = group_begin_[g] + (rows > 0 ? rows + 1 : 0);
  }
  // Bag sizes first (row r of group g counted at begin + (r - lo) + 1), then offsets, then every
  // returned row appended to its bag in (rank, unit) order: CombineOutput's order of addition.
  comb_offsets_.assign(static_cast<size_t>(group_begin_[G]), 0);
  targets = rb.ret_target.data();
  for (int32_t d = 0; d < l.world; ++d)
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;  // its group may have no bags: no offset into empty storage
      const auto g = static_cast<size_t>(unit_group_[u]);
      int64_t* bags = comb_offsets_.data() + group_begin_[g] + 1 - group_lo_[g];
      for (int64_t k = 0; k < count; ++k) ++bags[targets[k]];
      targets += count;
    }
  int64_t total = 0;
  comb_cursor_.resize(comb_offsets_.size());
  for (size_t g = 0; g < G; ++g) {
    const int64_t n = group_begin_[g + 1] - group_begin_[g];
    if (n == 0) continue;
    int64_t* o = comb_offsets_.data() + group_begin_[g];
    o[0] = total;
    for (int64_t b = 0; b + 1 < n; ++b) {
      o[b + 1] += o[b];
      comb_cursor_[static_cast<size_t>(group_begin_[g] + b)] = o[b];
    }
    total = o[n - 1];
  }
  comb_ids_.resize(static_cast<size_t>(total));
  targets = rb.ret_target.data();
  auto others = static_cast<int64_t>(rb.ret_floats_total);
  auto self = static_cast<int64_t>(rb.ret_self_offset);
  for (int32_t d = 0; d < l.world; ++d) {
    int64_t& at = d == l.rank ? self : others;
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;
      const int32_t cols = l.units[u].cols;
      const auto g = static_cast<size_t>(unit_group_[u]);
      int64_t* cursor = comb_cursor_.data() + group_begin_[g] - group_lo_[g];
      for (int64_t k = 0; k < count; ++k) comb_ids_[cursor[targets[k]]++] = at + k * cols;
      targets += count;
      at += count * cols;
    }
  }
}

Status DeviceStep::LookupCombine(const RoutedBatch& rb, const DeviceExchange* x,
                                 const CombineOut& out) {
  const Layout& l = *layout_;
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  // Output rows: samples, or (sequence) ids.
  const int64_t R = l.sequence ? rb.num_values : B;
  size_t runs = 0;
  for (const ShardRuns& sr : rb.shards) runs += sr.runs.size();
  size_t recv_floats = 0;
  if (x != nullptr)
    for (size_t c : x->recv_counts) recv_floats += c;
  const size_t rows_floats = rb.ret_floats_total + recv_floats;
  const auto out_floats = static_cast<size_t>(R * D);
  BuildCombine(rb);
  const bool dp = !l.dp_pairs.empty() && B > 0 && !rb.dp_rows.empty();
  bool means = false;
  for (const Pair& pair : l.pairs) means = means || pair.mean;
  // A device output is divided here: the divisors go up too.
  const bool divide = out.on_device && means && B > 0;
  // The device input (ids exchanged between device buffers) needs the exchange.
  const bool dev_in = rb.device_input;
  if (dev_in && x == nullptr) return Status::Internal("LookupCombine: device input without x");
  // The phase's uploads ride with the runs: the combine's bags, the data-parallel ids; with the
  // device input, the unpack's tables instead of the runs.
  DeviceStaging::Piece extra[8] = {
      {comb_offsets_.data(), sizeof(int64_t) * comb_offsets_.size()},
      {comb_ids_.data(), sizeof(int64_t) * comb_ids_.size()},
      {dp ? rb.dp_offsets.data() : nullptr, dp ? sizeof(int64_t) * rb.dp_offsets.size() : 0},
      {dp ? rb.dp_rows.data() : nullptr, dp ? sizeof(int64_t) * rb.dp_rows.size() : 0},
      {dp ? rb.dp_weights.data() : nullptr, dp ? sizeof(float) * rb.dp_weights.size() : 0},
      {divide ? rb.mean_div.data() : nullptr, divide ? sizeof(float) * rb.mean_div.size() : 0},
      {},
      {}};
  size_t num_extra = 6;
  // Device buffers first: one that grows waits for the stream.
  if (dev_in) {
    SR_RETURN_IF_ERROR(ReserveDeviceInput(rb));
    BuildUnpackTables(rb);
    if (!rb.unpack.empty()) {
      extra[6] = {unpack_runs_.data(), sizeof(unpack_runs_[0]) * unpack_runs_.size()};
      extra[7] = {unpack_cells_.data(), sizeof(int64_t) * unpack_cells_.size()};
    }
    num_extra = 8;
    SR_RETURN_IF_ERROR(runs_buf_.Reserve(device_, DeviceStaging::PackedBytes(extra, num_extra),
                                         "the combine's bags on the device", stream_));
  } else {
    SR_RETURN_IF_ERROR(ReserveRuns(rb, extra, 6, "the batch's ids on the device"));
  }
  SR_RETURN_IF_ERROR(io_.Reserve(device_, sizeof(float) * rows_floats,
                                 "the return message on the device", stream_));
  SR_RETURN_IF_ERROR(
      out_.Reserve(device_, sizeof(float) * out_floats, "the output on the device", stream_));
  // The whole phase's traffic in the pinned block at once: a block that fills up mid-phase drains
  // (a wait) and starts over, so without this it would do so in every step.
  DeviceStaging::Piece all[3 + 8 + 1];
  size_t num_all = 0;
  if (dev_in) {
    all[num_all++] = {rb.send.data(), rb.send.size()};
    all[num_all++] = {nullptr, sizeof(unpack_bad_host_)};
  } else {
    RunPieces(rb, all);
    num_all = 3;
  }
  for (size_t k = 0; k < num_extra; ++k) all[num_all++] = extra[k];
  all[num_all++] = {nullptr, out.on_device ? 0 : sizeof(float) * out_floats};
  SR_RETURN_IF_ERROR(staging_.Reserve(DeviceStaging::PackedBytes(all, num_all)));
  SR_RETURN_IF_ERROR(staging_.Begin());
  // Behind the phases still in flight there must be room for this one's traffic (and a deferred
  // status block): else the block drains now, not half-way.
  SR_RETURN_IF_ERROR(staging_.MakeRoom(DeviceStaging::PackedBytes(all, num_all) + 64));
  // A device output is copied on the step's stream within this phase, behind the caller's work
  // on out.stream (no host wait).
  const bool ordered = out.on_device && out_floats > 0;
  if (ordered && out.stream != stream_)
    SR_RETURN_IF_ERROR(dk::StreamWaitStream(device_, stream_, out.stream));
  uint8_t* dev[8] = {};
  if (dev_in) {
    SR_RETURN_IF_ERROR(UploadExtras(extra, num_extra, dev));
    SR_RETURN_IF_ERROR(QueueDeviceInput(rb, *x, dev[6], dev[7]));
    if (runs > 0) SR_RETURN_IF_ERROR(QueueLookupJobs());
  } else if (runs > 0) {
    SR_RETURN_IF_ERROR(QueueLookups(rb, extra, 6, dev));
  } else {
    SR_RETURN_IF_ERROR(UploadRuns(rb, extra, 6, dev));
  }
  auto* io = io_.as<float>();
  launched_ = true;
  if (x != nullptr) {
    // Behind the lookups: the travelling part of io_ goes out, the others' rows land behind it.
    comm::CallOptions o;
    o.stream = stream_;
    SR_RETURN_IF_ERROR(x->comm->AllToAllV(io, x->send_counts, io + rb.ret_floats_total,
                                          x->recv_counts, DType::kFloat32, o));
  }
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  // Groups without a returned row, empty bags of the rest and (sequence) rows of skipped ids stay
  // as zeroed here, as the host combine leaves them.
  if (out_floats > 0)
    SR_RETURN_IF_ERROR(
        rt->MemsetAsync(device_, out_.data(), 0, sizeof(float) * out_floats, stream_));
  jobs_.clear();
  const auto* comb_offsets = reinterpret_cast<const int64_t*>(dev[0]);
  const auto* comb_ids = reinterpret_cast<const int64_t*>(dev[1]);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t n = group_begin_[g + 1] - group_begin_[g];
    const int32_t cols = groups_[g].cols;
    if (n == 0 || rows_floats < static_cast<size_t>(cols)) continue;
    // The returned rows as a table of stride 1: row id = float offset in io_; bag r is output
    // row lo + r.
    const kernels::WeightsView rows{io, DType::kFloat32,
                                    static_cast<int64_t>(rows_floats) - cols + 1, cols, 1};
    jobs_.push_back(kernels::LookupJob{rows,
                                       {comb_offsets + group_begin_[g], n - 1, comb_ids, nullptr,
                                        group_lo_[g] * D + groups_[g].col},
                                       out_.as<float>(),
                                       D});
  }
  if (dp) {
    const auto* d_offsets = reinterpret_cast<const int64_t*>(dev[2]);
    const auto* d_rows = reinterpret_cast<const int64_t*>(dev[3]);
    const float* d_weights =
        rb.dp_weights.empty() ? nullptr : reinterpret_cast<const float*>(dev[4]);
    for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
      const Pair& pair = l.pairs[l.dp_pairs[i]];
      const LocalShard& ls = l.local[l.tables[pair.table].shard_local[l.rank]];
      const size_t begin = rb.dp_offsets_begin[i];
      if (!l.sequence) {
        jobs_.push_back(
            kernels::LookupJob{params_->View(ls),
                               {d_offsets + begin, B, d_rows, d_weights, pair.out_offset},
                               out_.as<float>(),
                               D});
        continue;
      }
      // A sequence pair's ids go to their own output rows (positions of its feature, in
      // order): each run of consecutive positions is one sequence job, which writes W[row]
      // (times the weight) as the host's ReadRow does.
      const int64_t first = rb.dp_offsets[begin], last = rb.dp_offsets[begin + B];
      for (int64_t j = first; j < last;) {
        int64_t k = j + 1;
        while (k < last && rb.dp_pos[k] == rb.dp_pos[k - 1] + 1) ++k;
        jobs_.push_back(kernels::LookupJob{
            params_->View(ls),
            {nullptr, k - j, d_rows + j, d_weights != nullptr ? d_weights + j : nullptr,
             rb.dp_pos[j] * D + pair.out_offset},
            out_.as<float>(),
            D});
        j = k;
      }
    }
  }
  if (!jobs_.empty()) SR_RETURN_IF_ERROR(dk::Lookup(ctx_, jobs_, status_.data()));
  if (divide) {
    const auto* div = reinterpret_cast<const float*>(dev[5]);
    std::vector<kernels::MeanJob> mean_jobs;
    for (size_t p = 0; p < l.pairs.size(); ++p) {
      const Pair& pair = l.pairs[p];
      if (pair.mean)
        mean_jobs.push_back(kernels::MeanJob{pair.out_offset, l.plan->tables[pair.table].dim,
                                             div + static_cast<int64_t>(p) * B});
    }
    SR_RETURN_IF_ERROR(dk::DivideMeans(ctx_, out_.as<float>(), B, D, mean_jobs));
  }
  if (out_floats > 0 && !out.on_device && !out.discard)
    SR_RETURN_IF_ERROR(staging_.Download(out.data, out_.data(), sizeof(float) * out_floats));
  if (ordered)
    SR_RETURN_IF_ERROR(rt->MemcpyAsync(device_, out.data, out_.data(), sizeof(float) * out_floats,
                                       core::CopyKind::kDeviceToDevice, stream_));
  if (out.async && out.on_device) {
    // Stream-ordered: the phase stays queued, its checks (the status block, the unpack's word,
    // the communicator's error) are made at the next wait, and the caller's later work on its
    // stream is ordered behind the copy into its view.
    SR_RETURN_IF_ERROR(EndPhaseDeferred("device lookup", x != nullptr ? x->comm : nullptr));
    if (dev_in && !rb.unpack.empty()) {
      deferred_.unpack = true;
      deferred_.unpack_sources.clear();
      for (const UnpackPlace& u : rb.unpack) deferred_.unpack_sources.push_back(u.source);
    }
    if (out.stream != stream_)
      SR_RETURN_IF_ERROR(dk::StreamWaitStream(device_, out.stream, stream_));
    return Status::Ok();
  }
  // Routing checked every id on the host, so a row outside its shard here is an internal error.
  SR_RETURN_IF_ERROR(EndPhase("device lookup"));
  // NCCL reports a peer that failed during the exchange here, not at the enqueue.
  if (x != nullptr) SR_RETURN_IF_ERROR(x->comm->AsyncError());
  if (dev_in) SR_RETURN_IF_ERROR(CheckUnpack(rb));
  return Status::Ok();
}

Status DeviceStep::LookupDataParallel(const RoutedBatch& rb, float* out) {
  const Layout& l = *layout_;
  if (l.dp_pairs.empty()) return Status::Ok();
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  // Pooled: [B, D] like the output, only the data-parallel columns written. Sequence: one row of
  // the table's width per id, in dp_rows order, scattered to the output rows on the host.
  const size_t out_floats =
      l.sequence ? rb.dp_rows.size() * static_cast<size_t>(D) : static_cast<size_t>(B * D);
  if (out_floats == 0) return Status::Ok();
  DeviceStaging::Piece p[3];
  p[0] = {rb.dp_offsets.data(), sizeof(int64_t) * rb.dp_offsets.size()};
  p[1] = {rb.dp_rows.data(), sizeof(int64_t) * rb.dp_rows.size()};
  p[2] = {rb.dp_weights.data(), sizeof(float) * rb.dp_weights.size()};
  SR_RETURN_IF_ERROR(dp_ids_.Reserve(device_, DeviceStaging::PackedBytes(p, 3),
                                     "the data-parallel ids on the device", stream_));
  SR_RETURN_IF_ERROR(
      dp_out_.Reserve(device_, sizeof(float) * out_floats, "data-parallel rows", stream_));
  SR_RETURN_IF_ERROR(staging_.Begin());
  size_t at[3] = {};
  SR_RETURN_IF_ERROR(staging_.Upload(dp_ids_.data(), p, 3, at));
  auto* dev = dp_ids_.as<uint8_t>();
  const auto* d_offsets = reinterpret_cast<const int64_t*>(dev + at[0]);
  const auto* d_rows = reinterpret_cast<const int64_t*>(dev + at[1]);
  const float* d_weights =
      rb.dp_weights.empty() ? nullptr : reinterpret_cast<const float*>(dev + at[2]);
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  launched_ = true;
  SR_RETURN_IF_ERROR(
      rt->MemsetAsync(device_, dp_out_.data(), 0, sizeof(float) * out_floats, stream_));
  jobs_.clear();
  for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
    const Pair& pair = l.pairs[l.dp_pairs[i]];
    const LocalShard& ls = l.local[l.tables[pair.table].shard_local[l.rank]];
    const size_t begin = rb.dp_offsets_begin[i];
    if (!l.sequence) {
      jobs_.push_back(kernels::LookupJob{params_->View(ls),
                                         {d_offsets + begin, B, d_rows, d_weights, pair.out_offset},
                                         dp_out_.as<float>(),
                                         D});
      continue;
    }
    const int64_t first = rb.dp_offsets[begin];
    const int64_t n = rb.dp_offsets[begin + B] - first;
    if (n == 0) continue;
    jobs_.push_back(kernels::LookupJob{
        params_->View(ls),
        {nullptr, n, d_rows + first, d_weights != nullptr ? d_weights + first : nullptr, first * D},
        dp_out_.as<float>(),
        D});
  }
  if (!jobs_.empty()) SR_RETURN_IF_ERROR(dk::Lookup(ctx_, jobs_, status_.data()));
  dp_host_.resize(out_floats);
  SR_RETURN_IF_ERROR(
      staging_.Download(dp_host_.data(), dp_out_.data(), sizeof(float) * out_floats));
  SR_RETURN_IF_ERROR(EndPhase("device data-parallel lookup"));
  for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
    const Pair& pair = l.pairs[l.dp_pairs[i]];
    const int32_t dim = l.plan->tables[pair.table].dim;
    const size_t begin = rb.dp_offsets_begin[i];
    if (!l.sequence) {
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(out + b * D + pair.out_offset, dp_host_.data() + b * D + pair.out_offset,
                    sizeof(float) * dim);
      continue;
    }
    for (int64_t j = rb.dp_offsets[begin]; j < rb.dp_offsets[begin + B]; ++j)
      std::memcpy(out + rb.dp_pos[j] * D, dp_host_.data() + j * D, sizeof(float) * dim);
  }
  return Status::Ok();
}

}  // namespace shardrec::embedding
