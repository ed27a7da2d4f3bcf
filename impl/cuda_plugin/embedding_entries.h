// The embedding kernel entries of the plugin's C table (the emb_* entries of plugin_abi.h): the
// plain-C arguments back into the C++ types (impl/embedding/gpu/plugin_structs.h), then the
// CUDA twins of impl/embedding/kernels/cuda/kernels_cuda.h on a CUDA ExecContext.
#pragma once

#include "impl/core/plugin_abi.h"

namespace shardrec::cuda_plugin::entry {

int32_t EmbStatusBytes(int32_t device, size_t* bytes, shardrec_plugin_status_t* st);
int32_t EmbReadStatus(int32_t device, void* status_block, const char* what, int64_t timeout_ms,
                      void* stream, shardrec_plugin_status_t* st);
int32_t EmbLookup(int32_t device, const shardrec_plugin_lookup_job_t* jobs, size_t num_jobs,
                  void* status_block, void* stream, shardrec_plugin_status_t* st);
int32_t EmbBackwardWorkspaceBytes(int32_t device, int64_t num_ids, int32_t cols,
                                  int32_t num_row_stats, size_t* bytes,
                                  shardrec_plugin_status_t* st);
int32_t EmbGroupRows(int32_t device, const shardrec_plugin_runs_t* runs, void* workspace,
                     size_t workspace_bytes, int64_t* num_unique, void* stream,
                     shardrec_plugin_status_t* st);
int32_t EmbGroupRowsGated(int32_t device, const shardrec_plugin_runs_t* runs, void* workspace,
                          size_t workspace_bytes, int64_t* num_unique, int64_t* num_unique_dev,
                          const int64_t* gate, void* stream, shardrec_plugin_status_t* st);
int32_t EmbAggregateGrads(int32_t device, const shardrec_plugin_runs_t* runs, const float* grads,
                          int64_t grad_stride, int32_t cols, float scale, void* workspace,
                          int64_t* unique_rows, float* row_grads, void* stream,
                          shardrec_plugin_status_t* st);
int32_t EmbFusedBackward(int32_t device, const shardrec_plugin_runs_t* runs, const float* grads,
                         int64_t grad_stride, float scale,
                         const shardrec_plugin_optimizer_t* config, int64_t step, int32_t full_dim,
                         const shardrec_plugin_shard_t* shard, void* workspace, void* stream,
                         shardrec_plugin_status_t* st);
int32_t EmbPartialRowStats(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
                           const shardrec_plugin_shard_t* shard,
                           const shardrec_plugin_row_update_t* update, float* partial_stats,
                           void* stream, shardrec_plugin_status_t* st);
int32_t EmbApply(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
                 int32_t full_dim, const shardrec_plugin_shard_t* shard,
                 const shardrec_plugin_row_update_t* update, const float* full_stats, void* stream,
                 shardrec_plugin_status_t* st);

int32_t EmbRouteTempBytes(int32_t device, int64_t max_items, size_t* bytes,
                          shardrec_plugin_status_t* st);
int32_t EmbRoute(int32_t device, const shardrec_plugin_route_t* route, int32_t phase, void* temp,
                 size_t temp_bytes, void* stream, shardrec_plugin_status_t* st);
int32_t EmbDivideMeans(int32_t device, float* out, int64_t rows, int64_t stride,
                       const shardrec_plugin_mean_job_t* jobs, size_t num_jobs, void* stream,
                       shardrec_plugin_status_t* st);

int32_t EmbUnpack(int32_t device, const shardrec_plugin_unpack_t* unpack, void* temp,
                  size_t temp_bytes, void* stream, shardrec_plugin_status_t* st);

int32_t StreamWaitStream(int32_t device, void* waiter, void* waitee, shardrec_plugin_status_t* st);
int32_t EmbCheckFinite(int32_t device, const shardrec_plugin_finite_t* finite, void* stream,
                       shardrec_plugin_status_t* st);
int32_t EmbPackGrads(int32_t device, const shardrec_plugin_pack_t* pack, int64_t rows, void* stream,
                     shardrec_plugin_status_t* st);

int32_t EmbDpWorkspaceBytes(int32_t device, int64_t max_ids, int64_t num_keys, size_t* bytes,
                            shardrec_plugin_status_t* st);
int32_t EmbDpStep(int32_t device, const shardrec_plugin_dp_t* dp, int32_t phase, void* workspace,
                  size_t workspace_bytes, void* stream, shardrec_plugin_status_t* st);
int32_t EmbRowPhaseCounted(int32_t device, const shardrec_plugin_optimizer_t* config, int64_t step,
                           int32_t full_dim, const shardrec_plugin_shard_t* shard,
                           const shardrec_plugin_counted_rows_t* rows, float* partial_stats,
                           const float* full_stats, int32_t phase, void* stream,
                           shardrec_plugin_status_t* st);

int32_t EmbSumSources(int32_t device, const shardrec_plugin_sum_sources_t* sum, void* stream,
                      shardrec_plugin_status_t* st);

}  // namespace shardrec::cuda_plugin::entry
