// TorchRec's perf and storage formulas (EmbeddingPerfEstimator, calculate_shard_storages), with
// four deliberate differences: output/comm buffers are fp32 (our forward output type), optimizer
// state is always counted from the topology's optimizer (TorchRec counts 0 when none is
// registered), a single-rank data-parallel table pays no all-reduce, and a host shard's backward
// pays its update per expected distinct row (topology.h) rather than a flat multiple of the
// forward.
#include "impl/planner/estimator.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "impl/core/check.h"
#include "impl/planner/tier_model.h"

namespace shardrec::planner {
namespace {

using sharding::ShardingType;

constexpr double kIndexBytes = 8;     // BIGINT_DTYPE
constexpr double kOutputBytes = 4;    // fp32 outputs and comm buffers
constexpr double kBwdMultiplier = 2;  // BWD_COMPUTE_MULTIPLIER
constexpr double kBatchedCopyFactor = 2.455;
constexpr double kDpElementwiseFactor = 9.22;

double BlockPenalty(int32_t dim) {
  if (dim >= 128) return 1.0;
  if (dim >= 64) return 1.15;
  return 1.75;
}

// Rounds up and clamps to [0, kMaxEstimateBytes]: a double beyond int64's range would make
// the conversion undefined (in practice a negative size).
int64_t Ceil(double v) {
  if (!(v > 0)) return 0;
  const double c = std::ceil(v);
  return c >= static_cast<double>(kMaxEstimateBytes) ? kMaxEstimateBytes : static_cast<int64_t>(c);
}

}  // namespace

int64_t SaturatingAdd(int64_t a, int64_t b) {
  return b > std::numeric_limits<int64_t>::max() - a ? std::numeric_limits<int64_t>::max() : a + b;
}

Status CheckPoolingFactor(const std::string& table, const std::string& feature, double pooling,
                          int32_t batch_size) {
  if (!std::isfinite(pooling) || pooling < 0) {
    return Status::InvalidArgument("planner: table '", table, "': feature '", feature,
                                   "': pooling factor ", pooling, " must be finite and >= 0");
  }
  if (pooling * std::max(batch_size, 1) > kMaxIdsPerBatch) {
    return Status::InvalidArgument(
        "planner: table '", table, "': feature '", feature, "': pooling factor ", pooling,
        " x batch size ", batch_size,
        " is more than 2^40 ids per batch, beyond what the "
        "estimates can represent; give the expected number of ids per sample");
  }
  return Status::Ok();
}

int64_t Storage::total() const {
  return SaturatingAdd(SaturatingAdd(weights, optimizer), SaturatingAdd(input, output));
}

Perf& Perf::operator+=(const Perf& o) {
  fwd_compute += o.fwd_compute;
  fwd_comms += o.fwd_comms;
  bwd_compute += o.bwd_compute;
  bwd_comms += o.bwd_comms;
  prefetch += o.prefetch;
  overhead += o.overhead;
  return *this;
}

Storage& Storage::operator+=(const Storage& o) {
  weights = SaturatingAdd(weights, o.weights);
  optimizer = SaturatingAdd(optimizer, o.optimizer);
  input = SaturatingAdd(input, o.input);
  output = SaturatingAdd(output, o.output);
  disk = SaturatingAdd(disk, o.disk);
  return *this;
}

TableLoad ComputeLoad(const sharding::TableConfig& table, const std::vector<float>& pooling_factors,
                      int32_t batch_size) {
  TableLoad load;
  for (size_t i = 0; i < table.features.size(); ++i) {
    const double p = i < pooling_factors.size() ? pooling_factors[i] : 1.0;
    load.ids += p * batch_size;
    load.outputs += batch_size;
  }
  if (table.pooling == sharding::PoolingType::kNone) load.outputs = load.ids;
  return load;
}

// Seconds of a sharded table's output exchange of `bytes`: TorchRec's model (all of it at the
// collective's bandwidth, the inter-node one as soon as the group spans nodes) on devices; on
// host topologies the share that stays on the host (L of the W ranks' samples, evenly) moves at
// the intra-node bandwidth and only the rest at the inter-node one, since the bed measured the
// two apart (docs/multihost.md).
double ExchangeSeconds(const Topology& topo, Collective c, double bytes) {
  const int32_t w = topo.world_size, l = topo.local_world_size;
  if (topo.device != ComputeDevice::kHost || w <= l) return bytes / topo.CommBandwidth(c, w, l);
  const double inside = static_cast<double>(l) / w;
  return bytes * inside / topo.CommBandwidth(c, l, l) +
         bytes * (1 - inside) / topo.CommBandwidth(c, w, l);
}

// The share of a row shard's pooled outputs the host exchange moves: a host shard sends (and gets
// the gradient of) a partial sum only for the samples with an id in its rows, the others being
// zero (impl/embedding/output_dist). With `per_bag` ids per sample, uniformly over the table,
// 1 - (1 - rows/table_rows)^per_bag of them (bags of 4 over 8 shards: 41 %, which the bed's
// host-link bytes showed). Devices keep TorchRec's dense exchange (1).
double SentShare(const Topology& topo, const sharding::TableConfig& table, int64_t shard_rows,
                 const TableLoad& load) {
  if (topo.device != ComputeDevice::kHost || table.pooling == sharding::PoolingType::kNone ||
      table.rows <= 0 || !(load.outputs > 0))
    return 1.0;
  const double frac = std::clamp(static_cast<double>(shard_rows) / table.rows, 0.0, 1.0);
  return 1.0 - std::pow(1.0 - frac, load.ids / load.outputs);
}

bool CanReduceInsideHost(const Topology& topo, ShardingType type) {
  return (type == ShardingType::kTableRowWise || type == ShardingType::kGrid) &&
         topo.device == ComputeDevice::kHost && topo.local_world_size > 1 &&
         topo.world_size > topo.local_world_size;
}

double StepOverhead(const Topology& topo, double ids_per_rank, bool any_data_parallel,
                    bool any_row_stat_exchange, bool any_host_reduce) {
  double ms = topo.per_id_ms * ids_per_rank;
  if (topo.world_size > 1) {
    const int base = topo.world_size == 2 ? kCollectivesPerStepTwoRanks : kCollectivesPerStep;
    ms +=
        topo.collective_latency_ms * (base + (any_data_parallel ? 1 : 0) +
                                      (any_row_stat_exchange ? 1 : 0) + (any_host_reduce ? 2 : 0));
  }
  return ms;
}

bool ExchangesRowStats(const Topology& topo, const sharding::TableConfig& table, ShardingType type,
                       const std::vector<sharding::Shard>& shards) {
  if (type == ShardingType::kDataParallel) return false;
  const auto optimizer = table.has_optimizer ? table.optimizer.type : topo.optimizer;
  if (optim::NumRowStats(optimizer) == 0) return false;
  return std::any_of(shards.begin(), shards.end(),
                     [&](const sharding::Shard& s) { return s.cols < table.dim; });
}

double ExpectedUniqueRows(double ids, double rows) {
  if (!(ids > 0) || !(rows > 0)) return 0;
  return -rows * std::expm1(-ids / rows);
}

int64_t OptimizerStateBytes(optim::OptimizerType type, int64_t rows, int32_t cols) {
  return optim::StateBytes(type, rows, cols);
}

int64_t DynamicMetadataBytes(const sharding::DynamicConfig& d, int64_t slots) {
  if (!d.enabled || slots <= 0) return 0;
  const auto pow2 = [](uint64_t x) { return static_cast<int64_t>(std::bit_ceil(x)); };
  const uint64_t n = static_cast<uint64_t>(slots);
  // As impl/embedding/dynamic/shard.cc allocates: the index (one 64-byte bucket per 8
  // slots, slot_index.cc), a 16-byte record (id, last seen, count) per slot, and the admission
  // sketch (4 rows of 16-bit counters, width a power of two >= max(64, 2 x slots)) when the
  // threshold is above 1, and the caller's 8-byte score per slot under SCORE eviction.
  int64_t bytes = (slots + 7) / 8 * 64 + slots * 16;
  if (d.admission_threshold > 1) bytes += 4 * pow2(std::max<uint64_t>(64, 2 * n)) * 2;
  if (d.eviction == sharding::DynamicConfig::Eviction::kScore) bytes += slots * 8;
  return bytes;
}

int64_t DynamicSlotsBytes(const sharding::TableConfig& table, optim::OptimizerType optimizer,
                          int64_t slots) {
  int64_t rows = 0, total = 0;
  if (__builtin_mul_overflow(slots, static_cast<int64_t>(table.dim) * DTypeSize(table.dtype),
                             &rows) ||
      __builtin_add_overflow(rows, OptimizerStateBytes(optimizer, slots, table.dim), &total) ||
      __builtin_add_overflow(total, DynamicMetadataBytes(table.dynamic, slots), &total))
    return std::numeric_limits<int64_t>::max();
  return total;
}

int64_t DynamicSlotsForBytes(const sharding::TableConfig& table, optim::OptimizerType optimizer,
                             int64_t capacity_bytes) {
  // DynamicSlotsBytes grows with the slots (the sketch in power-of-two steps), so the answer is
  // the last slot count that fits: a binary search, bounded by the rows alone and the table size
  // every plan allows.
  const int64_t row = static_cast<int64_t>(table.dim) * DTypeSize(table.dtype);
  int64_t lo = 0;
  int64_t hi = std::min(capacity_bytes / std::max<int64_t>(row, 1),
                        sharding::kMaxTableElements / std::max<int64_t>(table.dim, 1));
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (DynamicSlotsBytes(table, optimizer, mid) <= capacity_bytes)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

std::vector<ShardEstimate> EstimateShards(const Topology& topo, const sharding::TableConfig& table,
                                          const std::vector<float>& pooling_factors,
                                          ShardingType type,
                                          const std::vector<sharding::Shard>& shards,
                                          const TierHint* tier) {
  const double W = topo.world_size;
  const double L = topo.local_world_size;
  const TableLoad load = ComputeLoad(table, pooling_factors, topo.batch_size);
  const double I = load.ids;
  const double O = load.outputs;
  const double st = static_cast<double>(DTypeSize(table.dtype));
  const bool dense = type == ShardingType::kDataParallel;
  const double device_bw = topo.KernelBandwidth(dense);
  const int32_t w = topo.world_size;
  const int32_t l = topo.local_world_size;

  std::vector<ShardEstimate> out;
  out.reserve(shards.size());
  for (const auto& s : shards) {
    const double D = s.cols;
    ShardEstimate e;
    Perf& p = e.perf;
    double served = 0;  // ids this shard looks up per step (sharded types)
    Storage& m = e.storage;
    // A dynamic shard holds its slots, one zero row, and the per-slot metadata (counted here
    // with the weights: it is as large as the capacity, whatever the ids).
    const int64_t stored_rows = s.rows + (table.dynamic.enabled && s.rows > 0 ? 1 : 0);
    // An FP8 row also holds its 4-byte scale.
    m.weights =
        Ceil(static_cast<double>(stored_rows) *
             (IsFp8DType(table.dtype) ? static_cast<double>(Fp8RowBytes(s.cols)) : s.cols * st)) +
        DynamicMetadataBytes(table.dynamic, s.rows);
    // Each table counts its own optimizer's state; the topology's is the default.
    m.optimizer =
        std::min(kMaxEstimateBytes,
                 OptimizerStateBytes(table.has_optimizer ? table.optimizer.type : topo.optimizer,
                                     stored_rows, s.cols));
    switch (type) {
      case ShardingType::kTableWise:
      case ShardingType::kColumnWise:
      case ShardingType::kTableColumnWise: {
        served = I * W;
        const double in_read = std::ceil(I * W * kIndexBytes);
        const double lookup = I * W * std::max(D, 32.0) * st;
        const double out_bytes = O * W * D * kOutputBytes;
        const double comms = ExchangeSeconds(topo, Collective::kAllToAll, out_bytes);
        p.fwd_compute = (in_read + lookup + out_bytes) * BlockPenalty(s.cols) / device_bw;
        p.fwd_comms = comms;
        p.bwd_comms = comms;
        m.input = Ceil(I * W * kIndexBytes);
        m.output = Ceil(O * W * D * kOutputBytes);
        break;
      }
      case ShardingType::kRowWise: {
        const double ip = I / W;
        served = ip * W;
        const double in_read = std::ceil(ip * W * kIndexBytes);
        const double lookup = ip * W * D * st;
        const double out_bytes = O * W * D * kOutputBytes;
        const bool pooled = table.pooling != sharding::PoolingType::kNone;
        const Collective fwd = pooled ? Collective::kReduceScatter : Collective::kAllToAll;
        const Collective bwd = pooled ? Collective::kAllGather : Collective::kAllToAll;
        const double sent = out_bytes * SentShare(topo, table, s.rows, load);
        p.fwd_compute = (in_read + lookup + out_bytes) / device_bw;
        p.fwd_comms = ExchangeSeconds(topo, fwd, sent);
        p.bwd_comms = ExchangeSeconds(topo, bwd, sent) + out_bytes * kBatchedCopyFactor / device_bw;
        m.input = Ceil(ip * W * kIndexBytes);
        m.output = s.rows == 0 ? 0 : Ceil(O * W * D * kOutputBytes);
        break;
      }
      case ShardingType::kTableRowWise:
      case ShardingType::kGrid: {
        const double ip = I / L;
        served = ip * W;
        const double in_read = std::ceil(ip * W * kIndexBytes);
        const double lookup = ip * W * D * st;
        const double out_bytes = O * W * D * kOutputBytes;
        const double intra = topo.CommBandwidth(Collective::kReduceScatter, l, l);
        if (topo.device == ComputeDevice::kHost &&
            !(topo.host_reduce && CanReduceInsideHost(topo, type))) {
          // Flat: every shard returns its partial sums to each sample's rank, as row-wise does;
          // also where nothing can be reduced inside a host (one host: the whole world is the
          // host, and the collection exchanges flat, host_reduce.cc).
          p.fwd_compute = (in_read + lookup + out_bytes) / device_bw;
          p.fwd_comms = ExchangeSeconds(topo, Collective::kAllToAll,
                                        out_bytes * SentShare(topo, table, s.rows, load));
          p.bwd_comms = p.fwd_comms + out_bytes * kBatchedCopyFactor / device_bw;
          m.input = Ceil(ip * W * kIndexBytes);
          m.output = s.rows == 0 ? 0 : Ceil(O * W * D * kOutputBytes);
          break;
        }
        double cross = 0;
        if (w > l) {
          // The host's shards reduce their partial sums inside it first (host_reduce.h): one
          // row per sample of the other hosts' W - L ranks crosses, its aggregation spread over
          // the L ranks of the host.
          const double remote = topo.device == ComputeDevice::kHost ? W - L : W;
          cross = O * remote / L * D * kOutputBytes /
                  topo.CommBandwidth(Collective::kAllToAll, w / l, 1);
        }
        p.fwd_compute = (in_read + lookup + out_bytes) / device_bw;
        p.fwd_comms = out_bytes / intra + cross;
        p.bwd_comms = out_bytes / intra + cross + out_bytes * kBatchedCopyFactor / device_bw;
        m.input = Ceil(ip * W * kIndexBytes);
        m.output = s.rows == 0 ? 0 : Ceil(O * W * D * kOutputBytes);
        break;
      }
      case ShardingType::kDataParallel: {
        const double in_read = std::ceil(I * kIndexBytes);
        const double lookup = I * D * st;
        const double out_bytes = O * D * st;
        p.fwd_compute = (in_read + lookup + out_bytes) / device_bw;
        const double table_bytes = static_cast<double>(table.rows) * table.dim * st;
        double allreduce = 0;
        if (w > 1) {
          const double n = std::min(W / L, 2.0);
          allreduce =
              table_bytes * (2 * n - 1) / n / topo.CommBandwidth(Collective::kAllReduce, w, l);
          if (W > 2 * L) allreduce *= 2;
        }
        p.bwd_comms = allreduce + table_bytes * kDpElementwiseFactor / device_bw;
        if (table.dynamic.enabled && w > 1) {
          // The copies agree on each forward's inserts (docs/dynamic-tables.md): every rank
          // gathers every rank's ids (8 bytes each) and translates all of them.
          const double gathered = I * W * 8.0;
          p.fwd_comms += gathered / topo.CommBandwidth(Collective::kAllGather, w, l);
          p.fwd_compute += gathered / device_bw;
        }
        m.input = Ceil(I * kIndexBytes);
        m.output = Ceil(O * D * kOutputBytes);
        break;
      }
    }
    if (topo.device != ComputeDevice::kHost) {
      p.bwd_compute = p.fwd_compute * kBwdMultiplier;
    } else if (type == ShardingType::kDataParallel || !(served > 0)) {
      p.bwd_compute = p.fwd_compute * kHostBwdMultiplier;
    } else {
      // Aggregation per id, update per distinct row (topology.h).
      const double unique = ExpectedUniqueRows(served, static_cast<double>(s.rows)) / served;
      p.bwd_compute = p.fwd_compute * (kHostBwdAggregate + kHostBwdUpdate * unique);
    }
    if (tier != nullptr) ApplyTier(topo, table, *tier, s, served, &e);
    out.push_back(e);
  }
  return out;
}

}  // namespace shardrec::planner
