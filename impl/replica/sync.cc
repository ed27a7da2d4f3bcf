// Coalesced replica sync.
#include "impl/replica/sync.h"

#include <cstring>
#include <map>

#include "impl/core/check.h"

namespace shardrec::replica {

namespace {
constexpr size_t kInPlaceBytes = size_t{1} << 20;
}  // namespace

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
  auto reduce = [&](void* data, size_t count, DType dtype, comm::ReduceOp op) -> Status {
    // Integer counters always use the built-in collective: the hook's contract is averaging.
    if (hook && op == comm::ReduceOp::kAvg) {
      SR_RETURN_IF_ERROR(hook(data, count, dtype).WithContext("custom sync hook"));
    } else {
      SR_RETURN_IF_ERROR(replica.AllReduce(data, data, count, dtype, op));
    }
    local.bytes += count * DTypeSize(dtype);
    local.collectives += 1;
    return Status::Ok();
  };
  for (auto& [key, members] : groups) {
    const DType dtype = static_cast<DType>(key.first);
    const auto op = static_cast<comm::ReduceOp>(key.second);
    const size_t esize = DTypeSize(dtype);
    // Buffers that follow each other in memory (a collection's weight and state arenas) become
    // one span. Large spans are reduced in place: packing them would only add two memory passes.
    // Small ones are packed so their number does not matter.
    std::vector<SyncBuffer> spans;
    for (const SyncBuffer* b : members) {
      if (!spans.empty() &&
          static_cast<uint8_t*>(spans.back().data) + spans.back().count * esize == b->data) {
        spans.back().count += b->count;
      } else {
        spans.push_back(*b);
      }
    }
    std::vector<const SyncBuffer*> small;
    for (const SyncBuffer& b : spans) {
      if (b.count * esize >= kInPlaceBytes || spans.size() == 1) {
        SR_RETURN_IF_ERROR(reduce(b.data, b.count, dtype, op));
      } else {
        small.push_back(&b);
      }
    }
    if (small.empty()) continue;
    size_t total = 0;
    for (const SyncBuffer* b : small) total += b->count;
    staging->resize(total * esize);
    size_t off = 0;
    for (const SyncBuffer* b : small) {
      std::memcpy(staging->data() + off, b->data, b->count * esize);
      off += b->count * esize;
    }
    SR_RETURN_IF_ERROR(reduce(staging->data(), total, dtype, op));
    off = 0;
    for (const SyncBuffer* b : small) {
      std::memcpy(b->data, staging->data() + off, b->count * esize);
      off += b->count * esize;
    }
  }
  if (stats) *stats = local;
  return Status::Ok();
}

}  // namespace shardrec::replica
