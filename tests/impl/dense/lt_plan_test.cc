// The cuBLASLt plan, checked on the CPU: for every activation, math mode and a spread of shapes
// (odd, prime, one-element, wider than one aux word) the epilogues, operand layouts, types, aux
// layout and fallbacks must be the ones lt_plan.h documents. The layout algebra is also checked
// by running each GemmPlan as a naive column-major GEMM on row-major data and comparing with the
// row-major linear-layer math.
#include "impl/dense/lt_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace shardrec::dense::lt {
namespace {

const Activation kActs[] = {Activation::kNone, Activation::kRelu, Activation::kSigmoid};
const Math kMaths[] = {Math::kFp32, Math::kTf32, Math::kBf16};
struct Dims {
  int64_t in, out, batch;
};
const Dims kDims[] = {{1, 1, 1},    {13, 512, 7},  {512, 256, 128}, {127, 129, 3},
                      {3, 1, 1000}, {1024, 1, 33}, {129, 255, 2}};

DataType InputType(Math m) { return m == Math::kBf16 ? DataType::kBf16 : DataType::kF32; }

void ExpectTypes(const GemmPlan& g, Math m) {
  EXPECT_EQ(g.compute, m == Math::kTf32 ? ComputeType::k32FFastTf32 : ComputeType::k32F);
  EXPECT_EQ(g.scale, DataType::kF32);
  EXPECT_EQ(g.a.type, InputType(m));
  EXPECT_EQ(g.b.type, InputType(m));
  EXPECT_EQ(g.d.type, DataType::kF32);  // outputs and gradients stay fp32 in every mode
  EXPECT_EQ(g.bias_type, DataType::kF32);
}

// Operand shapes must agree with m, n, k and the transposes, and every ld must cover its rows.
void ExpectConsistent(const GemmPlan& g) {
  const int64_t ar = g.trans_a == Op::kN ? g.m : g.k, ac = g.trans_a == Op::kN ? g.k : g.m;
  const int64_t br = g.trans_b == Op::kN ? g.k : g.n, bc = g.trans_b == Op::kN ? g.n : g.k;
  EXPECT_EQ(g.a.rows, ar);
  EXPECT_EQ(g.a.cols, ac);
  EXPECT_EQ(g.b.rows, br);
  EXPECT_EQ(g.b.cols, bc);
  EXPECT_EQ(g.d.rows, g.m);
  EXPECT_EQ(g.d.cols, g.n);
  EXPECT_GE(g.a.ld, g.a.rows);
  EXPECT_GE(g.b.ld, g.b.rows);
  EXPECT_GE(g.d.ld, g.d.rows);
  if (g.uses_aux) {
    EXPECT_EQ(g.aux_ld % kAuxLdBits, 0);
    EXPECT_GE(g.aux_ld, g.m);
    EXPECT_LT(g.aux_ld - g.m, kAuxLdBits);  // no more padding than needed
  }
}

TEST(LtPlan, AuxLayoutRule) {
  EXPECT_EQ(ReluAuxLayout(1, 1).ld_bits, 128);
  EXPECT_EQ(ReluAuxLayout(1, 1).bytes, 16);
  EXPECT_EQ(ReluAuxLayout(128, 3).ld_bits, 128);
  EXPECT_EQ(ReluAuxLayout(129, 3).ld_bits, 256);
  EXPECT_EQ(ReluAuxLayout(129, 3).bytes, 96);
  EXPECT_EQ(ReluAuxLayout(512, 2048).bytes, 512 / 8 * 2048);
  for (int64_t rows = 1; rows < 700; rows += 37) {
    const AuxLayout a = ReluAuxLayout(rows, 5);
    EXPECT_EQ(a.ld_bits % 128, 0);
    EXPECT_GE(a.ld_bits, rows);
    EXPECT_EQ((a.bytes / 5) % kAlignBytes, 0) << "each aux column starts 16-byte aligned";
  }
}

TEST(LtPlan, ForwardEveryActivationMathShape) {
  for (Activation act : kActs) {
    for (Math m : kMaths) {
      for (const Dims& d : kDims) {
        SCOPED_TRACE(testing::Message() << ActivationName(act) << " " << MathName(m) << " in="
                                        << d.in << " out=" << d.out << " batch=" << d.batch);
        ForwardPlan p;
        ASSERT_TRUE(PlanForward({d.in, d.out, act}, d.batch, m, Support{}, &p).ok());
        ExpectTypes(p.gemm, m);
        ExpectConsistent(p.gemm);
        EXPECT_EQ(p.gemm.trans_a, Op::kT);
        EXPECT_EQ(p.gemm.trans_b, Op::kN);
        EXPECT_EQ(p.gemm.m, d.out);
        EXPECT_EQ(p.gemm.n, d.batch);
        EXPECT_EQ(p.gemm.k, d.in);
        EXPECT_EQ(p.gemm.a.ld, d.in);   // w [out, in] row-major
        EXPECT_EQ(p.gemm.b.ld, d.in);   // x [batch, in]
        EXPECT_EQ(p.gemm.d.ld, d.out);  // y [batch, out]
        EXPECT_EQ(p.gemm.beta, 0.0f);
        EXPECT_EQ(p.pre_x, m == Math::kBf16 ? Kernel::kToBf16 : Kernel::kNone);
        EXPECT_EQ(p.pre_w, m == Math::kBf16 ? Kernel::kToBf16 : Kernel::kNone);
        switch (act) {
          case Activation::kNone:
            EXPECT_EQ(p.gemm.epilogue, Epilogue::kBias);
            EXPECT_EQ(p.post, Kernel::kNone);
            EXPECT_FALSE(p.writes_aux);
            break;
          case Activation::kRelu:
            EXPECT_EQ(p.gemm.epilogue, Epilogue::kReluAuxBias);
            EXPECT_EQ(p.post, Kernel::kNone);
            EXPECT_TRUE(p.writes_aux);
            EXPECT_TRUE(p.gemm.uses_aux);
            EXPECT_EQ(p.aux.ld_bits, p.gemm.aux_ld);
            EXPECT_EQ(p.aux.bytes, p.aux.ld_bits / 8 * d.batch);
            break;
          case Activation::kSigmoid:
            EXPECT_EQ(p.gemm.epilogue, Epilogue::kBias);
            EXPECT_EQ(p.post, Kernel::kSigmoidForward);
            EXPECT_FALSE(p.writes_aux);
            break;
        }
      }
    }
  }
}

TEST(LtPlan, ForwardFallbacks) {
  Support none;
  none.bias = none.relu_aux = none.bgradb = none.drelu_bgrad = false;
  ForwardPlan p;
  ASSERT_TRUE(PlanForward({5, 3, Activation::kRelu}, 4, Math::kFp32, none, &p).ok());
  EXPECT_EQ(p.gemm.epilogue, Epilogue::kDefault);
  EXPECT_EQ(p.post, Kernel::kBiasReluForward);
  EXPECT_FALSE(p.writes_aux);
  EXPECT_FALSE(p.gemm.uses_aux);
  ASSERT_TRUE(PlanForward({5, 3, Activation::kNone}, 4, Math::kFp32, none, &p).ok());
  EXPECT_EQ(p.gemm.epilogue, Epilogue::kDefault);
  EXPECT_EQ(p.post, Kernel::kBiasAdd);
  ASSERT_TRUE(PlanForward({5, 3, Activation::kSigmoid}, 4, Math::kFp32, none, &p).ok());
  EXPECT_EQ(p.post, Kernel::kBiasAdd);
  // Only the ReLU mask missing: ReLU falls back, bias-only layers keep the BIAS epilogue.
  Support no_aux;
  no_aux.relu_aux = false;
  ASSERT_TRUE(PlanForward({5, 3, Activation::kRelu}, 4, Math::kBf16, no_aux, &p).ok());
  EXPECT_EQ(p.post, Kernel::kBiasReluForward);
  ASSERT_TRUE(PlanForward({5, 3, Activation::kNone}, 4, Math::kBf16, no_aux, &p).ok());
  EXPECT_EQ(p.gemm.epilogue, Epilogue::kBias);
}

TEST(LtPlan, BackwardEveryActivationMathShape) {
  for (Activation act : kActs) {
    for (Activation input_act : kActs) {
      for (Math m : kMaths) {
        for (const Dims& d : kDims) {
          SCOPED_TRACE(testing::Message()
                       << ActivationName(act) << " after " << ActivationName(input_act) << " "
                       << MathName(m) << " in=" << d.in << " out=" << d.out);
          BackwardOptions o;
          o.input_act = input_act;
          BackwardPlan p;
          ASSERT_TRUE(PlanBackward({d.in, d.out, act}, d.batch, m, Support{}, o, &p).ok());
          EXPECT_EQ(p.pre, act == Activation::kSigmoid ? Kernel::kSigmoidBackward
                           : act == Activation::kRelu  ? Kernel::kReluBackward
                                                       : Kernel::kNone);
          EXPECT_EQ(p.pre_bf16, m == Math::kBf16 ? Kernel::kToBf16 : Kernel::kNone);
          ExpectTypes(p.dw, m);
          ExpectConsistent(p.dw);
          EXPECT_EQ(p.dw.m, d.in);
          EXPECT_EQ(p.dw.n, d.out);
          EXPECT_EQ(p.dw.k, d.batch);
          EXPECT_EQ(p.dw.trans_a, Op::kN);
          EXPECT_EQ(p.dw.trans_b, Op::kT);
          EXPECT_EQ(p.dw.beta, 1.0f) << "weight gradients accumulate";
          EXPECT_EQ(p.dw.epilogue, Epilogue::kBGradB);
          EXPECT_EQ(p.dw_post, Kernel::kAccumulate);
          EXPECT_GE(p.bias_scratch, d.out);
          ASSERT_TRUE(p.has_dx);
          ExpectTypes(p.dx, m);
          ExpectConsistent(p.dx);
          EXPECT_EQ(p.dx.m, d.in);
          EXPECT_EQ(p.dx.n, d.batch);
          EXPECT_EQ(p.dx.k, d.out);
          EXPECT_EQ(p.dx.beta, 0.0f);
          EXPECT_EQ(p.dx.a.ld, d.in);
          EXPECT_EQ(p.dx.b.ld, d.out);
          if (input_act == Activation::kRelu) {
            EXPECT_EQ(p.dx.epilogue, Epilogue::kDRelu);
            EXPECT_TRUE(p.reads_input_aux);
            EXPECT_EQ(p.dx.aux_ld, ReluAuxLayout(d.in, d.batch).ld_bits);
            EXPECT_EQ(p.input_aux.bytes, ReluAuxLayout(d.in, d.batch).bytes);
          } else {
            EXPECT_EQ(p.dx.epilogue, Epilogue::kDefault);
            EXPECT_FALSE(p.reads_input_aux);
            EXPECT_FALSE(p.dx.uses_aux);
          }
          EXPECT_EQ(p.dx_post, Kernel::kNone);
        }
      }
    }
  }
}

TEST(LtPlan, BackwardFusionsAndFallbacks) {
  const LinearShape s{200, 7, Activation::kRelu};
  BackwardOptions o;
  o.input_act = Activation::kRelu;
  o.fuse_input_bias_grad = true;
  BackwardPlan p;
  ASSERT_TRUE(PlanBackward(s, 9, Math::kFp32, Support{}, o, &p).ok());
  EXPECT_EQ(p.dx.epilogue, Epilogue::kDReluBGrad);
  EXPECT_EQ(p.dx_post, Kernel::kAccumulate);
  EXPECT_EQ(p.bias_scratch, 200) << "scratch holds the larger of the two bias gradients";
  EXPECT_EQ(p.dx.aux_ld, 256);

  // The next layer already applied ReLU' and produced this layer's bias gradient.
  o = BackwardOptions{};
  o.dy_is_dz = true;
  o.bias_grad_done = true;
  o.need_dx = false;
  ASSERT_TRUE(PlanBackward(s, 9, Math::kTf32, Support{}, o, &p).ok());
  EXPECT_EQ(p.pre, Kernel::kNone);
  EXPECT_EQ(p.dw.epilogue, Epilogue::kDefault);
  EXPECT_EQ(p.dw_post, Kernel::kNone);
  EXPECT_FALSE(p.has_dx);
  EXPECT_EQ(p.bias_scratch, 0);

  Support none;
  none.bias = none.relu_aux = none.bgradb = none.drelu_bgrad = false;
  o = BackwardOptions{};
  o.input_act = Activation::kRelu;
  o.fuse_input_bias_grad = true;
  ASSERT_TRUE(PlanBackward(s, 9, Math::kFp32, none, o, &p).ok());
  EXPECT_EQ(p.dw.epilogue, Epilogue::kDefault);
  EXPECT_EQ(p.dw_post, Kernel::kBiasGrad);
  EXPECT_EQ(p.dx.epilogue, Epilogue::kDefault);
  EXPECT_EQ(p.dx_post, Kernel::kReluBackward);
  EXPECT_FALSE(p.reads_input_aux);
  EXPECT_EQ(p.bias_scratch, 0);

  // DRELU available, DRELU_BGRAD not: the mask is still fused, the bias grad is not.
  Support no_bgrad;
  no_bgrad.drelu_bgrad = false;
  ASSERT_TRUE(PlanBackward(s, 9, Math::kFp32, no_bgrad, o, &p).ok());
  EXPECT_EQ(p.dx.epilogue, Epilogue::kDRelu);
  EXPECT_EQ(p.dx_post, Kernel::kNone);
}

TEST(LtPlan, RejectsBadInput) {
  ForwardPlan f;
  BackwardPlan b;
  EXPECT_EQ(PlanForward({0, 3, Activation::kNone}, 1, Math::kFp32, {}, &f).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(PlanForward({3, 3, Activation::kNone}, 0, Math::kFp32, {}, &f).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(PlanForward({3, 3, Activation::kNone}, 1, static_cast<Math>(3), {}, &f).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(PlanForward({3, 3, static_cast<Activation>(9)}, 1, Math::kFp32, {}, &f).code(),
            Code::kInvalidArgument);
  BackwardOptions o;
  o.input_act = static_cast<Activation>(-1);
  EXPECT_EQ(PlanBackward({3, 3, Activation::kNone}, 1, Math::kFp32, {}, o, &b).code(),
            Code::kInvalidArgument);
  EXPECT_FALSE(IsKnownMath(-1));
  EXPECT_TRUE(IsKnownMath(2));
}

TEST(LtPlan, WorkspaceAndNames) {
  EXPECT_EQ(WorkspaceBytes(8), 4 << 20);
  EXPECT_EQ(WorkspaceBytes(9), 32 << 20);
  EXPECT_STREQ(EpilogueName(Epilogue::kReluAuxBias), "RELU_AUX_BIAS");
  EXPECT_STREQ(EpilogueName(Epilogue::kDReluBGrad), "DRELU_BGRAD");
  EXPECT_STREQ(KernelName(Kernel::kBiasGrad), "bias_grad");
  EXPECT_STREQ(MathName(Math::kTf32), "tf32");
  EXPECT_EQ(DataTypeBytes(DataType::kBf16), 2u);
}

// Reads element (r, c) of a column-major operand stored in `v`.
float At(const std::vector<float>& v, const Layout& l, int64_t r, int64_t c) {
  return v[static_cast<size_t>(c * l.ld + r)];
}

// D = alpha op(A) op(B) + beta D, column-major, as cuBLASLt would compute it.
void NaiveGemm(const GemmPlan& g, const std::vector<float>& a, const std::vector<float>& b,
               std::vector<float>* d) {
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const float av = g.trans_a == Op::kN ? At(a, g.a, i, p) : At(a, g.a, p, i);
        const float bv = g.trans_b == Op::kN ? At(b, g.b, p, j) : At(b, g.b, j, p);
        acc += static_cast<double>(av) * bv;
      }
      float& out = (*d)[static_cast<size_t>(j * g.d.ld + i)];
      out = static_cast<float>(g.alpha * acc + g.beta * out);
    }
  }
}

// The plans' GEMMs on row-major buffers give the row-major linear math of linear.h.
TEST(LtPlan, LayoutAlgebraMatchesRowMajorMath) {
  const int64_t in = 5, out = 3, batch = 4;
  std::vector<float> x(in * batch), w(out * in), dz(batch * out);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  for (size_t i = 0; i < dz.size(); ++i) dz[i] = 0.5f * static_cast<float>(i % 3) - 0.5f;
  ForwardPlan f;
  BackwardPlan bw;
  ASSERT_TRUE(PlanForward({in, out, Activation::kNone}, batch, Math::kFp32, {}, &f).ok());
  ASSERT_TRUE(PlanBackward({in, out, Activation::kNone}, batch, Math::kFp32, {}, {}, &bw).ok());

  std::vector<float> y(batch * out, 0.0f);
  NaiveGemm(f.gemm, w, x, &y);
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double ref = 0;
      for (int64_t i = 0; i < in; ++i) ref += double(x[r * in + i]) * w[o * in + i];
      EXPECT_FLOAT_EQ(y[r * out + o], static_cast<float>(ref));
    }
  }
  std::vector<float> dx(batch * in, 0.0f);
  NaiveGemm(bw.dx, w, dz, &dx);
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t i = 0; i < in; ++i) {
      double ref = 0;
      for (int64_t o = 0; o < out; ++o) ref += double(dz[r * out + o]) * w[o * in + i];
      EXPECT_FLOAT_EQ(dx[r * in + i], static_cast<float>(ref));
    }
  }
  std::vector<float> dw(out * in, 1.0f);  // accumulates onto 1
  NaiveGemm(bw.dw, x, dz, &dw);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      double ref = 1.0;
      for (int64_t r = 0; r < batch; ++r) ref += double(dz[r * out + o]) * x[r * in + i];
      EXPECT_FLOAT_EQ(dw[o * in + i], static_cast<float>(ref));
    }
  }
}

TEST(LtPlan, KeyDistinguishesEpilogueAndShape) {
  ForwardPlan a, b, c;
  ASSERT_TRUE(PlanForward({5, 3, Activation::kNone}, 4, Math::kFp32, {}, &a).ok());
  ASSERT_TRUE(PlanForward({5, 3, Activation::kRelu}, 4, Math::kFp32, {}, &b).ok());
  ASSERT_TRUE(PlanForward({5, 3, Activation::kNone}, 5, Math::kFp32, {}, &c).ok());
  EXPECT_FALSE(KeyOf(a.gemm) == KeyOf(b.gemm));
  EXPECT_FALSE(KeyOf(a.gemm) == KeyOf(c.gemm));
  EXPECT_TRUE(KeyOf(a.gemm) == KeyOf(a.gemm));
}

}  // namespace
}  // namespace shardrec::dense::lt
