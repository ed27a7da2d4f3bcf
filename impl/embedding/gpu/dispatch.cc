// Marshalling into the plugin's emb_* entries. Each call looks the table up (worked out once per
// process), checks the context and the entries, converts the arguments into
// plain-C structs on the stack (run and job lists in a vector) and turns the plugin's status
// back into a Status.
#include "impl/embedding/gpu/dispatch.h"

#include <string>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"
#include "impl/core/plugin_abi.h"
#include "impl/embedding/gpu/plugin_structs.h"

namespace shardrec::embedding::kernels::device {
namespace {

// The table, once it is known to serve every embedding entry (one check: the plugin is built with
// this library, so no entry is probed on its own). The plugin is loaded once per process, so the
// answer is worked out once.
Status Table(const shardrec_cuda_plugin_table_t** out) {
  struct Loaded {
    const shardrec_cuda_plugin_table_t* table = nullptr;
    Status status;
  };
  static const Loaded loaded = [] {
    Loaded l;
    l.status = core::GetCudaPlugin(&l.table);
    if (l.status.ok()) {
      std::string path;
      if (!core::GetCudaPluginPath(&path).ok()) path = "(unknown path)";
      l.status = core::HasEmbeddingEntries(*l.table, path);
    }
    return l;
  }();
  *out = loaded.table;
  return loaded.status;
}

// The table and ctx's device index, for a CUDA context.
Status Prepare(const ExecContext& ctx, const char* what, const shardrec_cuda_plugin_table_t** t) {
  if (!ctx.is_cuda())
    return Status::InvalidArgument(what, ": the device kernels need a CUDA context, got ",
                                   ctx.device().ToString());
  return Table(t);
}

Status Route(const ExecContext& ctx, const char* what, const simt_body::RouteParams& params,
             int32_t phase, void* temp, size_t temp_bytes) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, what, &t));
  const shardrec_plugin_route_t r = abi::ToAbi(params);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_route(ctx.device().index, &r, phase, temp, temp_bytes, ctx.stream(), &st), st);
}

}  // namespace

Status CheckPlugin() {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  return Table(&t);
}

Status StatusBytes(const ExecContext& ctx, size_t* bytes) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "StatusBytes", &t));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->emb_status_bytes(ctx.device().index, bytes, &st), st);
}

Status ReadStatus(const ExecContext& ctx, void* status_block, const char* what,
                  int64_t timeout_ms) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "ReadStatus", &t));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_read_status(ctx.device().index, status_block, what, timeout_ms, ctx.stream(), &st),
      st);
}

Status Lookup(const ExecContext& ctx, std::span<const LookupJob> jobs, void* status_block) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "Lookup", &t));
  std::vector<shardrec_plugin_lookup_job_t> c;
  c.reserve(jobs.size());
  for (const LookupJob& j : jobs) c.push_back(abi::ToAbi(j));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_lookup(ctx.device().index, c.data(), c.size(), status_block, ctx.stream(), &st), st);
}

Status DivideMeans(const ExecContext& ctx, float* out, int64_t rows, int64_t stride,
                   std::span<const MeanJob> jobs) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "DivideMeans", &t));
  std::vector<shardrec_plugin_mean_job_t> c;
  c.reserve(jobs.size());
  for (const MeanJob& j : jobs) c.push_back(shardrec_plugin_mean_job_t{j.col, j.cols, 0, j.div});
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->emb_divide_means(ctx.device().index, out, rows, stride, c.data(),
                                              c.size(), ctx.stream(), &st),
                          st);
}

Status BackwardWorkspaceBytes(const ExecContext& ctx, int64_t num_ids, int32_t cols,
                              int num_row_stats, size_t* bytes) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "BackwardWorkspaceBytes", &t));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_backward_workspace_bytes(ctx.device().index, num_ids, cols, num_row_stats, bytes, &st),
      st);
}

Status GroupRows(const ExecContext& ctx, const DeviceRuns& runs, void* workspace,
                 size_t workspace_bytes, int64_t* num_unique) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "GroupRows", &t));
  std::vector<shardrec_plugin_bag_run_t> storage;
  shardrec_plugin_runs_t r{};
  SR_RETURN_IF_ERROR(abi::ToAbi(runs, &storage, &r));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->emb_group_rows(ctx.device().index, &r, workspace, workspace_bytes,
                                            num_unique, ctx.stream(), &st),
                          st);
}

Status AggregateGrads(const ExecContext& ctx, const DeviceRuns& runs, const float* grads,
                      int64_t grad_stride, int32_t cols, float scale, void* workspace,
                      int64_t* unique_rows, float* row_grads) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "AggregateGrads", &t));
  std::vector<shardrec_plugin_bag_run_t> storage;
  shardrec_plugin_runs_t r{};
  SR_RETURN_IF_ERROR(abi::ToAbi(runs, &storage, &r));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_aggregate_grads(ctx.device().index, &r, grads, grad_stride, cols, scale, workspace,
                             unique_rows, row_grads, ctx.stream(), &st),
      st);
}

Status FusedBackward(const ExecContext& ctx, const DeviceRuns& runs, const float* grads,
                     int64_t grad_stride, float scale, const optim::OptimizerConfig& config,
                     int64_t step, int32_t full_dim, optim::ShardParams& shard, void* workspace) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "FusedBackward", &t));
  std::vector<shardrec_plugin_bag_run_t> storage;
  shardrec_plugin_runs_t r{};
  SR_RETURN_IF_ERROR(abi::ToAbi(runs, &storage, &r));
  shardrec_plugin_shard_t s{};
  SR_RETURN_IF_ERROR(abi::ToAbi(shard, &s));
  const shardrec_plugin_optimizer_t c = abi::ToAbi(config);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_fused_backward(ctx.device().index, &r, grads, grad_stride, scale, &c, step, full_dim,
                            &s, workspace, ctx.stream(), &st),
      st);
}

Status PartialRowStats(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                       optim::ShardParams& shard, const optim::RowUpdate& update,
                       float* partial_stats) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "PartialRowStats", &t));
  shardrec_plugin_shard_t s{};
  SR_RETURN_IF_ERROR(abi::ToAbi(shard, &s));
  const shardrec_plugin_optimizer_t c = abi::ToAbi(config);
  const shardrec_plugin_row_update_t u = abi::ToAbi(update);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->emb_partial_row_stats(ctx.device().index, &c, step, &s, &u,
                                                   partial_stats, ctx.stream(), &st),
                          st);
}

Status Apply(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
             int32_t full_dim, optim::ShardParams& shard, const optim::RowUpdate& update,
             const float* full_stats) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "Apply", &t));
  shardrec_plugin_shard_t s{};
  SR_RETURN_IF_ERROR(abi::ToAbi(shard, &s));
  const shardrec_plugin_optimizer_t c = abi::ToAbi(config);
  const shardrec_plugin_row_update_t u = abi::ToAbi(update);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_apply(ctx.device().index, &c, step, full_dim, &s, &u, full_stats, ctx.stream(), &st),
      st);
}

Status RouteTempBytes(const ExecContext& ctx, int64_t max_items, size_t* bytes) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "RouteTempBytes", &t));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->emb_route_temp_bytes(ctx.device().index, max_items, bytes, &st), st);
}

Status RouteCount(const ExecContext& ctx, const simt_body::RouteParams& params, void* temp,
                  size_t temp_bytes) {
  return Route(ctx, "RouteCount", params, SHARDREC_PLUGIN_ROUTE_COUNT, temp, temp_bytes);
}

Status RouteFill(const ExecContext& ctx, const simt_body::RouteParams& params, void* temp,
                 size_t temp_bytes) {
  return Route(ctx, "RouteFill", params, SHARDREC_PLUGIN_ROUTE_FILL, temp, temp_bytes);
}

Status Unpack(const ExecContext& ctx, const simt_body::UnpackParams& params, void* temp,
              size_t temp_bytes) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "Unpack", &t));
  const shardrec_plugin_unpack_t u = abi::ToAbi(params);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_unpack(ctx.device().index, &u, temp, temp_bytes, ctx.stream(), &st), st);
}

Status CheckFinite(const ExecContext& ctx, const simt_body::FiniteParams& params) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "CheckFinite", &t));
  const shardrec_plugin_finite_t f = abi::ToAbi(params);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->emb_check_finite(ctx.device().index, &f, ctx.stream(), &st), st);
}

Status PackGradients(const ExecContext& ctx, const simt_body::PackParams& params, int64_t rows) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "PackGradients", &t));
  const shardrec_plugin_pack_t k = abi::ToAbi(params);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->emb_pack_grads(ctx.device().index, &k, rows, ctx.stream(), &st), st);
}

Status StreamWaitStream(int device, Stream waiter, Stream waitee) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ExecContext::Cuda(device, waiter), "StreamWaitStream", &t));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->stream_wait_stream(device, waiter, waitee, &st), st);
}

Status DpWorkspaceBytes(const ExecContext& ctx, int64_t max_ids, int64_t num_keys, size_t* bytes) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "DpWorkspaceBytes", &t));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_dp_workspace_bytes(ctx.device().index, max_ids, num_keys, bytes, &st), st);
}

Status DpStep(const ExecContext& ctx, const simt_body::DpParams& params, int32_t phase,
              void* workspace, size_t workspace_bytes) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "DpStep", &t));
  const shardrec_plugin_dp_t d = abi::ToAbi(params);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_dp_step(ctx.device().index, &d, phase, workspace, workspace_bytes, ctx.stream(), &st),
      st);
}

Status RowPhaseCounted(const ExecContext& ctx, const optim::OptimizerConfig& config, int64_t step,
                       int32_t full_dim, optim::ShardParams& shard, const CountedRows& rows,
                       float* partial_stats, const float* full_stats, int phase) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "RowPhaseCounted", &t));
  const shardrec_plugin_optimizer_t c = abi::ToAbi(config);
  shardrec_plugin_shard_t s{};
  SR_RETURN_IF_ERROR(abi::ToAbi(shard, &s));
  const shardrec_plugin_counted_rows_t r = abi::ToAbi(rows);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_row_phase_counted(ctx.device().index, &c, step, full_dim, &s, &r, partial_stats,
                               full_stats, phase, ctx.stream(), &st),
      st);
}

Status GroupRowsGated(const ExecContext& ctx, const DeviceRuns& runs, void* workspace,
                      size_t workspace_bytes, int64_t* num_unique, int64_t* num_unique_dev,
                      const int64_t* gate) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "GroupRowsGated", &t));
  std::vector<shardrec_plugin_bag_run_t> storage;
  shardrec_plugin_runs_t r{};
  SR_RETURN_IF_ERROR(abi::ToAbi(runs, &storage, &r));
  shardrec_plugin_status_t st{};
  return core::FromPlugin(
      t->emb_group_rows_gated(ctx.device().index, &r, workspace, workspace_bytes, num_unique,
                              num_unique_dev, gate, ctx.stream(), &st),
      st);
}

Status SumSources(const ExecContext& ctx, const simt_body::SumSourcesParams& params) {
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(Prepare(ctx, "SumSources", &t));
  const shardrec_plugin_sum_sources_t s = abi::ToAbi(params);
  shardrec_plugin_status_t st{};
  return core::FromPlugin(t->emb_sum_sources(ctx.device().index, &s, ctx.stream(), &st), st);
}

}  // namespace shardrec::embedding::kernels::device
