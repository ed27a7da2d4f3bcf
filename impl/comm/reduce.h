// Element-wise reductions by dtype and op, used by the Gloo backend and by the local reduction
// step of ReduceScatterV.
#pragma once

#include <cstddef>

#include "impl/comm/communicator.h"

namespace shardrec::comm {

// out[i] = a[i] (op) b[i] for n elements; out may alias a or b. fp16/bf16 are combined in fp32
// and rounded back (round to nearest even).
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// kAvg maps to the sum function: the average is computed as sum, then DivideBy().
Status GetReduceFn(DType dtype, ReduceOp op, ReduceFn* out);

// buf[i] /= divisor for n elements (integer types use integer division).
void DivideBy(void* buf, size_t n, DType dtype, int divisor);

const char* ReduceOpName(ReduceOp op);

}  // namespace shardrec::comm
