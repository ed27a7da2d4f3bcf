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

Status MpiCommunicator::Exchange(Part part, const char* what, const std::vector<Block>& sends,
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
    for (size_t p = 0, n = NumMessages(b.bytes, limit); p < n; ++p) {
      const Piece piece = PieceAt(b.bytes, limit, p);
      SR_RETURN_IF_ERROR(Start(t_->recv(h_, b.ptr + piece.offset, static_cast<int32_t>(piece.count),
                                        peer, TagOf(part, p + 1 == n), &st),
                               st));
    }
  }
  for (int i = 1; i < size_; ++i) {
    const int peer = (rank_ + i) % size_;
    const Block& b = sends[peer];
    for (size_t p = 0, n = NumMessages(b.bytes, limit); p < n; ++p) {
      const Piece piece = PieceAt(b.bytes, limit, p);
      SR_RETURN_IF_ERROR(Start(t_->send(h_, b.ptr + piece.offset, static_cast<int32_t>(piece.count),
                                        peer, TagOf(part, p + 1 == n), &st),
                               st));
    }
  }
  return Wait(what, timeout);
}

Status MpiCommunicator::EmptyExchange(Part part, const char* what,
                                      std::chrono::milliseconds timeout) {
  // Not MPI_Ibarrier: its messages carry no tag, so a peer in another collective would leave
  // both waiting for their timeouts instead of failing at once. W - 1 messages per rank (MPI's
  // barrier needs log2 W rounds, but each round is one more wait here).
  const std::vector<Block> none(size_, Block{nullptr, 0});
  return Exchange(part, what, none, none, timeout);
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
  return Exchange(Part::kAllToAll, "alltoallv", sends, recvs, timeout);
}

Status MpiCommunicator::HostAllGatherV(Part part, const char* what, const void* send,
                                       size_t send_count, void* recv,
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
  return Exchange(part, what, sends, recvs, timeout);
}

Status MpiCommunicator::HostReduceScatterV(Part part, const char* what, const void* send,
                                           void* recv, std::span<const size_t> recv_counts,
                                           DType dtype, ReduceOp op,
                                           std::chrono::milliseconds timeout) {
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
    rounds = std::max(rounds, NumMessages(recv_counts[r], unit));
  }
  const size_t messages = NumMessages(mine, unit);  // an empty block is one empty message
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
    const bool have = i < messages;
    const Piece piece = have ? PieceAt(mine, unit, i) : Piece{0, 0};
    for (int k = 1; k < size_ && have; ++k) {
      const int peer = (rank_ + size_ - k) % size_;
      SR_RETURN_IF_ERROR(Start(t_->recv(h_, slots + static_cast<size_t>(peer) * slot,
                                        static_cast<int32_t>(piece.count * width), peer,
                                        TagOf(part, i + 1 == messages), &st),
                               st));
    }
    for (int k = 1; k < size_; ++k) {
      const int peer = (rank_ + k) % size_;
      const size_t n = NumMessages(recv_counts[peer], unit);
      if (i >= n) continue;
      const Piece p = PieceAt(recv_counts[peer], unit, i);
      SR_RETURN_IF_ERROR(
          Start(t_->send(h_, in + (offsets[peer] + p.offset) * width,
                         static_cast<int32_t>(p.count * width), peer, TagOf(part, i + 1 == n), &st),
                st));
    }
    SR_RETURN_IF_ERROR(Wait(what, Remaining(deadline)));
    if (!have || piece.count == 0) continue;
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
  SR_RETURN_IF_ERROR(Exchange(Part::kAllReduce, "allreduce", sends, recvs, timeout));
  fn(recv, recvs[0].ptr, recvs[1].ptr, count);
  for (int s = 2; s < size_; ++s) fn(recv, recv, recvs[s].ptr, count);
  if (op == ReduceOp::kAvg) DivideBy(recv, count, dtype, size_);
  return Status::Ok();
}

Status MpiCommunicator::HostBroadcast(void* buf, size_t bytes, int root,
                                      std::chrono::milliseconds timeout) {
  if (size_ == 1) return Status::Ok();
  // Point-to-point down a binomial tree, not MPI_Ibcast: Open MPI reports a failed MPI_Ibcast
  // (a rank passing a smaller count than the root's) to MPI_COMM_WORLD's error handler, fatal
  // by default, where these messages' sizes and tags are checked and a mismatch is returned.
  // Ranks count from the root: rank v receives from v without its lowest set bit and passes the
  // data on to v + m for every power of two m below that bit (the root: below the world), the
  // largest subtree first. Every rank receives and sends whole blocks: two waits, log2(W) deep.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const size_t limit = UnitsPerPiece(max_message_bytes_, 1);
  const size_t n = NumMessages(bytes, limit);
  auto* base = static_cast<uint8_t*>(buf);
  const int v = (rank_ - root + size_) % size_;
  int mask = 1;
  while (mask < size_ && (v & mask) == 0) mask <<= 1;
  shardrec_plugin_status_t st{};
  if (v != 0) {
    const int parent = (v - mask + root) % size_;
    for (size_t p = 0; p < n; ++p) {
      const Piece piece = PieceAt(bytes, limit, p);
      SR_RETURN_IF_ERROR(Start(t_->recv(h_, base + piece.offset, static_cast<int32_t>(piece.count),
                                        parent, TagOf(Part::kBroadcast, p + 1 == n), &st),
                               st));
    }
    Status s = Wait("broadcast", Remaining(deadline));
    if (!s.ok()) {
      // This rank's subtree would wait for its timeout: tell it now (an empty message it will
      // report as its parent's failure). A timeout is its own too; nothing is awaited here.
      for (int m = mask >> 1; m > 0; m >>= 1) {
        if (s.code() != Code::kRemote || v + m >= size_) continue;
        t_->send(h_, nullptr, 0, (v + m + root) % size_, TagOf(Part::kBroadcastFailed, true), &st);
      }
      return s;
    }
  }
  for (int m = mask >> 1; m > 0; m >>= 1) {
    if (v + m >= size_) continue;
    for (size_t p = 0; p < n; ++p) {
      const Piece piece = PieceAt(bytes, limit, p);
      SR_RETURN_IF_ERROR(
          Start(t_->send(h_, base + piece.offset, static_cast<int32_t>(piece.count),
                         (v + m + root) % size_, TagOf(Part::kBroadcast, p + 1 == n), &st),
                st));
    }
  }
  return Wait("broadcast", Remaining(deadline));
}

}  // namespace shardrec::comm::mpi
