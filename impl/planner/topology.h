// The machines a plan is made for (TorchRec's Topology) and per-table constraints
// (TorchRec's ParameterConstraints). Bandwidths are bytes per millisecond, as in TorchRec.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "impl/core/status.h"
#include "impl/optim/optimizer.h"

namespace shardrec::planner {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// TorchRec's constants.py defaults (GB = 1024^3 bytes; per second -> per ms).
constexpr double kDefaultHbmCapacity = 32.0 * kGiB;
constexpr double kDefaultDdrCapacity = 128.0 * kGiB;
constexpr double kHbmBandwidth = 897.0 * kGiB / 1000.0;
constexpr double kDdrBandwidth = 51.0 * kGiB / 1000.0;
constexpr double kIntraNodeBandwidth = 600.0 * kGiB / 1000.0;
constexpr double kInterNodeBandwidth = 12.5 * kGiB / 1000.0;
constexpr int32_t kDefaultBatchSize = 512;
// Local disk of a rank for tiered tables (docs/disk-tier.md): capacity, and random 4 KiB reads
// of a current NVMe drive shared by the node's ranks (calibrate_disk.h measures this machine's).
constexpr double kDefaultDiskCapacity = 1024.0 * kGiB;
constexpr double kDefaultDiskReadBandwidth = 1.0 * kGiB / 1000.0;  // bytes/ms
constexpr double kDefaultDiskReadIops = 100000.0 / 1000.0;         // reads/ms

// Host (CPU) defaults. TorchRec prices a CPU rank with GPU-class links (600 GB/s between ranks)
// and its 51 GB/s DDR figure, which is streaming bandwidth of a whole socket; a CPU step is
// bound instead by one rank's random-row gather, by collectives over loopback TCP (Gloo) or a
// NIC, by a fixed latency per collective and by per-id host work (route, pack, unpack, the
// backward's aggregation). These are typical of one core of a current x86 server; calibration
// (calibrate.h) replaces the bandwidths and the latency with this machine's.
constexpr double kHostGatherBandwidth = 5.0 * kGiB / 1000.0;     // random rows of 256-512 B
constexpr double kHostIntraNodeBandwidth = 2.0 * kGiB / 1000.0;  // Gloo over loopback TCP
constexpr double kHostInterNodeBandwidth = 1.0 * kGiB / 1000.0;  // ~10 Gb Ethernet
constexpr double kHostCollectiveLatencyMs = 0.05;                // per collective, world > 1
constexpr double kHostPerIdMs = 15e-6;  // 15 ns of host work per id per training step
// The host backward (aggregate the gradient by row, then read-modify-write each row and its
// optimizer state at random) over the forward's compute, in two parts: the aggregation, paid per
// id like the forward, and the update, paid per distinct row. With every id on its own row the
// two sum to kHostBwdMultiplier, measured at 1.9-2.2x the forward since the backward runs in
// vector registers (tests/bench/RESULTS.md, 2026-11-24; TorchRec uses 2 on CUDA); a shard whose
// ids repeat rows updates fewer rows (ExpectedUniqueRows), which on host is what makes a batch's
// backward cheaper on a small table than on a large one (measured 2026-11-24: two table-wise
// placements of the same 8 tables whose forward costs were equal gave a 34.5 ms and a 40 ms
// backward, in line with their distinct rows).
constexpr double kHostBwdMultiplier = 2.0;
constexpr double kHostBwdAggregate = 1.0;  // share of kHostBwdMultiplier paid per id
constexpr double kHostBwdUpdate = kHostBwdMultiplier - kHostBwdAggregate;  // per distinct row
// Collectives of one training step on host: the lengths and ids all-to-alls and the pooled
// output's all-to-all forward; the all-reduce that agrees on the backward call and the gradient's
// all-to-all backward. (+1 all-reduce with data-parallel tables, +1 all-to-all of row statistics
// with column shards under a row-statistic optimizer: StepOverhead.)
constexpr int kCollectivesPerStep = 5;
// Two ranks send the lengths' counts with the ids in one round (embedding/input_dist.h
// InputCaps) while batches keep their size: one collective fewer (a second round only when a
// message outgrows the agreed size, which a steady step does not).
constexpr int kCollectivesPerStepTwoRanks = kCollectivesPerStep - 1;

enum class ComputeDevice : int32_t { kHost = 0, kCuda = 1 };  // mirrors SHARDREC_DEVICE_*
enum class Collective { kAllToAll, kReduceScatter, kAllGather, kAllReduce };

// Device defaults are TorchRec's for CUDA; for host they are the kHost* figures above.
struct Topology {
  int32_t world_size = 1;
  int32_t local_world_size = 1;  // ranks per node
  ComputeDevice device = ComputeDevice::kHost;
  // Per-rank capacity in bytes (HBM for CUDA, host memory for host ranks); empty means the
  // device default for every rank.
  std::vector<int64_t> memory_bytes;
  double intra_node_bw = kIntraNodeBandwidth;  // bytes/ms
  double inter_node_bw = kInterNodeBandwidth;  // bytes/ms
  double memory_bw = 0.0;                      // bytes/ms; 0 means the device default
  // Fixed cost of one collective (ms), paid per collective of a step (StepOverhead) when
  // world_size > 1; 0 on CUDA (TorchRec's model has none).
  double collective_latency_ms = 0.0;
  // Host work per id per training step (ms), paid by the rank whose batch holds the id; 0 on
  // CUDA (TorchRec's model has none).
  double per_id_ms = 0.0;
  int32_t batch_size = kDefaultBatchSize;                       // samples per rank per step
  optim::OptimizerType optimizer = optim::OptimizerType::kSgd;  // state counted in storage
  double reserved_fraction = 0.0;  // share of each rank's memory the planner leaves free
  // Tiered tables (tier_model.h): each rank's disk capacity (bytes) and random-read figures.
  int64_t disk_bytes = static_cast<int64_t>(kDefaultDiskCapacity);
  double disk_read_bw = kDefaultDiskReadBandwidth;  // bytes/ms
  double disk_read_iops = kDefaultDiskReadIops;     // reads/ms
  // Whether table-row-wise and grid tables whose hosts are not the whole world are priced with
  // their return exchange reduced inside the host (host_reduce.h) or flat; the planner prices a
  // plan both ways and keeps the cheaper (sharding::Plan::host_reduce).
  bool host_reduce = true;

  // A topology with the defaults of `device` (world_size ranks, local_world_size per node).
  static Topology Default(int32_t world_size, int32_t local_world_size, ComputeDevice device);

  // Ranges and consistency; the message names the field.
  Status Validate() const;

  // Capacity of `rank` after the reservation, in bytes.
  int64_t UsableMemory(int32_t rank) const;
  // Capacity of `rank` before the reservation.
  int64_t Memory(int32_t rank) const;
  // Memory bandwidth of the fused (`dense == false`) or dense kernel, bytes/ms (TorchRec's
  // kernel_bw_lookup: dense kernels get half).
  double KernelBandwidth(bool dense) const;
  // TorchRec's BasicCommsBandwidths.get_bw: all-reduce gets inter_bw * local ("1 NIC per
  // GPU"); others intra when the group fits in a node, else inter.
  double CommBandwidth(Collective c, int32_t world, int32_t local) const;
  bool NodeLocalTypesAllowed() const { return world_size % local_world_size == 0; }
};

// TorchRec's ParameterConstraints subset, keyed by table name.
struct TableConstraints {
  std::string table;
  uint32_t sharding_types = 0;  // bitmask of 1u << ShardingType; 0 = default set (no grid)
  int32_t min_partition = 0;    // column block lower bound; 0 = 128 (or even split, see below)
  // Shards go only to these ranks. With CW/TWCW and min_partition == 0, the dim is split
  // evenly over them (TorchRec's manual column_wise(ranks=...)) when it divides.
  std::vector<int32_t> ranks;
  std::vector<float> pooling_factors;  // per feature of the table; empty = feature configs
  // A tiered table (tier_model.h): each rank's cache of it in bytes (0: held in memory), the
  // expected hit rate (< 0: estimated) and its ids' Zipf exponent (0: uniform).
  int64_t tier_cache_bytes = 0;
  double tier_hit_rate = -1;
  double id_zipf_alpha = 0;
};

// Bit of a sharding type in TableConstraints::sharding_types.
constexpr uint32_t TypeBit(int32_t type) { return 1u << type; }
// Every type except grid: the planner's default choice set on host and CUDA alike.
constexpr uint32_t kDefaultTypeMask = 0x3Fu;
constexpr uint32_t kAllTypesMask = 0x7Fu;

}  // namespace shardrec::planner
