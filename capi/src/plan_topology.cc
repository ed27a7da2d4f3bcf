// C API of plan.h's topology calls: the topology struct's initialiser, its local layout from a
// communicator, and its calibration on this machine (compute, shared memory, loopback, disk).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "capi/src/calibrate_shm.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/comm/shm/host_setup.h"
#include "impl/core/check.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/planner/calibrate.h"
#include "impl/planner/calibrate_disk.h"
#include "impl/sharding/types.h"
#include "shardrec/plan.h"

namespace shardrec::capi {
namespace {

// The calibration's gather runs the collections' lookup kernel on the calling thread, so the
// figure is the one their lookups reach (planner::CalibrateOptions::bag_sum).
void LookupBagSum(const float* table, int64_t table_rows, int32_t row_floats,
                  const int64_t* offsets, int64_t num_bags, const int64_t* rows, float* out) {
  embedding::kernels::LookupJob job;
  job.weights = {table, DType::kFloat32, table_rows, row_floats, row_floats};
  job.run.offsets = offsets;
  job.run.num_bags = num_bags;
  job.run.rows = rows;
  job.out = out;
  job.out_stride = row_floats;
  // An fp32 table on a host context cannot be refused.
  (void)embedding::kernels::Lookup(ExecContext::Host(nullptr), {&job, 1});
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::NotNull;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_topology_init(shardrec_topology_t* topology,
                                                      uint32_t version) {
  const shardrec_topology_t d = SHARDREC_TOPOLOGY_INIT;
  return shardrec::capi::InitStruct(
      topology, version, SHARDREC_TOPOLOGY_VERSION, d, "topology",
      {offsetof(shardrec_topology_t, collective_latency),
       offsetof(shardrec_topology_t, disk_capacity), sizeof(shardrec_topology_t)});
}

SHARDREC_API shardrec_status_t shardrec_topology_from_comm(shardrec_topology_t* topology,
                                                           shardrec_comm_t* comm) {
  return Enter({}, [&] {
    using shardrec::comm::ReduceOp;
    if (comm == nullptr || !comm->impl) return Status::InvalidArgument("comm must not be NULL");
    // Both refusals depend only on how the communicator was made, which every rank shares, so
    // no rank is left waiting in the all-reduce below.
    if (comm->local_size < 0)
      return Status::Unsupported(
          "the local size of a device communicator is known only when it was created from a "
          "launcher's environment; set topology.ranks_per_node by hand");
    if (!comm->impl->device().is_host())
      return Status::Unsupported(
          "shardrec_topology_from_comm takes a host communicator (its check of the hosts runs "
          "on host buffers); set topology.ranks_per_node from shardrec_comm_local_size");
    // A rank refusing its own topology (NULL, an unknown version) still takes part in the
    // all-reduce below, so its peers fail at once naming it instead of waiting for it.
    Status local = CheckNotNull(topology, "topology");
    if (local.ok())
      local = shardrec::capi::CheckStructVersion(topology->version, SHARDREC_TOPOLOGY_VERSION,
                                                 "topology");
    // The planner has one ranks_per_node, so every host must run as many ranks: min and max in
    // one all-reduce (the max as the min of the negated sizes), with the lowest refusing rank
    // (as the min of -(size - rank), 0 when none refused).
    const int32_t size = comm->impl->Size(), rank = comm->impl->Rank();
    int32_t sizes[3] = {comm->local_size, -comm->local_size, local.ok() ? 0 : -(size - rank)};
    const Status exchanged =
        comm->impl->AllReduce(sizes, sizes, 3, shardrec::DType::kInt32, ReduceOp::kMin);
    SR_RETURN_IF_ERROR(local);
    SR_RETURN_IF_ERROR(exchanged);
    if (sizes[2] != 0)
      return Status::InvalidArgument("rank ", size + sizes[2],
                                     " refused its arguments to shardrec_topology_from_comm (its "
                                     "error says why); no rank changed anything");
    if (sizes[0] != -sizes[1])
      return Status::InvalidArgument(
          "hosts run different numbers of ranks (between ", sizes[0], " and ", -sizes[1],
          "); the planner's ranks_per_node is one number: set it by hand or launch as many "
          "ranks on every host");
    topology->world_size = comm->impl->Size();
    topology->ranks_per_node = comm->local_size;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t
shardrec_calibrate_options_init(shardrec_calibrate_options_t* options, uint32_t version) {
  const shardrec_calibrate_options_t d = SHARDREC_CALIBRATE_OPTIONS_INIT;
  return shardrec::capi::InitStruct(options, version, SHARDREC_CALIBRATE_OPTIONS_VERSION, d,
                                    "calibrate options");
}

SHARDREC_API shardrec_status_t shardrec_calibration_init(shardrec_calibration_t* calibration,
                                                         uint32_t version) {
  const shardrec_calibration_t d = SHARDREC_CALIBRATION_INIT;
  return shardrec::capi::InitStruct(
      calibration, version, SHARDREC_CALIBRATION_VERSION, d, "calibration",
      {offsetof(shardrec_calibration_t, shm_bandwidth), sizeof(shardrec_calibration_t)});
}

SHARDREC_API shardrec_status_t shardrec_topology_calibrate_disk(
    shardrec_topology_t* topology, const char* dir, uint64_t file_bytes, double time_budget,
    double* iops_out, int32_t* direct_out) {
  return Enter({NotNull(topology, "topology"), NotNull(dir, "dir")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(topology->version,
                                                          SHARDREC_TOPOLOGY_VERSION, "topology"));
    if (topology->version < 3)
      return Status::InvalidArgument(
          "topology: disk calibration needs struct version >= 3 (older versions have no disk "
          "figures); fill it with shardrec_topology_init(t, SHARDREC_TOPOLOGY_VERSION)");
    if (!(time_budget >= 0.0 && time_budget <= 3600.0))
      return Status::InvalidArgument("time_budget ", time_budget, " must be in [0, 3600] seconds");
    SR_RETURN_IF_ERROR(shardrec::sharding::CheckWorldSize(topology->world_size, "topology"));
    if (topology->ranks_per_node < 0 || topology->ranks_per_node > topology->world_size)
      return Status::InvalidArgument("topology: ranks_per_node ", topology->ranks_per_node,
                                     " must be in [0, world_size=", topology->world_size, "]");
    const double ranks =
        topology->ranks_per_node == 0 ? topology->world_size : topology->ranks_per_node;
    shardrec::planner::DiskCalibration c;
    SR_RETURN_IF_ERROR(
        shardrec::planner::CalibrateDisk(dir, file_bytes == 0 ? uint64_t{256} << 20 : file_bytes, 8,
                                         (time_budget > 0 ? time_budget : 1.0) * 1000.0, &c));
    // Per ms inside, per second here; the machine's figures shared by its ranks.
    topology->disk_read_iops = c.read_iops * 1000.0 / ranks;
    topology->disk_read_bandwidth = c.read_bw * 1000.0 / ranks;
    if (topology->disk_capacity == 0)
      topology->disk_capacity = static_cast<uint64_t>(static_cast<double>(c.free_bytes) / ranks);
    if (iops_out != nullptr) *iops_out = c.read_iops * 1000.0;
    if (direct_out != nullptr) *direct_out = c.direct_io ? 1 : 0;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_topology_calibrate(
    shardrec_topology_t* topology, const shardrec_calibrate_options_t* options,
    shardrec_calibration_t* calibration) {
  return Enter({}, [&] {
    using shardrec::capi::CheckStructVersion;
    using shardrec::capi::Enter;
    using shardrec::capi::NotNull;
    SR_RETURN_IF_ERROR(CheckNotNull(topology, "topology"));
    SR_RETURN_IF_ERROR(
        CheckStructVersion(topology->version, SHARDREC_TOPOLOGY_VERSION, "topology"));
    if (topology->version < 2)
      return Status::InvalidArgument(
          "topology: calibration needs struct version >= 2 (version 1 has no "
          "collective_latency); fill it with shardrec_topology_init(t, SHARDREC_TOPOLOGY_VERSION)");
    shardrec::planner::CalibrateOptions opts;
    if (options != nullptr) {
      SR_RETURN_IF_ERROR(CheckStructVersion(options->version, SHARDREC_CALIBRATE_OPTIONS_VERSION,
                                            "calibrate options"));
      if (!(options->time_budget >= 0.0) || !std::isfinite(options->time_budget))
        return Status::InvalidArgument("calibrate options: time_budget ", options->time_budget,
                                       " must be finite and >= 0");
      if (options->threads_per_rank < 0 || options->threads_per_rank > 256)
        return Status::InvalidArgument("calibrate options: threads_per_rank ",
                                       options->threads_per_rank, " must be in [0, 256]");
      opts.ranks_share_memory = options->ranks_share_memory != 0;
      opts.threads_per_rank = std::max(options->threads_per_rank, 1);
      if (options->time_budget > 0) opts.budget_ms = options->time_budget * 1000.0;
    }
    if (calibration != nullptr)
      SR_RETURN_IF_ERROR(
          CheckStructVersion(calibration->version, SHARDREC_CALIBRATION_VERSION, "calibration"));
    SR_RETURN_IF_ERROR(shardrec::sharding::CheckWorldSize(topology->world_size, "topology"));
    if (topology->ranks_per_node < 0 || topology->ranks_per_node > topology->world_size)
      return Status::InvalidArgument("topology: ranks_per_node ", topology->ranks_per_node,
                                     " must be in [0, world_size=", topology->world_size,
                                     "] before calibrating");
    if (!(topology->per_id_cost >= 0.0))
      return Status::InvalidArgument("topology: per_id_cost must be >= 0");
    opts.ranks_per_node =
        topology->ranks_per_node == 0 ? topology->world_size : topology->ranks_per_node;
    if (options != nullptr) {
      if (options->ranks_per_machine < 0 || options->ranks_per_machine > 65536)
        return Status::InvalidArgument("calibrate options: ranks_per_machine ",
                                       options->ranks_per_machine, " must be in [0, 65536]");
      if (options->ranks_per_machine > 0) opts.ranks_per_node = options->ranks_per_machine;
    }
    opts.bag_sum = &shardrec::capi::LookupBagSum;
    opts.shm_probe = &shardrec::capi::ProbeSharedMemory;
    shardrec::planner::Calibration c;
    SR_RETURN_IF_ERROR(shardrec::planner::Calibrate(opts, &c));
    // Bytes/ms and ms inside; bytes/s and seconds in the C API.
    topology->memory_bandwidth = c.gather_bw * 1000.0;
    // The ranks of one host, threads of one process or processes, run their collectives through
    // a shared-memory segment, unless the transport is off, /dev/shm cannot hold the segment or
    // the host runs more ranks than it serves (then Gloo over loopback TCP). A group that spans
    // hosts runs its own collectives on Gloo (only its per-host splits take shared memory), so
    // its fixed cost per collective stays the loopback one. Rank threads also wait for one
    // another at each collective (the hand-off).
    const int32_t per_host =
        topology->ranks_per_node == 0 ? topology->world_size : topology->ranks_per_node;
    const bool shm = c.shm.available && per_host <= shardrec::comm::shm::kMaxRanks;
    const bool one_host = per_host == topology->world_size;
    topology->intra_node_bandwidth = (shm ? c.shm.bw : c.loopback_bw) * 1000.0;
    topology->collective_latency = ((shm && one_host ? c.shm.latency : c.loopback_latency) +
                                    (opts.ranks_share_memory ? c.handoff_latency : 0.0)) /
                                   1000.0;
    // Ranks beyond the cores share them: their per-id host work takes that much longer. A
    // caller's own per_id_cost stands (so calibrating twice does not scale it twice).
    if (topology->device_type == SHARDREC_DEVICE_HOST && topology->per_id_cost == 0.0)
      topology->per_id_cost = shardrec::planner::kHostPerIdMs * c.oversubscription / 1000.0;
    if (calibration != nullptr) {
      calibration->oversubscription = c.oversubscription;
      calibration->gather_bandwidth = c.gather_bw * 1000.0;
      calibration->stream_bandwidth = c.stream_bw * 1000.0;
      calibration->loopback_bandwidth = c.loopback_bw * 1000.0;
      calibration->loopback_latency = c.loopback_latency / 1000.0;
      calibration->handoff_latency = c.handoff_latency / 1000.0;
      calibration->elapsed = c.elapsed_ms / 1000.0;
      if (calibration->version >= 2) {
        calibration->shm_bandwidth = c.shm.bw * 1000.0;
        calibration->shm_latency = c.shm.latency / 1000.0;
        calibration->shm_used = shm ? 1 : 0;
      }
    }
    return Status::Ok();
  });
}

}  // extern "C"
