// Topology defaults, validation and bandwidth lookups.
#include "impl/planner/topology.h"

#include <cmath>

namespace shardrec::planner {

Topology Topology::Default(int32_t world_size, int32_t local_world_size, ComputeDevice device) {
  Topology t;
  t.world_size = world_size;
  t.local_world_size = local_world_size;
  t.device = device;
  if (device == ComputeDevice::kHost) {
    t.intra_node_bw = kHostIntraNodeBandwidth;
    t.inter_node_bw = kHostInterNodeBandwidth;
    t.collective_latency_ms = kHostCollectiveLatencyMs;
    t.per_id_ms = kHostPerIdMs;
  }
  return t;
}

Status Topology::Validate() const {
  if (world_size < 1)
    return Status::InvalidArgument("topology: world_size ", world_size, " must be >= 1");
  if (local_world_size < 1 || local_world_size > world_size)
    return Status::InvalidArgument("topology: ranks_per_node ", local_world_size,
                                   " must be in [1, world_size=", world_size, "]");
  if (device != ComputeDevice::kHost && device != ComputeDevice::kCuda)
    return Status::InvalidArgument("topology: unknown device type ", static_cast<int32_t>(device));
  if (!memory_bytes.empty() && memory_bytes.size() != static_cast<size_t>(world_size))
    return Status::InvalidArgument("topology: ", memory_bytes.size(),
                                   " per-rank memory capacities given for world_size ", world_size);
  for (size_t r = 0; r < memory_bytes.size(); ++r) {
    if (memory_bytes[r] <= 0)
      return Status::InvalidArgument("topology: memory of rank ", r, " must be > 0");
  }
  auto positive = [](double v) { return std::isfinite(v) && v > 0; };
  if (!positive(intra_node_bw))
    return Status::InvalidArgument("topology: intra_node_bandwidth must be finite and > 0");
  if (!positive(inter_node_bw))
    return Status::InvalidArgument("topology: inter_node_bandwidth must be finite and > 0");
  if (!(memory_bw == 0.0 || positive(memory_bw)))
    return Status::InvalidArgument("topology: memory_bandwidth must be finite and >= 0");
  if (!(collective_latency_ms >= 0.0 && std::isfinite(collective_latency_ms)))
    return Status::InvalidArgument("topology: collective_latency must be finite and >= 0");
  if (!(per_id_ms >= 0.0 && std::isfinite(per_id_ms)))
    return Status::InvalidArgument("topology: per_id_cost must be finite and >= 0");
  if (batch_size < 1)
    return Status::InvalidArgument("topology: batch_size ", batch_size, " must be >= 1");
  if (!optim::IsKnownOptimizerType(static_cast<int32_t>(optimizer)))
    return Status::InvalidArgument("topology: unknown optimizer ", static_cast<int32_t>(optimizer));
  if (!(reserved_fraction >= 0.0 && reserved_fraction < 1.0))
    return Status::InvalidArgument("topology: reserved_fraction ", reserved_fraction,
                                   " must be in [0, 1)");
  if (disk_bytes <= 0 || !positive(disk_read_bw) || !positive(disk_read_iops))
    return Status::InvalidArgument(
        "topology: disk_capacity, disk_read_bandwidth and disk_read_iops must be finite and > 0");
  return Status::Ok();
}

int64_t Topology::Memory(int32_t rank) const {
  if (!memory_bytes.empty()) return memory_bytes[static_cast<size_t>(rank)];
  return static_cast<int64_t>(device == ComputeDevice::kCuda ? kDefaultHbmCapacity
                                                             : kDefaultDdrCapacity);
}

int64_t Topology::UsableMemory(int32_t rank) const {
  return static_cast<int64_t>(
      std::floor(static_cast<double>(Memory(rank)) * (1.0 - reserved_fraction)));
}

double Topology::KernelBandwidth(bool dense) const {
  double bw = memory_bw > 0
                  ? memory_bw
                  : (device == ComputeDevice::kCuda ? kHbmBandwidth : kHostGatherBandwidth);
  return dense ? 0.5 * bw : bw;
}

double Topology::CommBandwidth(Collective c, int32_t world, int32_t local) const {
  if (c == Collective::kAllReduce) return inter_node_bw * local;
  return world <= local ? intra_node_bw : inter_node_bw;
}

}  // namespace shardrec::planner
