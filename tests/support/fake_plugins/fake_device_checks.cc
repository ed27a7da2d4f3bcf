#include "tests/support/fake_plugins/fake_device_checks.h"

#include <string>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/dtype.h"
#include "impl/core/exec.h"
#include "impl/embedding/gpu/plugin_structs.h"
#include "impl/embedding/kernels/backward_workspace.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/simt/unpack_body.h"
#include "impl/optim/optimizer.h"
#include "tests/impl/embedding/kernels/route_host_exec.h"

namespace shardrec::fake {
namespace {

namespace k = embedding::kernels;
namespace sb = embedding::kernels::simt_body;

std::string Name(const char* what, const char* kind, size_t i) {
  return StrCat("'", what, "' of ", kind, " ", i);
}

// Bytes a rows x cols matrix of row stride `stride` spans.
size_t MatrixBytes(int64_t rows, int64_t cols, int64_t stride, size_t elem) {
  if (rows <= 0 || cols <= 0) return 0;
  return static_cast<size_t>((rows - 1) * stride + cols) * elem;
}

// A run's offsets, rows and per-id weights; *ids receives its id count (read from the checked
// offsets) and *end the end of its id range.
Status CheckRun(const DeviceMemory& mem, const shardrec_plugin_bag_run_t& r, const char* kind,
                size_t i, int64_t* ids, int64_t* end) {
  if (r.num_bags < 0) return Status::InvalidArgument("fake: ", kind, " ", i, " has negative bags");
  int64_t begin = 0;
  *end = r.num_bags;
  if (r.offsets != nullptr) {
    SR_RETURN_IF_ERROR(
        mem.Check(r.offsets, static_cast<size_t>(r.num_bags + 1) * 8, Name("offsets", kind, i)));
    begin = r.offsets[0];
    *end = r.offsets[r.num_bags];
  }
  *ids = *end - begin;
  if (*end > 0) {
    SR_RETURN_IF_ERROR(mem.Check(r.rows, static_cast<size_t>(*end) * 8, Name("rows", kind, i)));
    if (r.weights != nullptr)
      SR_RETURN_IF_ERROR(
          mem.Check(r.weights, static_cast<size_t>(*end) * 4, Name("per-id weights", kind, i)));
  }
  return Status::Ok();
}

// The runs of a backward: device pointers, id counts as the runs say, rows inside the shard, and
// (when `grads` is set) each bag's gradient row. *total = ids of all runs.
Status CheckRuns(const DeviceMemory& mem, const shardrec_plugin_runs_t* runs, const float* grads,
                 int64_t grad_stride, int32_t cols, std::vector<k::BagRun>* storage,
                 k::DeviceRuns* dr, int64_t* total) {
  SR_RETURN_IF_ERROR(k::abi::FromAbi(runs, storage, dr));
  *total = 0;
  for (size_t i = 0; i < dr->runs.size(); ++i) {
    const shardrec_plugin_bag_run_t& r = runs->runs[i];
    int64_t ids = 0, end = 0;
    SR_RETURN_IF_ERROR(CheckRun(mem, r, "run", i, &ids, &end));
    if (ids != dr->num_ids[i])
      return Status::InvalidArgument("fake: run ", i, " holds ", ids, " ids but its count says ",
                                     dr->num_ids[i]);
    for (int64_t p = end - ids; p < end; ++p)
      if (r.rows[p] < 0 || r.rows[p] >= runs->num_rows)
        return Status::InvalidArgument("fake: run ", i, " position ", p, " has row ", r.rows[p],
                                       " outside the shard's ", runs->num_rows);
    if (grads != nullptr && r.num_bags > 0)
      SR_RETURN_IF_ERROR(
          mem.Check(grads + r.io_offset,
                    static_cast<size_t>((r.num_bags - 1) * grad_stride + cols) * sizeof(float),
                    Name("grads", "run", i)));
    *total += ids;
  }
  return Status::Ok();
}

// The shard's weights and states (StateSpecs extents); fills the C++ config and shard.
Status CheckShard(const DeviceMemory& mem, const shardrec_plugin_optimizer_t* config,
                  const shardrec_plugin_shard_t* shard, optim::OptimizerConfig* c,
                  optim::ShardParams* s) {
  SR_RETURN_IF_ERROR(k::abi::FromAbi(config, c));
  SR_RETURN_IF_ERROR(k::abi::FromAbi(shard, s));
  SR_RETURN_IF_ERROR(optim::ValidateShard(*c, *s));
  SR_RETURN_IF_ERROR(mem.Check(
      s->weights, MatrixBytes(s->rows, s->cols, s->stride, DTypeSize(s->dtype)), "shard weights"));
  const auto specs = optim::StateSpecs(c->type);
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t n = specs[i].row_wise ? s->rows : s->rows * s->cols;
    SR_RETURN_IF_ERROR(mem.Check(s->states[i], static_cast<size_t>(n) * sizeof(float),
                                 StrCat("optimizer state ", specs[i].name)));
  }
  return Status::Ok();
}

// The host kernel needs the workspace the host twin sizes for these ids.
Status CheckWorkspace(const DeviceMemory& mem, const void* ws, int64_t ids, int32_t cols,
                      int num_row_stats) {
  const size_t need = k::BackwardWorkspaceBytes(ExecContext(), ids, cols, num_row_stats);
  return mem.Check(ws, need, "workspace");
}

}  // namespace

Status CheckShardArgs(const DeviceMemory& mem, const shardrec_plugin_optimizer_t* config,
                      const shardrec_plugin_shard_t* shard, optim::OptimizerConfig* c,
                      optim::ShardParams* s) {
  return CheckShard(mem, config, shard, c, s);
}

Status RunLookup(const DeviceMemory& mem, const shardrec_plugin_lookup_job_t* jobs, size_t num_jobs,
                 sb::DeviceStatus* block) {
  if (num_jobs > 0 && jobs == nullptr) return Status::InvalidArgument("jobs must not be NULL");
  if (block != nullptr)
    SR_RETURN_IF_ERROR(mem.Check(block, sizeof(sb::DeviceStatus), "status block"));
  // Rows outside the shard are left out: their jobs run from filtered host copies.
  std::vector<k::LookupJob> run;
  std::vector<std::vector<int64_t>> keep_offsets, keep_rows;
  std::vector<std::vector<float>> keep_weights;
  for (size_t j = 0; j < num_jobs; ++j) {
    const shardrec_plugin_lookup_job_t& c = jobs[j];
    k::LookupJob job = k::abi::FromAbi(c);
    if (job.weights.cols <= 0 || job.run.num_bags == 0) continue;
    int64_t ids = 0, end = 0;
    SR_RETURN_IF_ERROR(CheckRun(mem, c.run, "job", j, &ids, &end));
    const size_t elem = DTypeSize(job.weights.dtype);
    SR_RETURN_IF_ERROR(mem.Check(
        job.weights.data, MatrixBytes(job.weights.rows, job.weights.cols, job.weights.stride, elem),
        Name("weights", "job", j)));
    SR_RETURN_IF_ERROR(mem.Check(
        job.out + job.run.io_offset,
        static_cast<size_t>((job.run.num_bags - 1) * job.out_stride + job.weights.cols) * 4,
        Name("out", "job", j)));
    bool bad = false;
    for (int64_t p = end - ids; p < end; ++p) {
      if (job.run.rows[p] >= 0 && job.run.rows[p] < job.weights.rows) continue;
      bad = true;
      if (block != nullptr) sb::ReportError(block, sb::kStatusRowOutOfRange, p);
    }
    if (!bad) {
      run.push_back(job);
      continue;
    }
    const k::BagRun& r = job.run;
    auto ok = [&](int64_t p) { return r.rows[p] >= 0 && r.rows[p] < job.weights.rows; };
    if (r.offsets == nullptr) {  // sequence: the bad ids' output rows stay untouched
      for (int64_t p = 0; p < r.num_bags; ++p) {
        if (!ok(p)) continue;
        k::LookupJob one = job;
        one.run = {nullptr, 1, r.rows + p, r.weights != nullptr ? r.weights + p : nullptr,
                   r.io_offset + p * job.out_stride};
        run.push_back(one);
      }
      continue;
    }
    keep_offsets.emplace_back(1, 0);
    keep_rows.emplace_back();
    keep_weights.emplace_back();
    for (int64_t b = 0; b < r.num_bags; ++b) {
      for (int64_t p = r.offsets[b]; p < r.offsets[b + 1]; ++p) {
        if (!ok(p)) continue;
        keep_rows.back().push_back(r.rows[p]);
        if (r.weights != nullptr) keep_weights.back().push_back(r.weights[p]);
      }
      keep_offsets.back().push_back(static_cast<int64_t>(keep_rows.back().size()));
    }
    k::LookupJob f = job;
    f.run.offsets = keep_offsets.back().data();
    f.run.rows = keep_rows.back().data();
    f.run.weights = r.weights != nullptr ? keep_weights.back().data() : nullptr;
    run.push_back(f);
  }
  return k::Lookup(ExecContext(), run);
}

Status RunGroupRows(const DeviceMemory& mem, const shardrec_plugin_runs_t* runs, void* ws,
                    size_t ws_bytes, int64_t* num_unique) {
  std::vector<k::BagRun> storage;
  k::DeviceRuns dr;
  int64_t total = 0;
  SR_RETURN_IF_ERROR(CheckRuns(mem, runs, nullptr, 0, 0, &storage, &dr, &total));
  SR_RETURN_IF_ERROR(mem.Check(ws, ws_bytes, "workspace"));
  int64_t unique = 0;
  SR_RETURN_IF_ERROR(k::GroupRows(ExecContext(), dr.runs, ws, ws_bytes, &unique));
  if (num_unique != nullptr) *num_unique = unique;
  return Status::Ok();
}

Status RunGroupRowsGated(const DeviceMemory& mem, const shardrec_plugin_runs_t* runs, void* ws,
                         size_t ws_bytes, int64_t* num_unique, int64_t* num_unique_dev,
                         const int64_t* gate) {
  if (gate != nullptr) SR_RETURN_IF_ERROR(mem.Check(gate, 8, "gate"));
  if (num_unique_dev != nullptr) SR_RETURN_IF_ERROR(mem.Check(num_unique_dev, 8, "device count"));
  int64_t unique = 0;
  SR_RETURN_IF_ERROR(RunGroupRows(mem, runs, ws, ws_bytes, &unique));
  if (gate != nullptr && *gate != 0) {
    // The host twin keeps its grouping at the start of the workspace: no unique row is left for
    // the step that follows.
    static_cast<k::detail::Grouping*>(ws)->num_unique = 0;
    unique = 0;
  }
  if (num_unique != nullptr) *num_unique = unique;
  if (num_unique_dev != nullptr) *num_unique_dev = unique;
  return Status::Ok();
}

Status RunAggregateGrads(const DeviceMemory& mem, const shardrec_plugin_runs_t* runs,
                         const float* grads, int64_t grad_stride, int32_t cols, float scale,
                         void* ws, int64_t* unique_rows, float* row_grads) {
  std::vector<k::BagRun> storage;
  k::DeviceRuns dr;
  int64_t total = 0;
  SR_RETURN_IF_ERROR(CheckRuns(mem, runs, grads, grad_stride, cols, &storage, &dr, &total));
  SR_RETURN_IF_ERROR(CheckWorkspace(mem, ws, total, cols, 0));
  SR_RETURN_IF_ERROR(mem.Check(unique_rows, static_cast<size_t>(total) * 8, "unique_rows"));
  SR_RETURN_IF_ERROR(
      mem.Check(row_grads, static_cast<size_t>(total) * cols * sizeof(float), "row_grads"));
  return k::AggregateGrads(ExecContext(), dr.runs, grads, grad_stride, cols, scale, ws, unique_rows,
                           row_grads);
}

Status RunFusedBackward(const DeviceMemory& mem, const shardrec_plugin_runs_t* runs,
                        const float* grads, int64_t grad_stride, float scale,
                        const shardrec_plugin_optimizer_t* config, int64_t step, int32_t full_dim,
                        const shardrec_plugin_shard_t* shard, void* ws) {
  optim::OptimizerConfig c;
  optim::ShardParams s;
  SR_RETURN_IF_ERROR(CheckShard(mem, config, shard, &c, &s));
  std::vector<k::BagRun> storage;
  k::DeviceRuns dr;
  int64_t total = 0;
  SR_RETURN_IF_ERROR(CheckRuns(mem, runs, grads, grad_stride, s.cols, &storage, &dr, &total));
  if (dr.num_rows != s.rows)
    return Status::InvalidArgument("fake: runs of a ", dr.num_rows, "-row shard for a shard of ",
                                   s.rows, " rows");
  SR_RETURN_IF_ERROR(CheckWorkspace(mem, ws, total, s.cols, optim::NumRowStats(c.type)));
  return k::FusedBackward(ExecContext(), dr.runs, grads, grad_stride, scale, c, step, full_dim, s,
                          ws);
}

Status RunRowPhase(const DeviceMemory& mem, const shardrec_plugin_optimizer_t* config, int64_t step,
                   int32_t full_dim, const shardrec_plugin_shard_t* shard,
                   const shardrec_plugin_row_update_t* update, float* partial, const float* full,
                   int phase) {
  optim::OptimizerConfig c;
  optim::ShardParams s;
  SR_RETURN_IF_ERROR(CheckShard(mem, config, shard, &c, &s));
  optim::RowUpdate u;
  SR_RETURN_IF_ERROR(k::abi::FromAbi(update, &u));
  const auto n = static_cast<size_t>(u.rows.size());
  const int ns = optim::NumRowStats(c.type);
  if (n == 0 || (phase == 1 && ns == 0)) return Status::Ok();
  SR_RETURN_IF_ERROR(mem.Check(u.rows.data(), n * 8, "update rows"));
  SR_RETURN_IF_ERROR(mem.Check(u.grads, n * s.cols * sizeof(float), "update grads"));
  for (size_t i = 0; i < n; ++i)
    if (u.rows[i] < 0 || u.rows[i] >= s.rows)
      return Status::InvalidArgument("fake: update row ", u.rows[i], " outside the shard");
  const size_t stats = n * static_cast<size_t>(ns) * sizeof(float);
  if (phase == 1) {
    SR_RETURN_IF_ERROR(mem.Check(partial, stats, "partial_stats"));
    optim::PartialRowStats(ExecContext(), c, step, s, u, partial);
    return Status::Ok();
  }
  if (ns > 0) SR_RETURN_IF_ERROR(mem.Check(full, stats, "full_stats"));
  optim::Apply(ExecContext(), c, step, full_dim, s, u, full);
  return Status::Ok();
}

Status RunRoute(const DeviceMemory& mem, const shardrec_plugin_route_t* route, int32_t phase,
                void* temp, size_t temp_bytes) {
  if (route == nullptr) return Status::InvalidArgument("route must not be NULL");
  const sb::RouteParams p = k::abi::FromAbi(*route);
  if (p.batch_size < 0 || p.num_lengths < 0 || p.num_values < 0 || p.num_pairs < 0 ||
      p.num_real_slots < 0 || p.num_slots < p.num_real_slots)
    return Status::InvalidArgument("fake emb_route: negative sizes");
  // [p, p + n elements) inside one block; nothing to check for n == 0.
  auto need = [&](const void* ptr, int64_t n, size_t elem, const char* what) -> Status {
    if (n <= 0) return Status::Ok();
    return mem.Check(ptr, static_cast<size_t>(n) * elem, StrCat("route ", what));
  };
  const int64_t B = p.batch_size, P = p.num_pairs;
  const int64_t cells = static_cast<int64_t>(p.num_slots) * B;
  const int64_t real = static_cast<int64_t>(p.num_real_slots) * B;
  SR_RETURN_IF_ERROR(need(p.lengths, p.num_lengths, 4, "lengths"));
  SR_RETURN_IF_ERROR(need(p.values, p.num_values, p.ids64 != 0 ? 8 : 4, "values"));
  if (p.weights != nullptr) SR_RETURN_IF_ERROR(need(p.weights, p.num_values, 4, "weights"));
  SR_RETURN_IF_ERROR(need(p.pair_feature, P, 4, "pair_feature"));
  SR_RETURN_IF_ERROR(need(p.pair_rows, P, 8, "pair_rows"));
  SR_RETURN_IF_ERROR(need(p.pair_flags, P, 4, "pair_flags"));
  SR_RETURN_IF_ERROR(need(p.pair_block_begin, P + 1, 4, "pair_block_begin"));
  const int64_t blocks = p.pair_block_begin[P];
  SR_RETURN_IF_ERROR(need(p.block_first, blocks, 8, "block_first"));
  SR_RETURN_IF_ERROR(need(p.block_slot_begin, blocks + 1, 4, "block_slot_begin"));
  SR_RETURN_IF_ERROR(need(p.block_slots, p.block_slot_begin[blocks], 4, "block_slots"));
  SR_RETURN_IF_ERROR(need(p.slot_dest, p.num_real_slots, 4, "slot_dest"));
  SR_RETURN_IF_ERROR(need(p.slot_in_dest, p.num_real_slots, 4, "slot_in_dest"));
  SR_RETURN_IF_ERROR(need(p.bag_offsets, p.num_lengths + 1, 8, "bag_offsets"));
  SR_RETURN_IF_ERROR(
      need(p.wide, (p.num_lengths > cells ? p.num_lengths : cells) + 1, 8, "scan input"));
  SR_RETURN_IF_ERROR(need(p.slot_lengths, cells, 4, "slot_lengths"));
  SR_RETURN_IF_ERROR(need(p.id_scan, cells + 1, 8, "id_scan"));
  SR_RETURN_IF_ERROR(need(p.ne_scan, real + 1, 8, "ne_scan"));
  if (p.mean_div != nullptr) SR_RETURN_IF_ERROR(need(p.mean_div, P * B, 4, "mean_div"));
  SR_RETURN_IF_ERROR(need(p.slot_ids_at, p.num_slots + 1, 8, "slot_ids_at"));
  SR_RETURN_IF_ERROR(need(p.slot_ne_at, p.num_real_slots + 1, 8, "slot_ne_at"));
  SR_RETURN_IF_ERROR(need(p.status, 1, sizeof(sb::RouteStatus), "status"));
  if (temp_bytes > 0) SR_RETURN_IF_ERROR(mem.Check(temp, temp_bytes, "route scratch"));
  sb::HostRouteExec ex;
  if (phase == SHARDREC_PLUGIN_ROUTE_COUNT) {
    sb::RouteCountSteps(ex, p);
    return Status::Ok();
  }
  if (phase != SHARDREC_PLUGIN_ROUTE_FILL)
    return Status::InvalidArgument("route phase ", phase, " is unknown");
  // The fill's extents follow from what the count phase gathered.
  const int64_t ids = p.slot_ids_at[p.num_real_slots];
  const int64_t dp = p.slot_ids_at[p.num_slots] - ids;
  const int64_t targets = p.sequence != 0 ? ids : p.slot_ne_at[p.num_real_slots];
  SR_RETURN_IF_ERROR(need(p.send, p.send_bytes, 1, "send"));
  SR_RETURN_IF_ERROR(need(p.ret_target, targets, 8, "ret_target"));
  SR_RETURN_IF_ERROR(need(p.dp_rows, dp, 8, "dp_rows"));
  if (p.dp_weights != nullptr) SR_RETURN_IF_ERROR(need(p.dp_weights, dp, 4, "dp_weights"));
  if (p.dp_pos != nullptr) SR_RETURN_IF_ERROR(need(p.dp_pos, dp, 8, "dp_pos"));
  SR_RETURN_IF_ERROR(
      need(p.dp_offsets, (p.num_slots - p.num_real_slots) * (B + 1), 8, "dp_offsets"));
  int64_t dests = 0;  // the destination tables are read at every real slot's rank
  for (int32_t i = 0; i < p.num_real_slots; ++i)
    dests = p.slot_dest[i] + 1 > dests ? p.slot_dest[i] + 1 : dests;
  SR_RETURN_IF_ERROR(need(p.dest_base, dests, 8, "dest_base"));
  SR_RETURN_IF_ERROR(need(p.dest_rows, dests, 8, "dest_rows"));
  SR_RETURN_IF_ERROR(need(p.dest_weights, dests, 8, "dest_weights"));
  SR_RETURN_IF_ERROR(need(p.dest_first_id, dests, 8, "dest_first_id"));
  sb::RouteFillSteps(ex, p);
  return Status::Ok();
}

Status RunUnpack(const DeviceMemory& mem, const shardrec_plugin_unpack_t* unpack, void* temp,
                 size_t temp_bytes) {
  if (unpack == nullptr) return Status::InvalidArgument("unpack must not be NULL");
  const sb::UnpackParams p = k::abi::FromAbi(*unpack);
  if (p.num_runs < 0 || p.num_cells < 0)
    return Status::InvalidArgument("fake emb_unpack: negative sizes");
  SR_RETURN_IF_ERROR(mem.Check(p.bad, sizeof(*p.bad), "unpack bad-run word"));
  if (temp_bytes > 0) SR_RETURN_IF_ERROR(mem.Check(temp, temp_bytes, "unpack scratch"));
  if (p.num_runs == 0) {
    sb::HostRouteExec ex;
    sb::UnpackSteps(ex, p);
    return Status::Ok();
  }
  const size_t runs = static_cast<size_t>(p.num_runs);
  SR_RETURN_IF_ERROR(mem.Check(p.runs, runs * sizeof(sb::UnpackRun), "unpack run table"));
  SR_RETURN_IF_ERROR(mem.Check(p.cell_begin, (runs + 1) * 8, "unpack cell table"));
  if (p.cell_begin[0] != 0 || p.cell_begin[runs] != p.num_cells)
    return Status::InvalidArgument("fake emb_unpack: the cell table does not span the cells");
  const size_t cells = static_cast<size_t>(p.num_cells) + 1;
  SR_RETURN_IF_ERROR(mem.Check(p.wide, cells * 8, "unpack scan input"));
  SR_RETURN_IF_ERROR(mem.Check(p.ne_scan, cells * 8, "unpack ne_scan"));
  SR_RETURN_IF_ERROR(mem.Check(p.id_scan, cells * 8, "unpack id_scan"));
  for (size_t r = 0; r < runs; ++r) {
    const sb::UnpackRun& run = p.runs[r];
    const int64_t n = p.cell_begin[r + 1] - p.cell_begin[r];
    if (n < 0) return Status::InvalidArgument("fake emb_unpack: cells of run ", r, " descend");
    if (n > 0)
      SR_RETURN_IF_ERROR(
          mem.Check(run.lengths, static_cast<size_t>(n) * 4, Name("lengths", "unpack run", r)));
    if (run.offsets != nullptr)
      SR_RETURN_IF_ERROR(mem.Check(run.offsets, static_cast<size_t>(run.bags + 1) * 8,
                                   Name("offsets", "unpack run", r)));
  }
  sb::HostRouteExec ex;
  sb::UnpackSteps(ex, p);
  return Status::Ok();
}

}  // namespace shardrec::fake
