// The reducing collectives of ShmCommunicator (AllReduce, ReduceScatterV) over the segment.
//
// Every element is reduced in rank order, ((x0 op x1) op x2) ..., whatever the algorithm and
// whichever rank computes it, so a float result is the same on every rank and from run to run.
// That is the order of Gloo's ReduceScatterV (gloo_collectives.cc), so ReduceScatterV is
// bit-identical to Gloo's at every world; AllReduce at world 2 is one operation per element,
// commutative for sum, so it matches Gloo's ring there too (min and max may pick the other of two
// equal-comparing values: a signed zero, a NaN).
#include <cstring>
#include <vector>

#include "impl/comm/reduce.h"
#include "impl/comm/shm/shm_communicator.h"
#include "impl/core/check.h"

namespace shardrec::comm::shm {

namespace {

// Up to this many bytes an all-reduce of more than two ranks gathers every rank's whole buffer
// and reduces it locally (one exchange); above it, it reduces one block per rank and gathers the
// blocks (two exchanges, each moving 1/n of the buffer per peer). Two ranks always take the first:
// it moves the same bytes as the second in half the round trips.
constexpr size_t kOneShotBytes = size_t{64} << 10;

// dst = src[0] op src[1] op ... in rank order (n >= 2); dst may alias src[0] or src[1] only.
void FoldInRankOrder(ReduceFn fn, void* dst, const std::vector<const uint8_t*>& src, size_t n) {
  fn(dst, src[0], src[1], n);
  for (size_t p = 2; p < src.size(); ++p) fn(dst, dst, src[p], n);
}

}  // namespace

uint8_t* ShmCommunicator::Scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    scratch_.reset(new uint8_t[bytes]);
    scratch_bytes_ = bytes;
  }
  return scratch_.get();
}

Status ShmCommunicator::DoAllReduce(const void* send, void* recv, size_t count, DType dtype,
                                    ReduceOp op, const Call& call) {
  if (!host_ || count == 0)  // an empty all-reduce moves nothing on Gloo either
    return inner_->AllReduce(send, recv, count, dtype, op, Options(call));
  ReduceFn fn = nullptr;
  SR_RETURN_IF_ERROR(GetReduceFn(dtype, op, &fn));
  const auto n = static_cast<size_t>(Size()), me = static_cast<size_t>(Rank());
  const size_t e = DTypeSize(dtype), bytes = count * e;
  const auto* s = static_cast<const uint8_t*>(send);
  auto* r = static_cast<uint8_t*>(recv);
  std::vector<OutMessage> out(n);
  std::vector<InMessage> in(n);
  std::vector<const uint8_t*> src(n);
  if (n == 2 || bytes <= kOneShotBytes) {
    // In place, this rank's values are overwritten by the first step of the fold: ranks 0 and 1
    // are read by that step itself, a later rank needs a copy (the last of the scratch blocks;
    // the others hold the peers' buffers, in rank order).
    const bool copy_mine = s == r && me >= 2;
    uint8_t* peers = Scratch((copy_mine ? n : n - 1) * bytes);
    for (size_t p = 0, k = 0; p < n; ++p) {
      if (p == me) continue;
      out[p] = {s, bytes};
      in[p] = {peers + k * bytes, bytes};
      src[p] = in[p].data;
      ++k;
    }
    SR_RETURN_IF_ERROR(Exchange(out, in, "allreduce", call));
    src[me] = s;
    if (copy_mine) {
      std::memcpy(peers + (n - 1) * bytes, s, bytes);
      src[me] = peers + (n - 1) * bytes;
    }
    FoldInRankOrder(fn, r, src, count);
    if (op == ReduceOp::kAvg) DivideBy(r, count, dtype, Size());
    return Status::Ok();
  }
  // Rank p reduces block p (the first count % n blocks one element longer), then all gather.
  std::vector<size_t> first(n + 1, 0);
  for (size_t p = 0; p < n; ++p) first[p + 1] = first[p] + count / n + (p < count % n ? 1 : 0);
  const size_t mine = first[me + 1] - first[me];
  uint8_t* blocks = Scratch(n * mine * e);
  for (size_t p = 0; p < n; ++p) {
    out[p] = {s + first[p] * e, (first[p + 1] - first[p]) * e};
    in[p] = {blocks + p * mine * e, mine * e};
    src[p] = blocks + p * mine * e;
  }
  SR_RETURN_IF_ERROR(Exchange(out, in, "allreduce (reduce)", call));
  uint8_t* reduced = r + first[me] * e;
  if (mine > 0) {
    FoldInRankOrder(fn, reduced, src, mine);
    if (op == ReduceOp::kAvg) DivideBy(reduced, mine, dtype, Size());
  }
  for (size_t p = 0; p < n; ++p) {
    const bool peer = p != me;
    out[p] = {peer ? reduced : nullptr, peer ? mine * e : 0};
    in[p] = {peer ? r + first[p] * e : nullptr, peer ? (first[p + 1] - first[p]) * e : 0};
  }
  return Exchange(out, in, "allreduce (gather)", call);
}

Status ShmCommunicator::DoReduceScatterV(const void* send, void* recv,
                                         std::span<const size_t> recv_counts, DType dtype,
                                         ReduceOp op, const Call& call) {
  if (!host_) return inner_->ReduceScatterV(send, recv, recv_counts, dtype, op, Options(call));
  ReduceFn fn = nullptr;
  SR_RETURN_IF_ERROR(GetReduceFn(dtype, op, &fn));
  const auto n = static_cast<size_t>(Size()), me = static_cast<size_t>(Rank());
  const size_t e = DTypeSize(dtype), mine = recv_counts[me];
  const auto* s = static_cast<const uint8_t*>(send);
  uint8_t* blocks = Scratch(n * mine * e);
  std::vector<OutMessage> out(n);
  std::vector<InMessage> in(n);
  std::vector<const uint8_t*> src(n);
  size_t offset = 0;
  for (size_t p = 0; p < n; ++p) {
    out[p] = {recv_counts[p] > 0 ? s + offset : nullptr, recv_counts[p] * e};
    in[p] = {mine > 0 ? blocks + p * mine * e : nullptr, mine * e};
    src[p] = in[p].data;
    offset += recv_counts[p] * e;
  }
  SR_RETURN_IF_ERROR(Exchange(out, in, "reducescatterv", call));
  if (mine == 0) return Status::Ok();
  FoldInRankOrder(fn, recv, src, mine);
  if (op == ReduceOp::kAvg) DivideBy(recv, mine, dtype, Size());
  return Status::Ok();
}

}  // namespace shardrec::comm::shm
