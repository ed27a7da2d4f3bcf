// The encoded float collectives (encoded.h), written once over a wire codec: fp16/bf16 here,
// FP8 blocks from encoded_fp8.h.
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

namespace {

// How one run of floats travels, for the generic collectives below: in `Elem`s (16-bit values,
// or FP8 blocks' bytes), Elems(n) of them for n floats, each run encoded on its own. Both
// encodings are element-wise within a run, so where the runs start is all that tells them apart.
struct SixteenBitWire {
  using Elem = uint16_t;
  Encoding e;
  size_t Elems(size_t n) const { return n; }
  DType Type() const { return WireType(e); }
  void Encode(const float* src, size_t n, Elem* dst) const { EncodeFloats(e, src, n, dst); }
  void Decode(const Elem* src, size_t n, float* dst) const { DecodeFloats(e, src, n, dst); }
  void DecodeAdd(const Elem* src, size_t n, float* dst) const { DecodeAddFloats(e, src, n, dst); }
  static std::vector<Elem>& Send(EncodedScratch* s) { return s->send; }
  static std::vector<Elem>& Recv(EncodedScratch* s) { return s->recv; }
};

struct Fp8Wire {
  using Elem = uint8_t;
  Encoding e;
  size_t Elems(size_t n) const { return Fp8WireBytes(n); }
  DType Type() const { return DType::kUInt8; }
  void Encode(const float* src, size_t n, Elem* dst) const { EncodeFp8Wire(e, src, n, dst); }
  void Decode(const Elem* src, size_t n, float* dst) const { DecodeFp8Wire(e, src, n, dst); }
  void DecodeAdd(const Elem* src, size_t n, float* dst) const { DecodeAddFp8Wire(e, src, n, dst); }
  static std::vector<Elem>& Send(EncodedScratch* s) { return s->send8; }
  static std::vector<Elem>& Recv(EncodedScratch* s) { return s->recv8; }
};

template <typename Wire>
Status AllToAllVOver(Communicator& comm, const Wire& wire, const float* send,
                     std::span<const size_t> send_counts, float* recv,
                     std::span<const size_t> recv_counts, EncodedScratch* scratch) {
  using Elem = typename Wire::Elem;
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
  // Counts on the wire are elements of the encoding; every destination's block is its own run.
  scratch->send_counts.assign(W, 0);
  scratch->recv_counts.assign(W, 0);
  size_t send_total = 0, recv_total = 0;
  for (int r = 0; r < W; ++r) {
    if (r == me) continue;
    send_total += scratch->send_counts[r] = wire.Elems(send_counts[r]);
    recv_total += scratch->recv_counts[r] = wire.Elems(recv_counts[r]);
  }
  std::vector<Elem>& out = Wire::Send(scratch);
  std::vector<Elem>& in = Wire::Recv(scratch);
  if (out.size() < send_total) out.resize(send_total);
  if (in.size() < recv_total) in.resize(recv_total);
  {
    const float* src = send;
    Elem* dst = out.data();
    for (int r = 0; r < W; ++r) {
      if (r != me) {
        wire.Encode(src, send_counts[r], dst);
        dst += scratch->send_counts[r];
      }
      src += send_counts[r];
    }
  }
  SR_RETURN_IF_ERROR(comm.AllToAllV(out.data(), scratch->send_counts, in.data(),
                                    scratch->recv_counts, wire.Type()));
  const Elem* src = in.data();
  float* dst = recv;
  for (int r = 0; r < W; ++r) {
    if (r != me) {
      wire.Decode(src, recv_counts[r], dst);
      src += scratch->recv_counts[r];
    }
    dst += recv_counts[r];
  }
  return Status::Ok();
}

template <typename Wire>
Status AllReduceSumOver(Communicator& comm, const Wire& wire, float* buf, size_t n,
                        EncodedScratch* scratch) {
  using Elem = typename Wire::Elem;
  const int W = comm.Size();
  const int me = comm.Rank();
  if (W == 1 || n == 0) return Status::Ok();
  // Block k of the even split is reduced by rank k.
  std::vector<size_t>& blocks = scratch->blocks;
  blocks.assign(W, n / W);
  for (size_t r = 0; r < n % W; ++r) ++blocks[r];
  const size_t mine = blocks[me];
  const size_t my_off = BlockOffset(blocks, me);
  const size_t mine_elems = wire.Elems(mine);
  // The gathered sums' counts (every rank's block, its own included) bound the send staging,
  // which holds the reduce-scatter's blocks first.
  std::vector<size_t> gathered(W);
  size_t gathered_total = 0;
  for (int r = 0; r < W; ++r) gathered_total += gathered[r] = wire.Elems(blocks[r]);
  scratch->send_counts = gathered;
  scratch->send_counts[me] = 0;
  scratch->recv_counts.assign(W, mine_elems);
  scratch->recv_counts[me] = 0;
  std::vector<Elem>& out = Wire::Send(scratch);
  std::vector<Elem>& in = Wire::Recv(scratch);
  if (out.size() < gathered_total) out.resize(gathered_total);
  if (in.size() < mine_elems * W) in.resize(mine_elems * W);
  // Reduce-scatter: every other rank's block goes out encoded, each its own run.
  {
    const float* src = buf;
    Elem* dst = out.data();
    for (int r = 0; r < W; ++r) {
      if (r != me) {
        wire.Encode(src, blocks[r], dst);
        dst += gathered[r];
      }
      src += blocks[r];
    }
  }
  SR_RETURN_IF_ERROR(comm.AllToAllV(out.data(), scratch->send_counts, in.data(),
                                    scratch->recv_counts, wire.Type()));
  // fp32 sum in rank order; this rank's own contribution is exact.
  std::vector<float>& acc = scratch->acc;
  acc.assign(mine, 0.0f);
  const Elem* from = in.data();
  for (int r = 0; r < W; ++r) {
    if (r == me) {
      for (size_t i = 0; i < mine; ++i) acc[i] += buf[my_off + i];
      continue;
    }
    wire.DecodeAdd(from, mine, acc.data());
    from += mine_elems;
  }
  // All-gather the encoded sums; every rank decodes all of them, its own block included, so all
  // ranks hold the same values.
  wire.Encode(acc.data(), mine, in.data());
  SR_RETURN_IF_ERROR(comm.AllGatherV(in.data(), mine_elems, out.data(), gathered, wire.Type()));
  const Elem* src = out.data();
  float* dst = buf;
  for (int r = 0; r < W; ++r) {
    wire.Decode(src, blocks[r], dst);
    src += gathered[r];
    dst += blocks[r];
  }
  return Status::Ok();
}

}  // namespace

Status EncodedAllToAllV(Communicator& comm, Encoding e, const float* send,
                        std::span<const size_t> send_counts, float* recv,
                        std::span<const size_t> recv_counts, EncodedScratch* scratch) {
  if (e == Encoding::kFp32)
    return comm.AllToAllV(send, send_counts, recv, recv_counts, DType::kFloat32);
  if (IsFp8Format(e))
    return AllToAllVOver(comm, Fp8Wire{e}, send, send_counts, recv, recv_counts, scratch);
  return AllToAllVOver(comm, SixteenBitWire{e}, send, send_counts, recv, recv_counts, scratch);
}

Status EncodedAllReduceSum(Communicator& comm, Encoding e, float* buf, size_t n,
                           EncodedScratch* scratch) {
  if (e == Encoding::kFp32) return comm.AllReduce(buf, buf, n, DType::kFloat32, ReduceOp::kSum);
  if (IsFp8Format(e)) return AllReduceSumOver(comm, Fp8Wire{e}, buf, n, scratch);
  return AllReduceSumOver(comm, SixteenBitWire{e}, buf, n, scratch);
}

}  // namespace shardrec::comm
