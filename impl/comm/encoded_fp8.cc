// FP8 wire encoding of float collectives (encoded_fp8.h).
#include "impl/comm/encoded_fp8.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/fp8.h"
#include "impl/core/fp8_table.h"

namespace shardrec::comm {

namespace {

Fp8Kind KindOf(Encoding e) {
  SR_CHECK(IsFp8Format(e));
  return e == Encoding::kFp8E5M2 ? Fp8Kind::kE5M2 : Fp8Kind::kE4M3;
}

// The scale of a block from its byte (the exponent + 127, in [1, 238] as the sender writes it).
float ScaleOfByte(uint8_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

template <bool kAdd>
void Decode(Encoding e, const uint8_t* src, size_t n, float* dst) {
  const float* table = kFp8Decode.v[static_cast<int>(KindOf(e))];
  for (size_t at = 0; at < n; at += kFp8WireBlock) {
    const size_t len = std::min(kFp8WireBlock, n - at);
    const float scale = ScaleOfByte(*src++);
    for (size_t i = 0; i < len; ++i) {
      const float v = table[src[i]] * scale;
      if constexpr (kAdd)
        dst[at + i] += v;
      else
        dst[at + i] = v;
    }
    src += len;
  }
}

size_t Offset(std::span<const size_t> counts, int r) {
  size_t off = 0;
  for (int i = 0; i < r; ++i) off += counts[i];
  return off;
}

}  // namespace

void EncodeFp8Wire(Encoding e, const float* src, size_t n, uint8_t* dst) {
  const Fp8Kind kind = KindOf(e);
  uint8_t row[kFp8HeaderBytes + kFp8WireBlock];
  for (size_t at = 0; at < n; at += kFp8WireBlock) {
    const size_t len = std::min(kFp8WireBlock, n - at);
    EncodeFp8Row(kind, src + at, static_cast<int64_t>(len), row);
    uint32_t scale_bits;
    std::memcpy(&scale_bits, row, sizeof(scale_bits));
    *dst++ = static_cast<uint8_t>(scale_bits >> 23);  // a positive power of two: its exponent
    std::memcpy(dst, row + kFp8HeaderBytes, len);
    dst += len;
  }
}

void DecodeFp8Wire(Encoding e, const uint8_t* src, size_t n, float* dst) {
  Decode<false>(e, src, n, dst);
}

void DecodeAddFp8Wire(Encoding e, const uint8_t* src, size_t n, float* dst) {
  Decode<true>(e, src, n, dst);
}

Status Fp8AllToAllV(Communicator& comm, Encoding e, const float* send,
                    std::span<const size_t> send_counts, float* recv,
                    std::span<const size_t> recv_counts, EncodedScratch* scratch) {
  const int W = comm.Size();
  const int me = comm.Rank();
  if (send_counts[me] != recv_counts[me])
    return Status::InvalidArgument("encoded all-to-all: this rank sends ", send_counts[me],
                                   " floats to itself but expects ", recv_counts[me]);
  // The own block never leaves the rank: exact copy, and a zero count on the wire.
  if (send_counts[me] > 0)
    std::memcpy(recv + Offset(recv_counts, me), send + Offset(send_counts, me),
                sizeof(float) * send_counts[me]);
  if (W == 1) return Status::Ok();
  // Counts on the wire are bytes.
  scratch->send_counts.assign(W, 0);
  scratch->recv_counts.assign(W, 0);
  size_t send_total = 0, recv_total = 0;
  for (int r = 0; r < W; ++r) {
    if (r == me) continue;
    scratch->send_counts[r] = Fp8WireBytes(send_counts[r]);
    scratch->recv_counts[r] = Fp8WireBytes(recv_counts[r]);
    send_total += scratch->send_counts[r];
    recv_total += scratch->recv_counts[r];
  }
  if (scratch->send8.size() < send_total) scratch->send8.resize(send_total);
  if (scratch->recv8.size() < recv_total) scratch->recv8.resize(recv_total);
  {
    const float* src = send;
    uint8_t* dst = scratch->send8.data();
    for (int r = 0; r < W; ++r) {
      if (r != me) {
        EncodeFp8Wire(e, src, send_counts[r], dst);
        dst += scratch->send_counts[r];
      }
      src += send_counts[r];
    }
  }
  SR_RETURN_IF_ERROR(comm.AllToAllV(scratch->send8.data(), scratch->send_counts,
                                    scratch->recv8.data(), scratch->recv_counts, DType::kUInt8));
  const uint8_t* src = scratch->recv8.data();
  float* dst = recv;
  for (int r = 0; r < W; ++r) {
    if (r != me) {
      DecodeFp8Wire(e, src, recv_counts[r], dst);
      src += scratch->recv_counts[r];
    }
    dst += recv_counts[r];
  }
  return Status::Ok();
}

Status Fp8AllReduceSum(Communicator& comm, Encoding e, float* buf, size_t n,
                       EncodedScratch* scratch) {
  const int W = comm.Size();
  const int me = comm.Rank();
  if (W == 1 || n == 0) return Status::Ok();
  // Block k of the even split is reduced by rank k.
  std::vector<size_t>& blocks = scratch->blocks;
  blocks.assign(W, n / W);
  for (size_t r = 0; r < n % W; ++r) ++blocks[r];
  const size_t mine = blocks[me];
  const size_t my_off = Offset(blocks, me);
  const size_t mine_bytes = Fp8WireBytes(mine);
  scratch->send_counts.assign(W, 0);
  size_t send_total = 0;
  for (int r = 0; r < W; ++r) {
    if (r != me) scratch->send_counts[r] = Fp8WireBytes(blocks[r]);
    send_total += scratch->send_counts[r];
  }
  scratch->recv_counts.assign(W, mine_bytes);
  scratch->recv_counts[me] = 0;
  // send8 holds the reduce-scatter's blocks, then the gathered sums.
  std::vector<size_t> gathered(W);
  size_t gathered_total = 0;
  for (int r = 0; r < W; ++r) gathered_total += gathered[r] = Fp8WireBytes(blocks[r]);
  if (scratch->send8.size() < std::max(send_total, gathered_total))
    scratch->send8.resize(std::max(send_total, gathered_total));
  if (scratch->recv8.size() < mine_bytes * W) scratch->recv8.resize(mine_bytes * W);
  // Reduce-scatter: every other rank's block goes out encoded, each its own run of wire blocks.
  {
    const float* src = buf;
    uint8_t* dst = scratch->send8.data();
    for (int r = 0; r < W; ++r) {
      if (r != me) {
        EncodeFp8Wire(e, src, blocks[r], dst);
        dst += scratch->send_counts[r];
      }
      src += blocks[r];
    }
  }
  SR_RETURN_IF_ERROR(comm.AllToAllV(scratch->send8.data(), scratch->send_counts,
                                    scratch->recv8.data(), scratch->recv_counts, DType::kUInt8));
  // fp32 sum in rank order; this rank's own contribution is exact.
  std::vector<float>& acc = scratch->acc;
  acc.assign(mine, 0.0f);
  const uint8_t* from = scratch->recv8.data();
  for (int r = 0; r < W; ++r) {
    if (r == me) {
      for (size_t i = 0; i < mine; ++i) acc[i] += buf[my_off + i];
      continue;
    }
    DecodeAddFp8Wire(e, from, mine, acc.data());
    from += mine_bytes;
  }
  // All-gather the encoded sums; every rank decodes all of them, its own block included, so all
  // ranks hold the same values.
  EncodeFp8Wire(e, acc.data(), mine, scratch->recv8.data());
  SR_RETURN_IF_ERROR(comm.AllGatherV(scratch->recv8.data(), mine_bytes, scratch->send8.data(),
                                     gathered, DType::kUInt8));
  const uint8_t* src = scratch->send8.data();
  float* dst = buf;
  for (int r = 0; r < W; ++r) {
    DecodeFp8Wire(e, src, blocks[r], dst);
    src += gathered[r];
    dst += blocks[r];
  }
  return Status::Ok();
}

}  // namespace shardrec::comm
