// NUMA node choice and process binding through hwloc (Debian libhwloc-dev), which reads the
// topology the kernel and any container restrictions expose, so nothing here parses sysfs.
#include "impl/core/numa_binding.h"

#include <memory>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/config.h"

#if SHARDREC_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace shardrec {

#if SHARDREC_HAVE_HWLOC
namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using Topology = std::unique_ptr<hwloc_topology, TopologyDeleter>;

Status LoadTopology(Topology* out) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return Status::Error("hwloc_topology_init failed");
  Topology topo(raw);
  if (hwloc_topology_load(topo.get()) != 0) return Status::Error("hwloc_topology_load failed");
  *out = std::move(topo);
  return Status::Ok();
}

}  // namespace

Status BindToLocalNumaNode(int32_t local_rank, int32_t local_size, int32_t* node_out) {
  if (local_size <= 0 || local_rank < 0 || local_rank >= local_size) {
    return Status::InvalidArgument("local rank ", local_rank, " is not in [0, local size ",
                                   local_size, ")");
  }
  Topology topo;
  SR_RETURN_IF_ERROR(LoadTopology(&topo));
  // Memory-only nodes (CXL, HBM exposed as a node) have no CPUs to run on: skip them.
  std::vector<hwloc_obj_t> nodes;
  const int count = hwloc_get_nbobjs_by_type(topo.get(), HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < count; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo.get(), HWLOC_OBJ_NUMANODE, i);
    if (node != nullptr && node->cpuset != nullptr && !hwloc_bitmap_iszero(node->cpuset)) {
      nodes.push_back(node);
    }
  }
  if (nodes.empty()) return Status::Unsupported("hwloc found no NUMA node with CPUs on this host");
  const auto index =
      static_cast<int32_t>(int64_t{local_rank} * static_cast<int64_t>(nodes.size()) / local_size);
  if (hwloc_set_cpubind(topo.get(), nodes[static_cast<size_t>(index)]->cpuset,
                        HWLOC_CPUBIND_PROCESS) != 0) {
    return Status::Error("hwloc_set_cpubind to NUMA node ", index, " failed");
  }
  if (node_out != nullptr) *node_out = index;
  return Status::Ok();
}

#else

Status BindToLocalNumaNode(int32_t, int32_t, int32_t*) {
  return Status::Unsupported(
      "libshardrec was built without hwloc (libhwloc-dev): NUMA binding "
      "is not available");
}

#endif

}  // namespace shardrec
