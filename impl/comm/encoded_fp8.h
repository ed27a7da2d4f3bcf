// The FP8 wire encoding of float collectives (encoded.h's kFp8E4M3 / kFp8E5M2): values travel as
// one FP8 code each (fp8.h), in blocks of kFp8WireBlock consecutive values of one destination's
// buffer that share a power-of-two scale, sent as one byte ahead of the block's codes (its
// exponent + 127, as the OCP Microscaling formats' E8M0 scales). A block is what fp8.h's
// EncodeFp8Row writes for those values, so its rounding is training storage's: round to nearest
// even after an exact power-of-two scaling chosen so that the block's largest finite magnitude
// does not saturate. Decoding is exact; every rank that decodes a block gets the same bits.
//
// Error per value x of a block whose largest finite magnitude is A (E4M3: u = 2^-4, f = 2^-17;
// E5M2: u = 2^-3, f = 2^-31): |decode(encode(x)) - x| <= max(u |x|, f A, 2^-136). (The scale
// 2^k is the smallest with A / 2^k <= the format's largest finite value plus half its unit, so
// A / 2^k exceeds half that and the subnormal step's half, 2^(emin-m-1) 2^k, is below f A;
// 2^-136 covers the scale's clamp at 2^-126.) The bound holds for A up to the fit x 2^111
// (E4M3: 464 x 2^111, E5M2: 61440 x 2^111; the scale's clamp at fp8.h's kFp8MaxScaleExp); a
// block beyond saturates its largest values to the largest finite value x 2^111 of their sign.
// Infinities saturate to the block's largest finite value (they take no part in the scale); a
// NaN arrives as a NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "impl/comm/communicator.h"
#include "impl/comm/encoded.h"

namespace shardrec::comm {

// Values a scale byte covers (the MX formats' block size): a 12.5% overhead on 1 byte a value.
inline constexpr size_t kFp8WireBlock = 32;

// Bytes on the wire of `n` values: the codes and one scale byte per (possibly partial) block.
constexpr size_t Fp8WireBytes(size_t n) { return n + (n + kFp8WireBlock - 1) / kFp8WireBlock; }

// `e` must be an FP8 encoding. Blocks start at src[0] / dst[0].
void EncodeFp8Wire(Encoding e, const float* src, size_t n, uint8_t* dst);
void DecodeFp8Wire(Encoding e, const uint8_t* src, size_t n, float* dst);
// dst[i] += decode(src)[i].
void DecodeAddFp8Wire(Encoding e, const uint8_t* src, size_t n, float* dst);

}  // namespace shardrec::comm
