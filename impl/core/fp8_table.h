// The decoded value of every FP8 code (fp8.h), one 256-entry fp32 table per kind: plain data, so
// the per-instruction-set kernel and codec files (compiled with other target flags) can decode
// FP8 rows by a table lookup and one multiply by the row's scale without sharing inline library
// code. Entry c of table k equals DecodeFp8(Fp8Kind(k), c) bit for bit (fp8_table_test checks
// every code), NaN codes included.
#pragma once

#include <cstdint>

namespace shardrec {

struct Fp8DecodeTables {
  float v[2][256];  // [0]: E4M3, [1]: E5M2 (Fp8Kind's values)
};
// Constant-initialized, so usable at any time (static initializers included).
extern const Fp8DecodeTables kFp8Decode;

}  // namespace shardrec
