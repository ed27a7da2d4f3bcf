// Host-memory collective bodies of MpiCommunicator. All-to-all-v and all-gather-v are
// point-to-point exchanges (MPI_Isend/Irecv per peer, chunked to int counts, pointers in
// size_t), so no int displacement can overflow; reduce-scatter-v is the exchange (in rounds of
// one message per peer) plus a local reduction in rank order, as on Gloo, so its result is
// bit-identical to Gloo's; small all-reduces gather every buffer and reduce in the same rank order.
#include <algorithm>
#include <cstring>

#include "impl/comm/mpi/chunking.h"
#include "impl/comm/mpi/mpi_communicator.h"
#include "impl/comm/reduce.h"
#include "impl/core/check.h"

namespace shardrec::comm::mpi {

std::chrono::milliseconds MpiCommunicator::Remaining(
    std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds{0});
}

uint8_t* MpiCommunicator::Scratch(std::vector<uint8_t>* buf, size_t bytes) {
  // Grow-only: fresh pages for every large call would cost a page fault per 4 KiB.
  if (buf->size() < bytes) buf->resize(bytes);
  return buf->data();
}

Status MpiCommunicator::Exchange(const char* what, const std::vector<Block>& sends,
                                 const std::vector<Block>& recvs,
                                 std::chrono::milliseconds timeout) {
  if (sends[rank_].bytes > 0 && sends[rank_].ptr != recvs[rank_].ptr)
    std::memmove(recvs[rank_].ptr, sends[rank_].ptr, sends[rank_].bytes);
  if (size_ == 1) return Status::Ok();
  const size_t limit = UnitsPerPiece(max_message_bytes_, 1);
  shardrec_plugin_status_t st{};
  // Receives first, so that eager sends land in posted buffers; peers in a rotated order so
  // that not every rank starts with rank 0.
  for (int i = 1; i < size_; ++i) {
    const int peer = (rank_ + size_ - i) % size_;
    const Block& b = recvs[peer];
    for (size_t p = 0, n = NumPieces(b.bytes, limit); p < n; ++p) {
      const Piece piece = PieceAt(b.bytes, limit, p);
      SR_RETURN_IF_ERROR(Start(
          t_->recv(h_, b.ptr + piece.offset, static_cast<int32_t>(piece.count), peer, &st), st));
    }
  }
  for (int i = 1; i < size_; ++i) {
    const int peer = (rank_ + i) % size_;
    const Block& b = sends[peer];
    for (size_t p = 0, n = NumPieces(b.bytes, limit); p < n; ++p) {
      const Piece piece = PieceAt(b.bytes, limit, p);
      SR_RETURN_IF_ERROR(Start(
          t_->send(h_, b.ptr + piece.offset, static_cast<int32_t>(piece.count), peer, &st), st));
    }
  }
  return Wait(what, timeout);
}

Status MpiCommunicator::HostAllToAllV(const void* send, std::span<const size_t> send_counts,
                                      void* recv, std::span<const size_t> recv_counts, DType dtype,
                                      std::chrono::milliseconds timeout) {
  const size_t width = DTypeSize(dtype);
  std::vector<Block> sends(size_), recvs(size_);
  size_t s_off = 0, r_off = 0;
  for (int r = 0; r < size_; ++r) {
    sends[r] = {const_cast<uint8_t*>(static_cast<const uint8_t*>(send)) + s_off * width,
                send_counts[r] * width};
    recvs[r] = {static_cast<uint8_t*>(recv) + r_off * width, recv_counts[r] * width};
    s_off += send_counts[r];
    r_off += recv_counts[r];
  }
  return Exchange("alltoallv", sends, recvs, timeout);
}

Status MpiCommunicator::HostAllGatherV(const void* send, size_t send_count, void* recv,
                                       std::span<const size_t> recv_counts, DType dtype,
                                       std::chrono::milliseconds timeout) {
  const size_t width = DTypeSize(dtype);
  // Every peer gets the same block: concurrent sends from one buffer are allowed since MPI-3.
  const Block mine{const_cast<uint8_t*>(static_cast<const uint8_t*>(send)), send_count * width};
  std::vector<Block> sends(size_, mine), recvs(size_);
  size_t off = 0;
  for (int r = 0; r < size_; ++r) {
    recvs[r] = {static_cast<uint8_t*>(recv) + off * width, recv_counts[r] * width};
    off += recv_counts[r];
  }
  return Exchange("allgatherv", sends, recvs, timeout);
}

Status MpiCommunicator::HostReduceScatterV(const void* send, void* recv,
                                           std::span<const size_t> recv_counts, DType dtype,
                                           ReduceOp op, std::chrono::milliseconds timeout) {
  const size_t width = DTypeSize(dtype);
  const size_t mine = recv_counts[rank_];
  if (size_ == 1) {
    if (mine > 0 && send != recv) std::memmove(recv, send, mine * width);
    return Status::Ok();
  }
  ReduceFn fn = nullptr;
  SR_RETURN_IF_ERROR(GetReduceFn(dtype, op, &fn));
  // Rounds of at most one MPI message per peer (chunking.h: 1 GiB unless lowered), so a single
  // round almost always. Cache-sized rounds (512 KiB) were tried and dropped: every round is one
  // more wait, and under a loaded machine each wait can cost a scheduler slice (4-8x slower at
  // 16-64 MiB, tests/bench/RESULTS.md).
  const size_t unit = UnitsPerPiece(max_message_bytes_, width);
  std::vector<size_t> offsets(size_);
  size_t rounds = 0, off = 0;
  for (int r = 0; r < size_; ++r) {
    offsets[r] = off;
    off += recv_counts[r];
    rounds = std::max(rounds, NumPieces(recv_counts[r], unit));
  }
  // One slot per rank; the own slot is only used when `recv` is this rank's block of `send` (an
  // in-place all-reduce) and the sum must not overwrite it before its turn in rank order.
  const size_t slot = std::min(unit, mine) * width;
  uint8_t* slots = Scratch(&exchange_scratch_, slot * static_cast<size_t>(size_));
  const auto* in = static_cast<const uint8_t*>(send);
  const uint8_t* own = in + offsets[rank_] * width;
  auto* out = static_cast<uint8_t*>(recv);
  const bool aliased = mine > 0 && out == own;
  shardrec_plugin_status_t st{};
  std::vector<const uint8_t*> parts(size_);
  // One deadline for all rounds: the call, not each round, is bounded by `timeout`.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Every rank runs the same number of rounds (recv_counts is the same everywhere); in round i
  // it sends piece i of every peer's block and receives piece i of its own from every peer, so
  // each pair's pieces match in order.
  for (size_t i = 0; i < rounds; ++i) {
    const bool have = i < NumPieces(mine, unit);
    const Piece piece = have ? PieceAt(mine, unit, i) : Piece{0, 0};
    for (int k = 1; k < size_ && have; ++k) {
      const int peer = (rank_ + size_ - k) % size_;
      SR_RETURN_IF_ERROR(Start(t_->recv(h_, slots + static_cast<size_t>(peer) * slot,
                                        static_cast<int32_t>(piece.count * width), peer, &st),
                               st));
    }
    for (int k = 1; k < size_; ++k) {
      const int peer = (rank_ + k) % size_;
      if (i >= NumPieces(recv_counts[peer], unit)) continue;
      const Piece p = PieceAt(recv_counts[peer], unit, i);
      SR_RETURN_IF_ERROR(Start(t_->send(h_, in + (offsets[peer] + p.offset) * width,
                                        static_cast<int32_t>(p.count * width), peer, &st),
                               st));
    }
    SR_RETURN_IF_ERROR(Wait("reducescatterv", Remaining(deadline)));
    if (!have) continue;
    for (int r = 0; r < size_; ++r) {
      parts[r] = r == rank_ ? own + piece.offset * width : slots + static_cast<size_t>(r) * slot;
    }
    uint8_t* dst = out + piece.offset * width;
    uint8_t* acc = aliased && rank_ >= 2 ? slots + static_cast<size_t>(rank_) * slot : dst;
    // Rank order, as Gloo's ReduceScatterV: ((b0 + b1) + b2) + ..., the same bits on both.
    fn(acc, parts[0], parts[1], piece.count);
    for (int s = 2; s < size_; ++s) fn(acc, acc, parts[s], piece.count);
    if (acc != dst) std::memcpy(dst, acc, piece.count * width);
    if (op == ReduceOp::kAvg) DivideBy(dst, piece.count, dtype, size_);
  }
  return Status::Ok();
}

Status MpiCommunicator::GatherAllReduce(const void* send, void* recv, size_t count, DType dtype,
                                        ReduceOp op, std::chrono::milliseconds timeout) {
  const size_t bytes = count * DTypeSize(dtype);
  ReduceFn fn = nullptr;
  SR_RETURN_IF_ERROR(GetReduceFn(dtype, op, &fn));
  // Every rank's whole buffer to every rank (the own one copied into its slot, so that an
  // in-place call cannot overwrite it before its turn), then the same rank-ordered sum
  // everywhere: one round of messages instead of the two of reduce-scatter + all-gather.
  uint8_t* slots = Scratch(&exchange_scratch_, bytes * static_cast<size_t>(size_));
  const Block mine{const_cast<uint8_t*>(static_cast<const uint8_t*>(send)), bytes};
  std::vector<Block> sends(size_, mine), recvs(size_);
  for (int r = 0; r < size_; ++r) recvs[r] = {slots + static_cast<size_t>(r) * bytes, bytes};
  SR_RETURN_IF_ERROR(Exchange("allreduce", sends, recvs, timeout));
  fn(recv, recvs[0].ptr, recvs[1].ptr, count);
  for (int s = 2; s < size_; ++s) fn(recv, recv, recvs[s].ptr, count);
  if (op == ReduceOp::kAvg) DivideBy(recv, count, dtype, size_);
  return Status::Ok();
}

Status MpiCommunicator::HostBroadcast(void* buf, size_t bytes, int root,
                                      std::chrono::milliseconds timeout) {
  if (bytes == 0 || size_ == 1) return Status::Ok();
  const size_t limit = UnitsPerPiece(max_message_bytes_, 1);
  auto* base = static_cast<uint8_t*>(buf);
  shardrec_plugin_status_t st{};
  for (size_t p = 0, n = NumPieces(bytes, limit); p < n; ++p) {
    const Piece piece = PieceAt(bytes, limit, p);
    SR_RETURN_IF_ERROR(Start(
        t_->broadcast(h_, base + piece.offset, static_cast<int32_t>(piece.count), root, &st), st));
  }
  return Wait("broadcast", timeout);
}

}  // namespace shardrec::comm::mpi
