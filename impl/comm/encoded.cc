// fp16/bf16 wire encoding of float collectives (encoded.h); FP8 is encoded_fp8.cc's.
#include "impl/comm/encoded.h"

#include <cstring>

#include "impl/comm/encoded_fp8.h"
#include "impl/core/check.h"
#include "impl/core/codec/codec.h"
#include "impl/core/cpu_features.h"

namespace shardrec::comm {

namespace {

// The codec passes of the best instruction-set level this CPU runs (same bits at every level).
const codec::Passes& Passes() { return codec::Best(); }

// Offsets of the blocks of a variable-size buffer (prefix sums of the counts).
size_t BlockOffset(std::span<const size_t> counts, int r) {
  size_t off = 0;
  for (int i = 0; i < r; ++i) off += counts[i];
  return off;
}

}  // namespace

const char* EncodingName(Encoding e) {
  return IsKnownEncoding(static_cast<int32_t>(e)) ? RowFormatName(e) : "unknown";
}

void EncodeFloats(Encoding e, const float* src, size_t n, uint16_t* dst) {
  (e == Encoding::kFp16 ? Passes().to_half : Passes().to_bf16)(src, n, dst);
}

void DecodeFloats(Encoding e, const uint16_t* src, size_t n, float* dst) {
  (e == Encoding::kFp16 ? Passes().from_half : Passes().from_bf16)(src, n, dst);
}

void DecodeAddFloats(Encoding e, const uint16_t* src, size_t n, float* dst) {
  (e == Encoding::kFp16 ? Passes().add_half : Passes().add_bf16)(src, n, dst);
}

EncodeFn EncoderFor(Encoding e) {
  SR_CHECK(IsSixteenBitEncoding(e));
  return e == Encoding::kFp16 ? Passes().to_half : Passes().to_bf16;
}

DecodeAddFn DecodeAdderFor(Encoding e) {
  SR_CHECK(IsSixteenBitEncoding(e));
  return e == Encoding::kFp16 ? Passes().add_half : Passes().add_bf16;
}

DType WireType(Encoding e) { return e == Encoding::kFp16 ? DType::kFloat16 : DType::kBFloat16; }

Status EncodedAllToAllV(Communicator& comm, Encoding e, const float* send,
                        std::span<const size_t> send_counts, float* recv,
                        std::span<const size_t> recv_counts, EncodedScratch* scratch) {
  if (e == Encoding::kFp32)
    return comm.AllToAllV(send, send_counts, recv, recv_counts, DType::kFloat32);
  if (IsFp8Format(e)) return Fp8AllToAllV(comm, e, send, send_counts, recv, recv_counts, scratch);
  const int W = comm.Size();
  const int me = comm.Rank();
  if (send_counts[me] != recv_counts[me])
    return Status::InvalidArgument("encoded all-to-all: this rank sends ", send_counts[me],
                                   " floats to itself but expects ", recv_counts[me]);
  // The own block never leaves the rank: exact copy, and a zero count on the wire.
  if (send_counts[me] > 0)
    std::memcpy(recv + BlockOffset(recv_counts, me), send + BlockOffset(send_counts, me),
                sizeof(float) * send_counts[me]);
  if (W == 1) return Status::Ok();
  scratch->send_counts.assign(send_counts.begin(), send_counts.end());
  scratch->recv_counts.assign(recv_counts.begin(), recv_counts.end());
  scratch->send_counts[me] = 0;
  scratch->recv_counts[me] = 0;
  size_t send_total = 0, recv_total = 0;
  for (int r = 0; r < W; ++r) {
    send_total += scratch->send_counts[r];
    recv_total += scratch->recv_counts[r];
  }
  if (scratch->send.size() < send_total) scratch->send.resize(send_total);
  if (scratch->recv.size() < recv_total) scratch->recv.resize(recv_total);
  const DType wire = WireType(e);
  {
    const float* src = send;
    uint16_t* dst = scratch->send.data();
    for (int r = 0; r < W; ++r) {
      if (r != me) {
        EncodeFloats(e, src, send_counts[r], dst);
        dst += send_counts[r];
      }
      src += send_counts[r];
    }
  }
  SR_RETURN_IF_ERROR(comm.AllToAllV(scratch->send.data(), scratch->send_counts,
                                    scratch->recv.data(), scratch->recv_counts, wire));
  const uint16_t* src = scratch->recv.data();
  float* dst = recv;
  for (int r = 0; r < W; ++r) {
    if (r != me) {
      DecodeFloats(e, src, recv_counts[r], dst);
      src += recv_counts[r];
    }
    dst += recv_counts[r];
  }
  return Status::Ok();
}

Status EncodedAllReduceSum(Communicator& comm, Encoding e, float* buf, size_t n,
                           EncodedScratch* scratch) {
  if (e == Encoding::kFp32) return comm.AllReduce(buf, buf, n, DType::kFloat32, ReduceOp::kSum);
  if (IsFp8Format(e)) return Fp8AllReduceSum(comm, e, buf, n, scratch);
  const int W = comm.Size();
  const int me = comm.Rank();
  if (W == 1 || n == 0) return Status::Ok();
  // Block k of the even split is reduced by rank k.
  std::vector<size_t>& blocks = scratch->blocks;
  blocks.assign(W, n / W);
  for (size_t r = 0; r < n % W; ++r) ++blocks[r];
  const size_t mine = blocks[me];
  const size_t my_off = BlockOffset(blocks, me);
  scratch->send_counts = blocks;
  scratch->send_counts[me] = 0;
  scratch->recv_counts.assign(W, mine);
  scratch->recv_counts[me] = 0;
  if (scratch->send.size() < n) scratch->send.resize(n);
  if (scratch->recv.size() < mine * W) scratch->recv.resize(mine * W);
  const DType wire = WireType(e);
  // Reduce-scatter: every other rank's block goes out encoded.
  EncodeFloats(e, buf, my_off, scratch->send.data());
  EncodeFloats(e, buf + my_off + mine, n - my_off - mine, scratch->send.data() + my_off);
  SR_RETURN_IF_ERROR(comm.AllToAllV(scratch->send.data(), scratch->send_counts,
                                    scratch->recv.data(), scratch->recv_counts, wire));
  // fp32 sum in rank order; this rank's own contribution is exact.
  std::vector<float>& acc = scratch->acc;
  acc.assign(mine, 0.0f);
  const uint16_t* from = scratch->recv.data();
  for (int r = 0; r < W; ++r) {
    if (r == me) {
      for (size_t i = 0; i < mine; ++i) acc[i] += buf[my_off + i];
      continue;
    }
    DecodeAddFloats(e, from, mine, acc.data());
    from += mine;
  }
  // All-gather the encoded sums; every rank decodes all of them, its own block included, so all
  // ranks hold the same values.
  EncodeFloats(e, acc.data(), mine, scratch->recv.data());
  SR_RETURN_IF_ERROR(
      comm.AllGatherV(scratch->recv.data(), mine, scratch->send.data(), blocks, wire));
  DecodeFloats(e, scratch->send.data(), n, buf);
  return Status::Ok();
}

}  // namespace shardrec::comm
