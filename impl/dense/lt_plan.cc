// The plan is a handful of table lookups; what needs care is the layout algebra in lt_plan.h and
// the fallbacks, which must compute exactly what the fused epilogue would.
#include "impl/dense/lt_plan.h"

#include "impl/core/check.h"

namespace shardrec::dense::lt {

bool IsKnownMath(int32_t value) { return value >= 0 && value <= 2; }

const char* MathName(Math m) {
  switch (m) {
    case Math::kFp32:
      return "fp32";
    case Math::kTf32:
      return "tf32";
    case Math::kBf16:
      return "bf16";
  }
  return "unknown";
}

const char* EpilogueName(Epilogue e) {
  switch (e) {
    case Epilogue::kDefault:
      return "DEFAULT";
    case Epilogue::kRelu:
      return "RELU";
    case Epilogue::kBias:
      return "BIAS";
    case Epilogue::kReluBias:
      return "RELU_BIAS";
    case Epilogue::kReluAux:
      return "RELU_AUX";
    case Epilogue::kReluAuxBias:
      return "RELU_AUX_BIAS";
    case Epilogue::kDRelu:
      return "DRELU";
    case Epilogue::kDReluBGrad:
      return "DRELU_BGRAD";
    case Epilogue::kBGradA:
      return "BGRADA";
    case Epilogue::kBGradB:
      return "BGRADB";
  }
  return "unknown";
}

const char* KernelName(Kernel k) {
  switch (k) {
    case Kernel::kNone:
      return "none";
    case Kernel::kSigmoidForward:
      return "sigmoid_forward";
    case Kernel::kSigmoidBackward:
      return "sigmoid_backward";
    case Kernel::kBiasAdd:
      return "bias_add";
    case Kernel::kBiasReluForward:
      return "bias_relu_forward";
    case Kernel::kReluBackward:
      return "relu_backward";
    case Kernel::kBiasGrad:
      return "bias_grad";
    case Kernel::kAccumulate:
      return "accumulate";
    case Kernel::kToBf16:
      return "to_bf16";
  }
  return "unknown";
}

size_t DataTypeBytes(DataType t) { return t == DataType::kBf16 ? 2 : 4; }

AuxLayout ReluAuxLayout(int64_t rows, int64_t batch) {
  AuxLayout a;
  a.ld_bits = (rows + kAuxLdBits - 1) / kAuxLdBits * kAuxLdBits;
  a.bytes = a.ld_bits / 8 * batch;
  return a;
}

int64_t WorkspaceBytes(int sm_major) {
  return sm_major >= 9 ? int64_t{32} << 20 : int64_t{4} << 20;
}

namespace {

Status CheckArgs(const LinearShape& s, int64_t batch, Math math) {
  if (s.in < 1 || s.out < 1 || batch < 1) {
    return Status::InvalidArgument("cuBLASLt plan: in ", s.in, ", out ", s.out, " and batch ",
                                   batch, " must all be >= 1");
  }
  if (!IsKnownMath(static_cast<int32_t>(math))) {
    return Status::InvalidArgument("cuBLASLt plan: unknown math mode ", static_cast<int32_t>(math));
  }
  if (!IsKnownActivation(static_cast<int32_t>(s.act))) {
    return Status::InvalidArgument("cuBLASLt plan: unknown activation ",
                                   static_cast<int32_t>(s.act));
  }
  return Status::Ok();
}

// Types shared by every GEMM of a math mode: tf32 keeps fp32 storage and lets the tensor cores
// round the inputs; bf16 multiplies bf16 copies of the inputs and accumulates, scales, adds the
// bias and stores in fp32 (so gradients and parameters stay fp32, as on the host).
GemmPlan Base(Math math) {
  GemmPlan g;
  g.compute = math == Math::kTf32 ? ComputeType::k32FFastTf32 : ComputeType::k32F;
  g.scale = DataType::kF32;
  const DataType in = math == Math::kBf16 ? DataType::kBf16 : DataType::kF32;
  g.a.type = in;
  g.b.type = in;
  g.d.type = DataType::kF32;
  g.bias_type = DataType::kF32;
  return g;
}

// A column-major operand of op(X) = rows x cols stored as (trans ? cols x rows : rows x cols).
Layout Operand(DataType t, Op op, int64_t rows, int64_t cols) {
  Layout l;
  l.type = t;
  l.rows = op == Op::kN ? rows : cols;
  l.cols = op == Op::kN ? cols : rows;
  l.ld = l.rows;
  return l;
}

void Shape(GemmPlan* g, Op ta, Op tb, int64_t m, int64_t n, int64_t k) {
  g->trans_a = ta;
  g->trans_b = tb;
  g->m = m;
  g->n = n;
  g->k = k;
  g->a = Operand(g->a.type, ta, m, k);
  g->b = Operand(g->b.type, tb, k, n);
  g->d = Operand(g->d.type, Op::kN, m, n);
}

}  // namespace

Status PlanForward(const LinearShape& s, int64_t batch, Math math, const Support& sup,
                   ForwardPlan* out) {
  SR_RETURN_IF_ERROR(CheckArgs(s, batch, math));
  ForwardPlan p;
  p.gemm = Base(math);
  // y^T[out, batch] = (w stored [in, out])^T * x^T[in, batch].
  Shape(&p.gemm, Op::kT, Op::kN, s.out, batch, s.in);
  if (math == Math::kBf16) {
    p.pre_x = Kernel::kToBf16;
    p.pre_w = Kernel::kToBf16;
  }
  switch (s.act) {
    case Activation::kRelu:
      if (sup.relu_aux) {
        p.gemm.epilogue = Epilogue::kReluAuxBias;
        p.gemm.uses_aux = true;
        p.writes_aux = true;
        p.aux = ReluAuxLayout(s.out, batch);
        p.gemm.aux_ld = p.aux.ld_bits;
      } else {
        // No mask buffer: the backward takes ReLU' from y > 0, as the host does.
        p.post = Kernel::kBiasReluForward;
      }
      break;
    case Activation::kSigmoid:
      if (sup.bias) {
        p.gemm.epilogue = Epilogue::kBias;
        p.post = Kernel::kSigmoidForward;
      } else {
        p.post = Kernel::kBiasAdd;  // the executor follows it with kSigmoidForward
      }
      break;
    case Activation::kNone:
      if (sup.bias) {
        p.gemm.epilogue = Epilogue::kBias;
      } else {
        p.post = Kernel::kBiasAdd;
      }
      break;
  }
  *out = p;
  return Status::Ok();
}

Status PlanBackward(const LinearShape& s, int64_t batch, Math math, const Support& sup,
                    const BackwardOptions& opt, BackwardPlan* out) {
  SR_RETURN_IF_ERROR(CheckArgs(s, batch, math));
  if (!IsKnownActivation(static_cast<int32_t>(opt.input_act))) {
    return Status::InvalidArgument("cuBLASLt plan: unknown input activation ",
                                   static_cast<int32_t>(opt.input_act));
  }
  BackwardPlan p;
  // dz = dy * act'(y), unless an upstream DRELU already applied it.
  if (!opt.dy_is_dz) {
    if (s.act == Activation::kSigmoid) p.pre = Kernel::kSigmoidBackward;
    if (s.act == Activation::kRelu) p.pre = Kernel::kReluBackward;
  }
  if (math == Math::kBf16) p.pre_bf16 = Kernel::kToBf16;

  // dw^T[in, out] += x^T[in, batch] * (dz^T[out, batch])^T; BGRADB sums B's columns over k.
  p.dw = Base(math);
  Shape(&p.dw, Op::kN, Op::kT, s.in, s.out, batch);
  p.dw.beta = 1.0f;
  if (!opt.bias_grad_done) {
    if (sup.bgradb) {
      p.dw.epilogue = Epilogue::kBGradB;
      p.dw_post = Kernel::kAccumulate;  // BGRADB overwrites; gradients accumulate
      p.bias_scratch = s.out;
    } else {
      p.dw_post = Kernel::kBiasGrad;
    }
  }

  if (opt.need_dx) {
    p.has_dx = true;
    // dx^T[in, batch] = (w stored [in, out]) * dz^T[out, batch].
    p.dx = Base(math);
    Shape(&p.dx, Op::kN, Op::kN, s.in, batch, s.out);
    if (opt.input_act == Activation::kRelu) {
      if (sup.relu_aux) {
        p.reads_input_aux = true;
        p.input_aux = ReluAuxLayout(s.in, batch);
        p.dx.uses_aux = true;
        p.dx.aux_ld = p.input_aux.ld_bits;
        if (opt.fuse_input_bias_grad && sup.drelu_bgrad) {
          p.dx.epilogue = Epilogue::kDReluBGrad;
          p.dx_post = Kernel::kAccumulate;
          if (s.in > p.bias_scratch) p.bias_scratch = s.in;
        } else {
          p.dx.epilogue = Epilogue::kDRelu;
        }
      } else {
        p.dx_post = Kernel::kReluBackward;  // mask from x > 0 (x is the ReLU layer's y)
      }
    }
  }
  *out = p;
  return Status::Ok();
}

GemmKey KeyOf(const GemmPlan& g) {
  return GemmKey{static_cast<int32_t>(g.trans_a),
                 static_cast<int32_t>(g.trans_b),
                 g.m,
                 g.n,
                 g.k,
                 g.a.ld,
                 g.b.ld,
                 g.d.ld,
                 static_cast<int32_t>(g.a.type),
                 static_cast<int32_t>(g.b.type),
                 static_cast<int32_t>(g.d.type),
                 static_cast<int32_t>(g.compute),
                 static_cast<int32_t>(g.epilogue),
                 static_cast<int32_t>(g.bias_type),
                 g.uses_aux ? g.aux_ld : 0};
}

}  // namespace shardrec::dense::lt
