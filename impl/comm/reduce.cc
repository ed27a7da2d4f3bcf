// Element-wise reduction kernels for every dtype; 16-bit floats go through fp32.
#include "impl/comm/reduce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "impl/core/half.h"

namespace shardrec::comm {

namespace {

struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    return std::max(a, b);
  }
};
struct Min {
  template <typename T>
  T operator()(T a, T b) const {
    return std::min(a, b);
  }
};

template <typename T, typename Op>
void Reduce(void* out, const void* a, const void* b, size_t n) {
  // memcpy-free typed access: buffers come from the caller and are suitably aligned for T in
  // practice; out may alias a or b, which the element-wise loop tolerates.
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  Op op;
  for (size_t i = 0; i < n; ++i) o[i] = op(x[i], y[i]);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float), typename Op>
void Reduce16(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  Op op;
  for (size_t i = 0; i < n; ++i) o[i] = FromF(op(ToF(x[i]), ToF(y[i])));
}

template <typename Op>
ReduceFn Pick(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return &Reduce<float, Op>;
    case DType::kFloat64:
      return &Reduce<double, Op>;
    case DType::kInt32:
      return &Reduce<int32_t, Op>;
    case DType::kInt64:
      return &Reduce<int64_t, Op>;
    case DType::kUInt8:
      return &Reduce<uint8_t, Op>;
    case DType::kFloat16:
      return &Reduce16<HalfToFloat, FloatToHalf, Op>;
    case DType::kBFloat16:
      return &Reduce16<BFloat16ToFloat, FloatToBFloat16, Op>;
    case DType::kFp8E4M3:  // weight storage only (IsValidDType refuses them before this)
    case DType::kFp8E5M2:
      return nullptr;
  }
  return nullptr;
}

template <typename T>
void DivideTyped(void* buf, size_t n, int d) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void Divide16(void* buf, size_t n, int d) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = FromF(ToF(p[i]) / static_cast<float>(d));
}

}  // namespace

Status GetReduceFn(DType dtype, ReduceOp op, ReduceFn* out) {
  if (!IsValidDType(static_cast<int32_t>(dtype))) {
    return Status::InvalidArgument("dtype ", static_cast<int32_t>(dtype),
                                   " is not a valid element type");
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      *out = Pick<Sum>(dtype);
      return Status::Ok();
    case ReduceOp::kMax:
      *out = Pick<Max>(dtype);
      return Status::Ok();
    case ReduceOp::kMin:
      *out = Pick<Min>(dtype);
      return Status::Ok();
  }
  return Status::InvalidArgument("reduce op ", static_cast<int32_t>(op),
                                 " is not one of sum, avg, max, min");
}

void DivideBy(void* buf, size_t n, DType dtype, int divisor) {
  switch (dtype) {
    case DType::kFloat32:
      DivideTyped<float>(buf, n, divisor);
      break;
    case DType::kFloat64:
      DivideTyped<double>(buf, n, divisor);
      break;
    case DType::kInt32:
      DivideTyped<int32_t>(buf, n, divisor);
      break;
    case DType::kInt64:
      DivideTyped<int64_t>(buf, n, divisor);
      break;
    case DType::kUInt8:
      DivideTyped<uint8_t>(buf, n, divisor);
      break;
    case DType::kFloat16:
      Divide16<HalfToFloat, FloatToHalf>(buf, n, divisor);
      break;
    case DType::kBFloat16:
      Divide16<BFloat16ToFloat, FloatToBFloat16>(buf, n, divisor);
      break;
    case DType::kFp8E4M3:  // weight storage only (IsValidDType refuses them before this)
    case DType::kFp8E5M2:
      break;
  }
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "unknown";
}

}  // namespace shardrec::comm
