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
  SR_RETURN_IF_ERROR(fwd_.io.Reserve(device_, bytes, "the return message on the device", stream_));
  SR_RETURN_IF_ERROR(staging_.Begin());
  SR_RETURN_IF_ERROR(QueueLookups(rb, nullptr, 0, nullptr));
  SR_RETURN_IF_ERROR(staging_.Download(send, fwd_.io.data(), bytes));
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
  SR_RETURN_IF_ERROR(fwd_.io.Reserve(device_, bytes, "the return message on the device", stream_));
  SR_RETURN_IF_ERROR(a2a_recv_.Reserve(device_, sizeof(float) * recv_floats,
                                       "the received return message on the device", stream_));
  SR_RETURN_IF_ERROR(staging_.Begin());
  auto* io = fwd_.io.as<float>();
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
  fwd_.BuildCombine(rb);
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
      {fwd_.BagOffsets().data(), sizeof(int64_t) * fwd_.BagOffsets().size()},
      {fwd_.BagIds().data(), sizeof(int64_t) * fwd_.BagIds().size()},
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
  SR_RETURN_IF_ERROR(fwd_.io.Reserve(device_, sizeof(float) * rows_floats,
                                     "the return message on the device", stream_));
  SR_RETURN_IF_ERROR(
      fwd_.out.Reserve(device_, sizeof(float) * out_floats, "the output on the device", stream_));
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
  auto* io = fwd_.io.as<float>();
  launched_ = true;
  if (x != nullptr) {
    // Behind the lookups: the travelling part of fwd_.io goes out, the others' rows land behind it.
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
        rt->MemsetAsync(device_, fwd_.out.data(), 0, sizeof(float) * out_floats, stream_));
  fwd_.jobs.clear();
  fwd_.AppendCombineJobs(io, rows_floats, reinterpret_cast<const int64_t*>(dev[0]),
                         reinterpret_cast<const int64_t*>(dev[1]), D, fwd_.out.as<float>(),
                         &fwd_.jobs);
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
        fwd_.jobs.push_back(
            kernels::LookupJob{params_->View(ls),
                               {d_offsets + begin, B, d_rows, d_weights, pair.out_offset},
                               fwd_.out.as<float>(),
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
        fwd_.jobs.push_back(kernels::LookupJob{
            params_->View(ls),
            {nullptr, k - j, d_rows + j, d_weights != nullptr ? d_weights + j : nullptr,
             rb.dp_pos[j] * D + pair.out_offset},
            fwd_.out.as<float>(),
            D});
        j = k;
      }
    }
  }
  if (!fwd_.jobs.empty()) SR_RETURN_IF_ERROR(dk::Lookup(ctx_, fwd_.jobs, status_.data()));
  if (divide) {
    const auto* div = reinterpret_cast<const float*>(dev[5]);
    std::vector<kernels::MeanJob> mean_jobs;
    for (size_t p = 0; p < l.pairs.size(); ++p) {
      const Pair& pair = l.pairs[p];
      if (pair.mean)
        mean_jobs.push_back(kernels::MeanJob{pair.out_offset, l.plan->tables[pair.table].dim,
                                             div + static_cast<int64_t>(p) * B});
    }
    SR_RETURN_IF_ERROR(dk::DivideMeans(ctx_, fwd_.out.as<float>(), B, D, mean_jobs));
  }
  if (out_floats > 0 && !out.on_device && !out.discard)
    SR_RETURN_IF_ERROR(staging_.Download(out.data, fwd_.out.data(), sizeof(float) * out_floats));
  if (ordered)
    SR_RETURN_IF_ERROR(rt->MemcpyAsync(device_, out.data, fwd_.out.data(),
                                       sizeof(float) * out_floats, core::CopyKind::kDeviceToDevice,
                                       stream_));
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
  SR_RETURN_IF_ERROR(fwd_.dp_ids.Reserve(device_, DeviceStaging::PackedBytes(p, 3),
                                         "the data-parallel ids on the device", stream_));
  SR_RETURN_IF_ERROR(
      fwd_.dp_out.Reserve(device_, sizeof(float) * out_floats, "data-parallel rows", stream_));
  SR_RETURN_IF_ERROR(staging_.Begin());
  size_t at[3] = {};
  SR_RETURN_IF_ERROR(staging_.Upload(fwd_.dp_ids.data(), p, 3, at));
  auto* dev = fwd_.dp_ids.as<uint8_t>();
  const auto* d_offsets = reinterpret_cast<const int64_t*>(dev + at[0]);
  const auto* d_rows = reinterpret_cast<const int64_t*>(dev + at[1]);
  const float* d_weights =
      rb.dp_weights.empty() ? nullptr : reinterpret_cast<const float*>(dev + at[2]);
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  launched_ = true;
  SR_RETURN_IF_ERROR(
      rt->MemsetAsync(device_, fwd_.dp_out.data(), 0, sizeof(float) * out_floats, stream_));
  fwd_.jobs.clear();
  for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
    const Pair& pair = l.pairs[l.dp_pairs[i]];
    const LocalShard& ls = l.local[l.tables[pair.table].shard_local[l.rank]];
    const size_t begin = rb.dp_offsets_begin[i];
    if (!l.sequence) {
      fwd_.jobs.push_back(
          kernels::LookupJob{params_->View(ls),
                             {d_offsets + begin, B, d_rows, d_weights, pair.out_offset},
                             fwd_.dp_out.as<float>(),
                             D});
      continue;
    }
    const int64_t first = rb.dp_offsets[begin];
    const int64_t n = rb.dp_offsets[begin + B] - first;
    if (n == 0) continue;
    fwd_.jobs.push_back(kernels::LookupJob{
        params_->View(ls),
        {nullptr, n, d_rows + first, d_weights != nullptr ? d_weights + first : nullptr, first * D},
        fwd_.dp_out.as<float>(),
        D});
  }
  if (!fwd_.jobs.empty()) SR_RETURN_IF_ERROR(dk::Lookup(ctx_, fwd_.jobs, status_.data()));
  fwd_.dp_host.resize(out_floats);
  SR_RETURN_IF_ERROR(
      staging_.Download(fwd_.dp_host.data(), fwd_.dp_out.data(), sizeof(float) * out_floats));
  SR_RETURN_IF_ERROR(EndPhase("device data-parallel lookup"));
  for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
    const Pair& pair = l.pairs[l.dp_pairs[i]];
    const int32_t dim = l.plan->tables[pair.table].dim;
    const size_t begin = rb.dp_offsets_begin[i];
    if (!l.sequence) {
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(out + b * D + pair.out_offset, fwd_.dp_host.data() + b * D + pair.out_offset,
                    sizeof(float) * dim);
      continue;
    }
    for (int64_t j = rb.dp_offsets[begin]; j < rb.dp_offsets[begin + B]; ++j)
      std::memcpy(out + rb.dp_pos[j] * D, fwd_.dp_host.data() + j * D, sizeof(float) * dim);
  }
  return Status::Ok();
}

}  // namespace shardrec::embedding
