// How one linear layer maps onto cuBLASLt: which epilogue each of the three GEMMs (forward,
// backward dX, backward dW) uses, how the row-major host layout of impl/dense/linear.h becomes
// cuBLASLt's column-major operands, which compute / scale / data types a math mode means, how
// the ReLU bit-mask ("aux") buffer is laid out, and which small kernels stand in when an epilogue
// is not available. Pure and CUDA-free: the enums below carry cuBLASLt's own numeric values
// (the plugin static_asserts them), so this file is unit-tested on the CPU and the plugin only
// translates.
//
// Layout. A row-major [R, C] matrix is a column-major [C, R] matrix with leading dimension C, so
// with x [batch, in], w [out, in] and y [batch, out] (linear.h):
//   forward   y^T[out, batch]  = w^T-as-stored(T) [in,out]^T * x^T [in, batch]     (m=out, n=batch,
//   k=in) dX        dx^T[in, batch]  = w-as-stored [in, out]       * dz^T [out, batch]   (m=in,
//   n=batch, k=out) dW        dw^T[in, out]   += x^T [in, batch]             * (dz^T)^T [batch,
//   out] (m=in, n=out, k=batch)
// The bias has length m in the forward GEMM (cuBLASLt broadcasts a bias of D's row count over
// its columns, i.e. over the batch) and is the column count of D in the dW GEMM, where BGRADB
// reduces over k = batch: exactly db = column sums of dz.
#pragma once

#include <cstdint>

#include "impl/core/status.h"
#include "impl/dense/linear.h"

namespace shardrec::dense::lt {

// Math modes of the GPU path (shardrec_dense_math_t values).
enum class Math : int32_t { kFp32 = 0, kTf32 = 1, kBf16 = 2 };
bool IsKnownMath(int32_t value);
const char* MathName(Math m);

// cublasLtEpilogue_t values.
enum class Epilogue : int32_t {
  kDefault = 1,
  kRelu = 2,
  kBias = 4,
  kReluBias = 6,
  kReluAux = 130,
  kReluAuxBias = 134,
  kDRelu = 136,
  kDReluBGrad = 152,
  kBGradA = 256,
  kBGradB = 512,
};
const char* EpilogueName(Epilogue e);

// cublasComputeType_t values.
enum class ComputeType : int32_t { k32F = 68, k32FFastTf32 = 77 };
// cudaDataType_t values.
enum class DataType : int32_t { kF32 = 0, kBf16 = 14 };
// cublasOperation_t values.
enum class Op : int32_t { kN = 0, kT = 1 };

size_t DataTypeBytes(DataType t);

// One column-major matrix operand: rows x cols, leading dimension ld (elements), element type.
struct Layout {
  DataType type = DataType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
};

// A small elementwise kernel the plan needs around a GEMM (lt_kernels.h implements each).
enum class Kernel : int32_t {
  kNone = 0,
  kSigmoidForward = 1,   // y = sigmoid(y) in place, after the BIAS epilogue
  kSigmoidBackward = 2,  // dz = dy * y * (1 - y)
  kBiasAdd = 3,          // y += b (fallback for the BIAS epilogue)
  kBiasReluForward = 4,  // y = max(0, y + b) (fallback for RELU_AUX_BIAS; the mask is y > 0)
  kReluBackward = 5,     // dz = dy * (y > 0) (fallback for DRELU: the mask comes from y)
  kBiasGrad = 6,         // db += column sums of dz (fallback for BGRADB)
  kAccumulate = 7,       // db += scratch (BGRADB / DRELU_BGRAD write, backward accumulates)
  kToBf16 = 8,           // fp32 -> bf16 copy of a GEMM input (math = bf16)
};
const char* KernelName(Kernel k);

// One GEMM: D = alpha * op(A) * op(B) + beta * C, with C = D.
struct GemmPlan {
  Op trans_a = Op::kN;
  Op trans_b = Op::kN;
  int64_t m = 0, n = 0, k = 0;
  Layout a, b, d;  // d also describes C
  float alpha = 1.0f;
  float beta = 0.0f;  // 1 where the result accumulates (dW)
  ComputeType compute = ComputeType::k32F;
  DataType scale = DataType::kF32;
  Epilogue epilogue = Epilogue::kDefault;
  DataType bias_type = DataType::kF32;  // for BIAS (input) or BGRAD* (output) epilogues
  bool uses_aux = false;                // ReLU bit-mask read or written by the epilogue
  int64_t aux_ld = 0;                   // in elements (bits), when uses_aux
};

// The aux (ReLU bit-mask) buffer of one layer's output: m = out rows (bits), n = batch columns.
struct AuxLayout {
  int64_t ld_bits = 0;  // >= rows, divisible by kAuxLdBits
  int64_t bytes = 0;    // ld_bits / 8 * batch
};
// cuBLASLt: the bit-mask leading dimension "must be divisible by 128 and be no less than the
// number of rows in the output matrix" (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, cublasLt.h).
inline constexpr int64_t kAuxLdBits = 128;
// cuBLASLt wants 16-byte aligned operand pointers for its vectorised kernels; every buffer the
// plan asks for is rounded to this.
inline constexpr int64_t kAlignBytes = 16;
AuxLayout ReluAuxLayout(int64_t rows, int64_t batch);

// Which fused epilogues the caller may use. The executor starts with all true and, when
// cuBLASLt's heuristic finds no algorithm for a fused form (older library, bf16 with aux, an
// odd shape), plans again with that one false: the plan then uses DEFAULT plus the kernels.
struct Support {
  bool bias = true;         // BIAS in forward
  bool relu_aux = true;     // RELU_AUX_BIAS in forward and DRELU in dX
  bool bgradb = true;       // BGRADB in dW
  bool drelu_bgrad = true;  // DRELU_BGRAD in dX (fusing the previous layer's bias gradient)
};

struct ForwardPlan {
  Kernel pre_x = Kernel::kNone;  // kToBf16 of x (and w via pre_w) in bf16 mode
  Kernel pre_w = Kernel::kNone;
  GemmPlan gemm;
  Kernel post = Kernel::kNone;  // sigmoid, or the bias/ReLU fallback
  bool writes_aux = false;      // this layer's ReLU mask lands in an aux buffer
  AuxLayout aux;
};

// Backward of layer l given dy = dL/dy_l. `input_act` is the activation of the layer that
// produced x (kNone for the first layer or when x is the model input): when it is ReLU the dX
// GEMM applies its derivative from that layer's aux mask (DRELU), so dx is already the previous
// layer's dz; with `fuse_input_bias_grad` it also produces that layer's bias gradient
// (DRELU_BGRAD), and that layer's own dW GEMM then runs without BGRADB.
struct BackwardOptions {
  Activation input_act = Activation::kNone;
  bool need_dx = true;
  bool fuse_input_bias_grad = false;
  bool bias_grad_done = false;  // this layer's db was produced by the next layer's DRELU_BGRAD
  bool dy_is_dz = false;        // dy already carries this layer's activation derivative
};

struct BackwardPlan {
  Kernel pre = Kernel::kNone;       // dz from dy: sigmoid / ReLU fallback (kNone: dz = dy)
  Kernel pre_bf16 = Kernel::kNone;  // kToBf16 of dz, x and w in bf16 mode
  GemmPlan dw;
  Kernel dw_post = Kernel::kNone;  // kAccumulate (db from BGRADB scratch) or kBiasGrad
  bool has_dx = false;
  GemmPlan dx;
  Kernel dx_post = Kernel::kNone;  // kReluBackward when DRELU is unavailable; kAccumulate
                                   // of the input layer's db after DRELU_BGRAD
  bool reads_input_aux = false;
  AuxLayout input_aux;       // the input layer's mask (rows = in)
  int64_t bias_scratch = 0;  // floats of scratch for BGRAD outputs (then accumulated)
};

// Errors: kInvalidArgument for a non-positive dimension or batch, an unknown math or
// activation.
Status PlanForward(const LinearShape& s, int64_t batch, Math math, const Support& sup,
                   ForwardPlan* out);
Status PlanBackward(const LinearShape& s, int64_t batch, Math math, const Support& sup,
                    const BackwardOptions& opt, BackwardPlan* out);

// The workspace cuBLASLt may use (CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES): NVIDIA's cuBLAS
// guide recommends 32 MiB on Hopper (sm_90+) and 4 MiB before.
int64_t WorkspaceBytes(int sm_major);

// The key under which the executor caches descriptors, layouts and the heuristic's choice:
// every field of a GemmPlan that changes cuBLASLt's answer.
struct GemmKey {
  int32_t trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldd;
  int32_t type_a, type_b, type_d, compute, epilogue, bias_type;
  int64_t aux_ld;
  bool operator==(const GemmKey&) const = default;
};
GemmKey KeyOf(const GemmPlan& g);

}  // namespace shardrec::dense::lt
