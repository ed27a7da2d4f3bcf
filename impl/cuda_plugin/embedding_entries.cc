// Each entry makes its device current for the call (DeviceGuard: an index the driver does not
// know is an error here, before any kernel is enqueued), unmarshals, and runs the twin under
// Reported, so nothing throws across the boundary.
#include "impl/cuda_plugin/embedding_entries.h"

#include <cuda_runtime.h>

#include <vector>

#include "impl/core/exec.h"
#include "impl/cuda_plugin/cuda_util.h"
#include "impl/cuda_plugin/device_api.h"
#include "impl/cuda_plugin/plugin_status.h"
#include "impl/cuda_plugin/runtime_services.h"
#include "impl/embedding/gpu/plugin_structs.h"
#include "impl/embedding/kernels/cuda/kernels_cuda.h"

namespace shardrec::cuda_plugin::entry {
namespace {

namespace kcuda = embedding::kernels::cuda;
namespace abi = embedding::kernels::abi;
using embedding::kernels::BagRun;
using embedding::kernels::DeviceRuns;
using embedding::kernels::LookupJob;

// Runs body(ctx) with `device` current, reporting its Status (or an exception) into *st.
template <typename Body>
int32_t OnDevice(shardrec_plugin_status_t* st, const char* what, int32_t device, void* stream,
                 Body&& body) {
  return Reported(st, what, [&]() -> Status {
    DeviceGuard guard(RealDeviceApi());
    SR_RETURN_IF_ERROR(guard.Set(device));
    return body(ExecContext::Cuda(device, stream));
  });
}

}  // namespace

int32_t EmbStatusBytes(int32_t device, size_t* bytes, shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_status_bytes", device, nullptr, [&](const ExecContext&) -> Status {
    if (bytes == nullptr) return Status::InvalidArgument("bytes must not be NULL");
    *bytes = kcuda::StatusBytes();
    return Status::Ok();
  });
}

int32_t EmbReadStatus(int32_t device, void* status_block, const char* what, int64_t timeout_ms,
                      void* stream, shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_read_status", device, stream, [&](const ExecContext& ctx) -> Status {
    // The bounded wait drains what was queued before the call; the copy ReadStatus then
    // synchronises on is all that is left on the stream.
    SR_RETURN_IF_ERROR(WaitStream(RealDeviceApi(), device, stream, timeout_ms));
    return kcuda::ReadStatus(ctx, status_block, what != nullptr ? what : "embedding kernels");
  });
}

int32_t EmbLookup(int32_t device, const shardrec_plugin_lookup_job_t* jobs, size_t num_jobs,
                  void* status_block, void* stream, shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_lookup", device, stream, [&](const ExecContext& ctx) -> Status {
    if (num_jobs > 0 && jobs == nullptr) return Status::InvalidArgument("jobs must not be NULL");
    std::vector<LookupJob> j;
    j.reserve(num_jobs);
    for (size_t i = 0; i < num_jobs; ++i) j.push_back(abi::FromAbi(jobs[i]));
    return kcuda::Lookup(ctx, j, status_block);
  });
}

int32_t EmbBackwardWorkspaceBytes(int32_t device, int64_t num_ids, int32_t cols,
                                  int32_t num_row_stats, size_t* bytes,
                                  shardrec_plugin_status_t* st) {
  return OnDevice(
      st, "emb_backward_workspace_bytes", device, nullptr, [&](const ExecContext& ctx) -> Status {
        if (bytes == nullptr) return Status::InvalidArgument("bytes must not be NULL");
        if (num_ids < 0 || num_ids > (int64_t{1} << 31) || cols <= 0)
          return Status::InvalidArgument("backward workspace for ", num_ids,
                                         " ids (at most 2^31) and ", cols, " columns");
        *bytes = kcuda::BackwardWorkspaceBytes(ctx, num_ids, cols, num_row_stats);
        // Every layout holds the status block: 0 means CUB's size query failed.
        if (*bytes == 0)
          return Status::Cuda("sizing the backward workspace for ", num_ids, " ids failed");
        return Status::Ok();
      });
}

int32_t EmbGroupRows(int32_t device, const shardrec_plugin_runs_t* runs, void* workspace,
                     size_t workspace_bytes, int64_t* num_unique, void* stream,
                     shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_group_rows", device, stream, [&](const ExecContext& ctx) -> Status {
    std::vector<BagRun> storage;
    DeviceRuns dr;
    SR_RETURN_IF_ERROR(abi::FromAbi(runs, &storage, &dr));
    return kcuda::GroupRows(ctx, dr, workspace, workspace_bytes, num_unique);
  });
}

int32_t EmbGroupRowsGated(int32_t device, const shardrec_plugin_runs_t* runs, void* workspace,
                          size_t workspace_bytes, int64_t* num_unique, int64_t* num_unique_dev,
                          const int64_t* gate, void* stream, shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_group_rows_gated", device, stream,
                  [&](const ExecContext& ctx) -> Status {
                    std::vector<BagRun> storage;
                    DeviceRuns dr;
                    SR_RETURN_IF_ERROR(abi::FromAbi(runs, &storage, &dr));
                    return kcuda::GroupRowsGated(ctx, dr, workspace, workspace_bytes, num_unique,
                                                 num_unique_dev, gate);
                  });
}

int32_t EmbAggregateGrads(int32_t device, const shardrec_plugin_runs_t* runs, const float* grads,
                          int64_t grad_stride, int32_t cols, float scale, void* workspace,
                          int64_t* unique_rows, float* row_grads, void* stream,
                          shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_aggregate_grads", device, stream, [&](const ExecContext& ctx) -> Status {
    std::vector<BagRun> storage;
    DeviceRuns dr;
    SR_RETURN_IF_ERROR(abi::FromAbi(runs, &storage, &dr));
    return kcuda::AggregateGrads(ctx, dr, grads, grad_stride, cols, scale, workspace, unique_rows,
                                 row_grads);
  });
}

int32_t EmbFusedBackward(int32_t device, const shardrec_plugin_runs_t* runs, const float* grads,
                         int64_t grad_stride, float scale,
                         const shardrec_plugin_optimizer_t* config, int64_t step, int32_t full_dim,
                         const shardrec_plugin_shard_t* shard, void* workspace, void* stream,
                         shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_fused_backward", device, stream, [&](const ExecContext& ctx) -> Status {
    std::vector<BagRun> storage;
    DeviceRuns dr;
    SR_RETURN_IF_ERROR(abi::FromAbi(runs, &storage, &dr));
    optim::OptimizerConfig c;
    SR_RETURN_IF_ERROR(abi::FromAbi(config, &c));
    optim::ShardParams s;
    SR_RETURN_IF_ERROR(abi::FromAbi(shard, &s));
    return kcuda::FusedBackward(ctx, dr, grads, grad_stride, scale, c, step, full_dim, s,
                                workspace);
  });
}

int32_t EmbPartialRowStats(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
                           const shardrec_plugin_shard_t* shard,
                           const shardrec_plugin_row_update_t* update, float* partial_stats,
                           void* stream, shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_partial_row_stats", device, stream,
                  [&](const ExecContext& ctx) -> Status {
                    optim::OptimizerConfig c;
                    SR_RETURN_IF_ERROR(abi::FromAbi(config, &c));
                    optim::ShardParams s;
                    SR_RETURN_IF_ERROR(abi::FromAbi(shard, &s));
                    optim::RowUpdate u;
                    SR_RETURN_IF_ERROR(abi::FromAbi(update, &u));
                    return kcuda::PartialRowStats(ctx, c, step, s, u, partial_stats);
                  });
}

int32_t EmbApply(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
                 int32_t full_dim, const shardrec_plugin_shard_t* shard,
                 const shardrec_plugin_row_update_t* update, const float* full_stats, void* stream,
                 shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_apply", device, stream, [&](const ExecContext& ctx) -> Status {
    optim::OptimizerConfig c;
    SR_RETURN_IF_ERROR(abi::FromAbi(config, &c));
    optim::ShardParams s;
    SR_RETURN_IF_ERROR(abi::FromAbi(shard, &s));
    optim::RowUpdate u;
    SR_RETURN_IF_ERROR(abi::FromAbi(update, &u));
    return kcuda::Apply(ctx, c, step, full_dim, s, u, full_stats);
  });
}

int32_t EmbDivideMeans(int32_t device, float* out, int64_t rows, int64_t stride,
                       const shardrec_plugin_mean_job_t* jobs, size_t num_jobs, void* stream,
                       shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_divide_means", device, stream, [&](const ExecContext& ctx) -> Status {
    if (jobs == nullptr && num_jobs > 0) return Status::InvalidArgument("jobs must not be NULL");
    std::vector<embedding::kernels::MeanJob> j;
    j.reserve(num_jobs);
    for (size_t k = 0; k < num_jobs; ++k) j.push_back({jobs[k].col, jobs[k].cols, jobs[k].div});
    return kcuda::DivideMeans(ctx, out, rows, stride, j);
  });
}

int32_t EmbRouteTempBytes(int32_t device, int64_t max_items, size_t* bytes,
                          shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_route_temp_bytes", device, nullptr,
                  [&](const ExecContext& ctx) -> Status {
                    if (bytes == nullptr) return Status::InvalidArgument("bytes must not be NULL");
                    return kcuda::RouteTempBytes(ctx, max_items, bytes);
                  });
}

int32_t EmbRoute(int32_t device, const shardrec_plugin_route_t* route, int32_t phase, void* temp,
                 size_t temp_bytes, void* stream, shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_route", device, stream, [&](const ExecContext& ctx) -> Status {
    if (route == nullptr) return Status::InvalidArgument("route must not be NULL");
    const embedding::kernels::simt_body::RouteParams p = abi::FromAbi(*route);
    if (phase == SHARDREC_PLUGIN_ROUTE_COUNT) return kcuda::RouteCount(ctx, p, temp, temp_bytes);
    if (phase == SHARDREC_PLUGIN_ROUTE_FILL) return kcuda::RouteFill(ctx, p, temp, temp_bytes);
    return Status::InvalidArgument("route phase ", phase, " is unknown");
  });
}

int32_t EmbUnpack(int32_t device, const shardrec_plugin_unpack_t* unpack, void* temp,
                  size_t temp_bytes, void* stream, shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_unpack", device, stream, [&](const ExecContext& ctx) -> Status {
    if (unpack == nullptr) return Status::InvalidArgument("unpack must not be NULL");
    return kcuda::Unpack(ctx, abi::FromAbi(*unpack), temp, temp_bytes);
  });
}

int32_t StreamWaitStream(int32_t device, void* waiter, void* waitee, shardrec_plugin_status_t* st) {
  return OnDevice(st, "stream_wait_stream", device, nullptr, [&](const ExecContext&) -> Status {
    if (waiter == waitee) return Status::Ok();
    // The event may be destroyed at once: CUDA keeps it until the recorded work completes.
    cudaEvent_t ev = nullptr;
    const DeviceApi& api = RealDeviceApi();
    SR_RETURN_IF_ERROR(CudaStatus(api, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                                  "cudaEventCreateWithFlags"));
    Status s =
        CudaStatus(api, cudaEventRecord(ev, static_cast<cudaStream_t>(waitee)), "cudaEventRecord");
    if (s.ok())
      s = CudaStatus(api, cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter), ev, 0),
                     "cudaStreamWaitEvent");
    const Status d = CudaStatus(api, cudaEventDestroy(ev), "cudaEventDestroy");
    return s.ok() ? d : s;
  });
}

int32_t EmbCheckFinite(int32_t device, const shardrec_plugin_finite_t* finite, void* stream,
                       shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_check_finite", device, stream, [&](const ExecContext& ctx) -> Status {
    if (finite == nullptr) return Status::InvalidArgument("finite must not be NULL");
    return kcuda::CheckFinite(ctx, abi::FromAbi(*finite));
  });
}

int32_t EmbPackGrads(int32_t device, const shardrec_plugin_pack_t* pack, int64_t rows, void* stream,
                     shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_pack_grads", device, stream, [&](const ExecContext& ctx) -> Status {
    if (pack == nullptr) return Status::InvalidArgument("pack must not be NULL");
    return kcuda::PackGradients(ctx, abi::FromAbi(*pack), rows);
  });
}

int32_t EmbDpWorkspaceBytes(int32_t device, int64_t max_ids, int64_t num_keys, size_t* bytes,
                            shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_dp_workspace_bytes", device, nullptr,
                  [&](const ExecContext& ctx) -> Status {
                    if (bytes == nullptr) return Status::InvalidArgument("bytes must not be NULL");
                    return kcuda::DpWorkspaceBytes(ctx, max_ids, num_keys, bytes);
                  });
}

int32_t EmbDpStep(int32_t device, const shardrec_plugin_dp_t* dp, int32_t phase, void* workspace,
                  size_t workspace_bytes, void* stream, shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_dp_step", device, stream, [&](const ExecContext& ctx) -> Status {
    if (dp == nullptr) return Status::InvalidArgument("dp must not be NULL");
    return kcuda::DpStep(ctx, abi::FromAbi(*dp), phase, workspace, workspace_bytes);
  });
}

int32_t EmbRowPhaseCounted(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
                           int32_t full_dim, const shardrec_plugin_shard_t* shard,
                           const shardrec_plugin_counted_rows_t* rows, float* partial_stats,
                           const float* full_stats, int32_t phase, void* stream,
                           shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_row_phase_counted", device, stream,
                  [&](const ExecContext& ctx) -> Status {
                    if (rows == nullptr) return Status::InvalidArgument("rows must not be NULL");
                    optim::OptimizerConfig c;
                    SR_RETURN_IF_ERROR(abi::FromAbi(config, &c));
                    optim::ShardParams s;
                    SR_RETURN_IF_ERROR(abi::FromAbi(shard, &s));
                    return kcuda::RowPhaseCounted(ctx, c, step, full_dim, s, abi::FromAbi(*rows),
                                                  partial_stats, full_stats, phase);
                  });
}

int32_t EmbSumSources(int32_t device, const shardrec_plugin_sum_sources_t* sum, void* stream,
                      shardrec_plugin_status_t* st) {
  return OnDevice(st, "emb_sum_sources", device, stream, [&](const ExecContext& ctx) -> Status {
    if (sum == nullptr) return Status::InvalidArgument("sum must not be NULL");
    return kcuda::SumSources(ctx, abi::FromAbi(*sum));
  });
}

}  // namespace shardrec::cuda_plugin::entry
