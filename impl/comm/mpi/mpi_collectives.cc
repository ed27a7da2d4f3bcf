// Host-memory collective bodies of MpiCommunicator. All-to-all-v and all-gather-v are
// point-to-point exchanges (MPI_Isend/Irecv per peer, chunked to int counts, pointers in
// size_t), so no int displacement can overflow; all-reduce is MPI_Iallreduce in pieces;
// reduce-scatter-v is the exchange plus a local reduction in rank order, as on Gloo, so its
// result is bit-identical to Gloo's.
#include <cstring>

#include "impl/comm/mpi/chunking.h"
#include "impl/comm/mpi/mpi_communicator.h"
#include "impl/comm/reduce.h"
#include "impl/core/check.h"

namespace shardrec::comm::mpi {

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

Status MpiCommunicator::NativeAllReduce(const void* send, void* recv, size_t count, DType dtype,
                                        ReduceOp op, std::chrono::milliseconds timeout) {
  if (count == 0) return Status::Ok();
  const size_t width = DTypeSize(dtype);
  if (size_ == 1) {
    if (send != recv) std::memmove(recv, send, count * width);
    return Status::Ok();
  }
  const ReduceOp wire = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  const size_t limit = UnitsPerPiece(max_message_bytes_, width);
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  shardrec_plugin_status_t st{};
  for (size_t p = 0, n = NumPieces(count, limit); p < n; ++p) {
    const Piece piece = PieceAt(count, limit, p);
    SR_RETURN_IF_ERROR(
        Start(t_->all_reduce(h_, in + piece.offset * width, out + piece.offset * width,
                             static_cast<int32_t>(piece.count), static_cast<int32_t>(dtype),
                             static_cast<int32_t>(wire), &st),
              st));
  }
  SR_RETURN_IF_ERROR(Wait("allreduce", timeout));
  if (op == ReduceOp::kAvg) DivideBy(recv, count, dtype, size_);
  return Status::Ok();
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
  // Block d of `send` goes to rank d; this rank's block from every peer lands in the reusable
  // scratch, its own block is read where it is (no copy).
  uint8_t* gathered = Scratch(&exchange_scratch_, mine * width * static_cast<size_t>(size_));
  auto* base = const_cast<uint8_t*>(static_cast<const uint8_t*>(send));
  std::vector<Block> sends(size_), recvs(size_);
  size_t off = 0;
  for (int r = 0; r < size_; ++r) {
    sends[r] = {base + off * width, recv_counts[r] * width};
    recvs[r] = {gathered + static_cast<size_t>(r) * mine * width, mine * width};
    off += recv_counts[r];
  }
  recvs[rank_] = sends[rank_];
  SR_RETURN_IF_ERROR(Exchange("reducescatterv", sends, recvs, timeout));
  if (mine == 0) return Status::Ok();
  // Rank order, as Gloo's ReduceScatterV: ((b0 + b1) + b2) + ..., the same bits on both.
  fn(recv, recvs[0].ptr, recvs[1].ptr, mine);
  for (int s = 2; s < size_; ++s) fn(recv, recv, recvs[s].ptr, mine);
  if (op == ReduceOp::kAvg) DivideBy(recv, mine, dtype, size_);
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
