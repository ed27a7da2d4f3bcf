// Coalesced replica sync.
#include "impl/replica/sync.h"

#include <cstring>
#include <functional>
#include <map>

#include "impl/core/check.h"
#include "impl/core/half.h"

namespace shardrec::replica {

namespace {

constexpr size_t kInPlaceBytes = size_t{1} << 20;

using ReduceFn = std::function<Status(void*, size_t, DType, comm::ReduceOp)>;

Status SyncWidened(const std::vector<const SyncBuffer*>& members, DType dtype, comm::ReduceOp op,
                   const ReduceFn& reduce, std::vector<uint8_t>* staging) {
  size_t total = 0;
  for (const SyncBuffer* b : members) total += b->count;
  staging->resize(total * sizeof(float));
  float* wide = reinterpret_cast<float*>(staging->data());
  const bool half = dtype == DType::kFloat16;
  size_t off = 0;
  for (const SyncBuffer* b : members) {
    const auto* src = static_cast<const uint16_t*>(b->data);
    for (size_t i = 0; i < b->count; ++i)
      wide[off + i] = half ? HalfToFloat(src[i]) : BFloat16ToFloat(src[i]);
    off += b->count;
  }
  SR_RETURN_IF_ERROR(reduce(wide, total, DType::kFloat32, op));
  off = 0;
  for (const SyncBuffer* b : members) {
    auto* dst = static_cast<uint16_t*>(b->data);
    for (size_t i = 0; i < b->count; ++i)
      dst[i] = half ? FloatToHalf(wide[off + i]) : FloatToBFloat16(wide[off + i]);
    off += b->count;
  }
  return Status::Ok();
}

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
    if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
      // 16-bit weights are averaged in fp32 and rounded once: reducing in 16 bits would round
      // after every addition (one ulp off the mean and more for R >= 4).
      SR_RETURN_IF_ERROR(SyncWidened(members, dtype, op, reduce, staging));
      continue;
    }
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
