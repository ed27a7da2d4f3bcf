// Collectives whose floats travel encoded as fp16, bf16 or FP8 (TorchRec's "qcomms"): the caller
// hands fp32 in and gets fp32 back; only the bytes on the wire are 16-bit or 8-bit. Blocks a rank
// sends to itself never leave it and are copied exactly. Reductions decode every contribution and
// add in fp32 (never in 16-bit), in rank order, so every rank gets the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/row_format.h"

namespace shardrec::comm {

// The wire encodings are row formats (row_format.h): fp32 (exact), fp16, bf16 (values 0-2
// mirror shardrec_comm_encoding_t) and FP8 E4M3 / E5M2 (encoded_fp8.h; shardrec_comm_encoding_t
// names them 3 and 4, the C API converts).
using Encoding = RowFormat;

// Whether `v` is the RowFormat value of a wire encoding.
constexpr bool IsKnownEncoding(int32_t v) {
  return (v >= 0 && v <= 2) || IsFp8Format(static_cast<RowFormat>(v));
}
// fp16 and bf16: one 16-bit element a value, which kernels can write as they produce a row
// (EncoderFor) and add as they consume it (DecodeAdderFor). FP8 travels in blocks with a shared
// scale and goes through EncodedAllToAllV / EncodedAllReduceSum only.
constexpr bool IsSixteenBitEncoding(Encoding e) {
  return e == Encoding::kFp16 || e == Encoding::kBf16;
}
const char* EncodingName(Encoding e);

// One pass each way (16-bit encodings only). fp16 saturates finite values beyond its range to
// +-65504 (infinities and NaN pass through); bf16 covers fp32's range. Both round to nearest even
// (impl/core/half.h).
void EncodeFloats(Encoding e, const float* src, size_t n, uint16_t* dst);
void DecodeFloats(Encoding e, const uint16_t* src, size_t n, float* dst);
// dst[i] += decode(src[i]).
void DecodeAddFloats(Encoding e, const uint16_t* src, size_t n, float* dst);

// The same passes as plain function pointers (the widest level the host runs), for kernels that
// encode a row as they produce it or decode it as they consume it, with no fp32 staging pass:
// EncoderFor(e)(src, n, dst) is EncodeFloats(e, src, n, dst), DecodeAdderFor(e) DecodeAddFloats.
// e must be a 16-bit encoding.
using EncodeFn = void (*)(const float* src, size_t n, uint16_t* dst);
using DecodeAddFn = void (*)(const uint16_t* src, size_t n, float* dst);
EncodeFn EncoderFor(Encoding e);
DecodeAddFn DecodeAdderFor(Encoding e);
// The wire element type of an encoding (kFloat16 or kBFloat16).
DType WireType(Encoding e);

// Reusable staging of the encoded collectives (grow-only; one per caller): 16-bit elements, or
// the bytes of FP8 blocks.
struct EncodedScratch {
  std::vector<uint16_t> send;
  std::vector<uint16_t> recv;
  std::vector<uint8_t> send8;
  std::vector<uint8_t> recv8;
  std::vector<float> acc;
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
  std::vector<size_t> blocks;
};

// AllToAllV of floats (counts in floats, as Communicator::AllToAllV). kFp32 is the plain
// collective; otherwise every block to another rank is encoded into scratch, exchanged as 16-bit
// elements (FP8: bytes, encoded_fp8.h) and decoded into `recv`; this rank's own block is copied
// exactly.
Status EncodedAllToAllV(Communicator& comm, Encoding e, const float* send,
                        std::span<const size_t> send_counts, float* recv,
                        std::span<const size_t> recv_counts, EncodedScratch* scratch);

// In-place sum of buf[n] over all ranks. kFp32 is the plain AllReduce. Otherwise a reduce-scatter
// followed by an all-gather: block k (an even split) is sent encoded to rank k, which decodes
// every rank's block and adds them in fp32 in rank order (its own block exact), encodes the sum
// once and all-gathers it; every rank (rank k included) ends with the decoded sums, so all ranks
// hold identical values. Each element is rounded at most twice: error <= (2u + u^2) * sum|x_r|
// (FP8 adds its blocks' absolute floor, encoded_fp8.h, once per rounding).
Status EncodedAllReduceSum(Communicator& comm, Encoding e, float* buf, size_t n,
                           EncodedScratch* scratch);

}  // namespace shardrec::comm
