// shardrec_topology_calibrate_network: the inter-host bandwidth measured over a communicator
// (comm/host_bandwidth.h) written into a topology.
#include <chrono>
#include <cmath>
#include <cstdint>

#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/comm/agree.h"
#include "impl/comm/host_bandwidth.h"
#include "impl/core/check.h"
#include "shardrec/plan.h"

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Handle;
namespace comm = shardrec::comm;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_topology_calibrate_network(shardrec_topology_t* topology,
                                                                   shardrec_comm_t* comm_handle,
                                                                   double time_budget,
                                                                   double* bandwidth_out) {
  return Enter({Handle(comm_handle, "comm")}, [&] {
    if (!comm_handle->impl->device().is_host()) {
      return Status::Unsupported(
          "shardrec_topology_calibrate_network takes a host communicator (it measures host "
          "buffers over the network)");
    }
    // A rank refusing its own arguments still joins one all-reduce, so that its peers fail at
    // once naming it instead of waiting in the measurement.
    Status local = CheckNotNull(topology, "topology");
    if (local.ok()) {
      local = shardrec::capi::CheckStructVersion(topology->version, SHARDREC_TOPOLOGY_VERSION,
                                                 "topology");
    }
    if (local.ok() && !(std::isfinite(time_budget) && time_budget >= 0 && time_budget <= 3600))
      local = Status::InvalidArgument("time_budget ", time_budget, " is outside [0, 3600] s");
    comm::Communicator& c = *comm_handle->impl;
    int64_t refusing = -1;
    const Status agreed = comm::FindRefusingRank(c, !local.ok(), &refusing);
    SR_RETURN_IF_ERROR(local);
    SR_RETURN_IF_ERROR(agreed);
    if (refusing >= 0) {
      return Status::InvalidArgument("rank ", refusing,
                                     " refused its arguments to shardrec_topology_calibrate_network"
                                     " (its error says why); no rank changed anything");
    }
    const auto budget = std::chrono::milliseconds(
        time_budget == 0 ? 500 : static_cast<int64_t>(std::llround(time_budget * 1000)));
    double measured = 0, round_ms = 0;
    SR_RETURN_IF_ERROR(comm::MeasureInterHostBandwidth(c, budget, &measured));
    // A round of the whole world at once, on one host too: the per-round cost the planner
    // charges every collective of a step (collective_latency, version >= 2).
    SR_RETURN_IF_ERROR(comm::MeasureCollectiveRound(c, &round_ms));
    if (measured > 0) topology->inter_node_bandwidth = measured;
    if (round_ms > 0 && topology->version >= 2) topology->collective_latency = round_ms / 1000.0;
    if (bandwidth_out != nullptr) *bandwidth_out = measured;
    return Status::Ok();
  });
}

}  // extern "C"
