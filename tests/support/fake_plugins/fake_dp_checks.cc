// The fake plugin's data-parallel entries and counted row phases (fake_device_checks.h): the
// arguments checked against the fake's live device blocks, then the single-source steps
// (simt/dp_body.h, simt/row_phase_body.h) on the host executor, as the device runs them.
#include <string>

#include "impl/core/check.h"
#include "impl/core/simt.h"
#include "impl/embedding/gpu/plugin_structs.h"
#include "impl/embedding/kernels/simt/dp_body.h"
#include "impl/embedding/kernels/simt/row_phase_body.h"
#include "tests/impl/embedding/kernels/simt_host_exec.h"
#include "tests/support/fake_plugins/fake_device_checks.h"

namespace shardrec::fake {
namespace {

namespace k = embedding::kernels;
namespace sb = embedding::kernels::simt_body;

// Scratch the host executor asks for (none; some, so that the caller's carving is exercised).
constexpr size_t kTempBytes = 256;

// [p, p + n elements) inside one live block; nothing to check for n <= 0.
Status Need(const DeviceMemory& mem, const void* p, int64_t n, size_t elem, const char* what) {
  if (n <= 0) return Status::Ok();
  return mem.Check(p, static_cast<size_t>(n) * elem, StrCat("data-parallel ", what));
}

// The tables both phases read: table records, their first keys (ascending, ending at num_keys)
// and the dense block each table's gradient and flags lie in.
Status CheckTables(const DeviceMemory& mem, const sb::DpParams& p) {
  SR_RETURN_IF_ERROR(Need(mem, p.tables, p.num_tables, sizeof(sb::DpTable), "table records"));
  SR_RETURN_IF_ERROR(Need(mem, p.key_first, p.num_tables + 1, 8, "first keys"));
  if (p.key_first[0] != 0 || p.key_first[p.num_tables] != p.num_keys)
    return Status::InvalidArgument("fake emb_dp_step: the first keys do not span ", p.num_keys);
  SR_RETURN_IF_ERROR(Need(mem, p.dense, p.dense_floats, 4, "dense block"));
  for (int64_t t = 0; t < p.num_tables; ++t) {
    const int64_t rows = p.key_first[t + 1] - p.key_first[t];
    const sb::DpTable& tab = p.tables[t];
    if (rows < 0 || tab.dim <= 0 || tab.grad_at < 0 || tab.touch_at < 0 ||
        tab.grad_at + rows * tab.dim > p.dense_floats || tab.touch_at + rows > p.dense_floats)
      return Status::InvalidArgument("fake emb_dp_step: table ", t, " outside the dense block");
  }
  return Status::Ok();
}

Status CheckAccumulate(const DeviceMemory& mem, const sb::DpParams& p) {
  if (p.batch_size < 0 || p.stride < 0) return Status::InvalidArgument("negative sizes");
  SR_RETURN_IF_ERROR(Need(mem, p.pairs, p.num_pairs, sizeof(sb::DpPair), "pair records"));
  SR_RETURN_IF_ERROR(Need(mem, p.pair_first, p.num_pairs + 1, 8, "pair starts"));
  if (p.num_pairs > 0 && (p.pair_first[0] != 0 || p.pair_first[p.num_pairs] != p.num_ids))
    return Status::InvalidArgument("fake emb_dp_step: the pair starts do not span the ids");
  SR_RETURN_IF_ERROR(Need(mem, p.rows, p.num_ids, 8, "rows"));
  if (p.weights != nullptr) SR_RETURN_IF_ERROR(Need(mem, p.weights, p.num_ids, 4, "weights"));
  if (p.pos != nullptr) SR_RETURN_IF_ERROR(Need(mem, p.pos, p.num_ids, 8, "positions"));
  int64_t grad_rows = 0;  // output rows the ids' gradients come from
  for (int64_t i = 0; i < p.num_pairs; ++i) {
    const sb::DpPair& pair = p.pairs[i];
    if (pair.table < 0 || pair.table >= p.num_tables)
      return Status::InvalidArgument("fake emb_dp_step: pair ", i, " names table ", pair.table);
    SR_RETURN_IF_ERROR(Need(mem, pair.offsets, p.batch_size + 1, 8, "pair offsets"));
    if (pair.div != nullptr) SR_RETURN_IF_ERROR(Need(mem, pair.div, p.batch_size, 4, "divisors"));
    if (pair.offsets[0] != p.pair_first[i] || pair.offsets[p.batch_size] != p.pair_first[i + 1])
      return Status::InvalidArgument("fake emb_dp_step: pair ", i, "'s offsets leave its ids");
    const int64_t rows = p.key_first[pair.table + 1] - p.key_first[pair.table];
    const int32_t dim = p.tables[pair.table].dim;
    if (pair.col < 0 || pair.col + dim > p.stride)
      return Status::InvalidArgument("fake emb_dp_step: pair ", i, "'s columns leave the rows");
    for (int64_t j = p.pair_first[i]; j < p.pair_first[i + 1]; ++j) {
      if (p.rows[j] < 0 || p.rows[j] >= rows)
        return Status::InvalidArgument("fake emb_dp_step: id ", j, " row ", p.rows[j],
                                       " outside its table");
      const int64_t target = p.pos != nullptr ? p.pos[j] + 1 : p.batch_size;
      grad_rows = target > grad_rows ? target : grad_rows;
    }
  }
  return Need(mem, p.grad, grad_rows * p.stride, 4, "output gradient");
}

Status CheckCompact(const DeviceMemory& mem, const sb::DpParams& p) {
  SR_RETURN_IF_ERROR(Need(mem, p.rows_out, p.num_keys, 8, "compacted rows"));
  int64_t grads = 0;
  for (int64_t t = 0; t < p.num_tables; ++t) {
    const int64_t end =
        p.tables[t].grad_at + (p.key_first[t + 1] - p.key_first[t]) * p.tables[t].dim;
    grads = end > grads ? end : grads;
  }
  SR_RETURN_IF_ERROR(Need(mem, p.grads_out, grads, 4, "compacted gradients"));
  SR_RETURN_IF_ERROR(Need(mem, p.counts_out, p.num_tables, 8, "counts"));
  if (p.gate != nullptr) SR_RETURN_IF_ERROR(Need(mem, p.gate, 1, 8, "gate"));
  return Status::Ok();
}

// The pipeline's host executor (warps one after another, standard sort and scans).
using Exec = sb::HostExec;

}  // namespace

Status RunDpWorkspaceBytes(int64_t max_ids, int64_t num_keys, size_t* bytes) {
  if (bytes == nullptr) return Status::InvalidArgument("bytes must not be NULL");
  if (max_ids < 0 || num_keys < 0) return Status::InvalidArgument("negative sizes");
  sb::DpScratch s;
  void* temp = nullptr;
  *bytes = sb::CarveDp(nullptr, max_ids, num_keys, kTempBytes, &s, &temp);
  return Status::Ok();
}

Status RunDpStep(const DeviceMemory& mem, const shardrec_plugin_dp_t* dp, int32_t phase, void* ws,
                 size_t ws_bytes) {
  if (dp == nullptr) return Status::InvalidArgument("dp must not be NULL");
  const sb::DpParams p = k::abi::FromAbi(*dp);
  if (p.num_ids < 0 || p.num_pairs < 0 || p.num_tables < 0 || p.num_keys < 0 || p.dense_floats < 0)
    return Status::InvalidArgument("fake emb_dp_step: negative sizes");
  if (phase != SHARDREC_PLUGIN_DP_ACCUMULATE && phase != SHARDREC_PLUGIN_DP_COMPACT)
    return Status::InvalidArgument("fake emb_dp_step: phase ", phase, " is unknown");
  sb::DpScratch s;
  void* temp = nullptr;
  const size_t need =
      sb::CarveDp(static_cast<uint8_t*>(ws), p.num_ids, p.num_keys, kTempBytes, &s, &temp);
  SR_RETURN_IF_ERROR(mem.Check(ws, need, "data-parallel workspace"));
  if (ws_bytes < need)
    return Status::InvalidArgument("fake emb_dp_step: workspace of ", ws_bytes, " bytes, ", need,
                                   " needed");
  SR_RETURN_IF_ERROR(CheckTables(mem, p));
  Exec ex;
  if (phase == SHARDREC_PLUGIN_DP_ACCUMULATE) {
    SR_RETURN_IF_ERROR(CheckAccumulate(mem, p));
    sb::DpAccumulateSteps(ex, p, s);
  } else {
    SR_RETURN_IF_ERROR(CheckCompact(mem, p));
    sb::DpCompactSteps(ex, p, s);
  }
  return Status::Ok();
}

Status RunRowPhaseCounted(const DeviceMemory& mem, const shardrec_plugin_optimizer_t* config,
                          int64_t step, int32_t full_dim, const shardrec_plugin_shard_t* shard,
                          const shardrec_plugin_counted_rows_t* rows, float* partial,
                          const float* full, int32_t phase) {
  if (rows == nullptr) return Status::InvalidArgument("rows must not be NULL");
  if (phase != 1 && phase != 2)
    return Status::InvalidArgument("fake emb_row_phase_counted: phase ", phase, " is unknown");
  optim::OptimizerConfig c;
  optim::ShardParams s;
  SR_RETURN_IF_ERROR(CheckShardArgs(mem, config, shard, &c, &s));
  const k::CountedRows r = k::abi::FromAbi(*rows);
  if (r.count == nullptr || r.max_rows < 0)
    return Status::InvalidArgument("fake emb_row_phase_counted: no count, or negative rows");
  SR_RETURN_IF_ERROR(mem.Check(r.count, 8, "row count"));
  const int ns = optim::NumRowStats(c.type);
  if (r.max_rows == 0 || (phase == 1 && ns == 0)) return Status::Ok();
  SR_RETURN_IF_ERROR(mem.Check(r.rows, static_cast<size_t>(r.max_rows) * 8, "counted rows"));
  SR_RETURN_IF_ERROR(
      mem.Check(r.grads, static_cast<size_t>(r.max_rows * s.cols) * 4, "counted gradients"));
  const size_t stats = static_cast<size_t>(r.max_rows) * static_cast<size_t>(ns) * 4;
  if (phase == 1) SR_RETURN_IF_ERROR(mem.Check(partial, stats, "partial_stats"));
  if (phase == 2 && ns > 0) SR_RETURN_IF_ERROR(mem.Check(full, stats, "full_stats"));
  sb::RowPhaseParams q;
  q.p = optim::MakeRowParams(c, step, phase == 1 ? s.cols : full_dim, s);
  q.rows = r.rows;
  q.grads = r.grads;
  q.stats = partial;
  q.full = full;
  q.count = r.count;
  q.max_rows = r.max_rows;
  q.ns = ns;
  q.phase = phase;
  const int64_t n = sb::RowPhaseRows(q);
  for (int64_t u = 0; u < n; ++u)
    if (r.rows[u] < 0 || r.rows[u] >= s.rows)
      return Status::InvalidArgument("fake: counted row ", r.rows[u], " outside the shard");
  simt::HostWarp w(0);
  for (int64_t item = 0; item < sb::RowPhaseItems(q); ++item) sb::RowPhaseItem(w, q, item);
  return Status::Ok();
}

}  // namespace shardrec::fake
