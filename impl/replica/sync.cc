// Coalesced replica sync.
#include "impl/replica/sync.h"

#include <cstring>
#include <map>

#include "impl/core/check.h"

namespace shardrec::replica {

Status SyncBuffers(comm::Communicator& replica, std::span<const SyncBuffer> buffers,
                   const SyncHook& hook, std::vector<uint8_t>* staging, SyncStats* stats) {
  SyncStats local;
  if (replica.Size() <= 1) {
    if (stats) *stats = local;
    return Status::Ok();
  }
  // Group by (dtype, op) in a deterministic order so every replica issues the same collectives.
  std::map<std::pair<int, int>, std::vector<const SyncBuffer*>> groups;
  for (const SyncBuffer& b : buffers) {
    if (b.count == 0) continue;
    if (b.data == nullptr) return Status::InvalidArgument("sync buffer with null data");
    if (hook && b.op != comm::ReduceOp::kAvg && b.dtype != DType::kInt64) {
      return Status::InvalidArgument("a sync hook only averages floating-point buffers");
    }
    groups[{static_cast<int>(b.dtype), static_cast<int>(b.op)}].push_back(&b);
  }
  for (auto& [key, members] : groups) {
    const DType dtype = static_cast<DType>(key.first);
    const auto op = static_cast<comm::ReduceOp>(key.second);
    const size_t esize = DTypeSize(dtype);
    size_t total = 0;
    for (const SyncBuffer* b : members) total += b->count;
    void* data = members[0]->data;
    if (members.size() > 1) {
      staging->resize(total * esize);
      size_t off = 0;
      for (const SyncBuffer* b : members) {
        std::memcpy(staging->data() + off, b->data, b->count * esize);
        off += b->count * esize;
      }
      data = staging->data();
    }
    // Integer counters always use the built-in collective: the hook's contract is averaging.
    if (hook && op == comm::ReduceOp::kAvg) {
      SR_RETURN_IF_ERROR(hook(data, total, dtype).WithContext("custom sync hook"));
    } else {
      SR_RETURN_IF_ERROR(replica.AllReduce(data, data, total, dtype, op));
    }
    local.bytes += total * esize;
    local.collectives += 1;
    if (members.size() > 1) {
      size_t off = 0;
      for (const SyncBuffer* b : members) {
        std::memcpy(b->data, staging->data() + off, b->count * esize);
        off += b->count * esize;
      }
    }
  }
  if (stats) *stats = local;
  return Status::Ok();
}

}  // namespace shardrec::replica
