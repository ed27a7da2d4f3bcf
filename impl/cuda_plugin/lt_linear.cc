// cuBLASLt execution of a linear layer. Everything here only enqueues: no host synchronisation.
#include "impl/cuda_plugin/lt_linear.h"

#include <cublasLt.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "impl/core/check.h"
#include "impl/cuda_plugin/cuda_util.h"
#include "impl/cuda_plugin/device_api.h"
#include "impl/cuda_plugin/lt_kernels.h"
#include "impl/dense/lt_plan.h"

namespace shardrec::cuda_plugin::lt {
namespace {

namespace dl = shardrec::dense::lt;
using dense::Activation;

// The plan carries cuBLASLt's numeric values; keep them honest.
static_assert(static_cast<int>(dl::Epilogue::kDefault) == CUBLASLT_EPILOGUE_DEFAULT);
static_assert(static_cast<int>(dl::Epilogue::kBias) == CUBLASLT_EPILOGUE_BIAS);
static_assert(static_cast<int>(dl::Epilogue::kReluAuxBias) == CUBLASLT_EPILOGUE_RELU_AUX_BIAS);
static_assert(static_cast<int>(dl::Epilogue::kDRelu) == CUBLASLT_EPILOGUE_DRELU);
static_assert(static_cast<int>(dl::Epilogue::kDReluBGrad) == CUBLASLT_EPILOGUE_DRELU_BGRAD);
static_assert(static_cast<int>(dl::Epilogue::kBGradB) == CUBLASLT_EPILOGUE_BGRADB);
static_assert(static_cast<int>(dl::Epilogue::kBGradA) == CUBLASLT_EPILOGUE_BGRADA);
static_assert(static_cast<int>(dl::ComputeType::k32F) == CUBLAS_COMPUTE_32F);
static_assert(static_cast<int>(dl::ComputeType::k32FFastTf32) == CUBLAS_COMPUTE_32F_FAST_TF32);
static_assert(static_cast<int>(dl::DataType::kF32) == CUDA_R_32F);
static_assert(static_cast<int>(dl::DataType::kBf16) == CUDA_R_16BF);
static_assert(static_cast<int>(dl::Op::kN) == CUBLAS_OP_N);
static_assert(static_cast<int>(dl::Op::kT) == CUBLAS_OP_T);

Status LtStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  if (st == CUBLAS_STATUS_ALLOC_FAILED)
    return Status::OutOfMemory(what, ": cuBLASLt out of memory");
  return Status::Cuda(what, ": ", cublasLtGetStatusName(st), " (", cublasLtGetStatusString(st),
                      ")");
}

Status Rt(cudaError_t err, const char* what) { return CudaStatus(RealDeviceApi(), err, what); }

uint32_t Alignment(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a /= 2;
  return a;
}

// A cached GEMM: descriptors and the heuristic's answer for one shape and pointer alignment.
struct CachedGemm {
  int device = -1;
  dl::GemmKey key{};
  uint32_t align[4] = {};  // a, b, d, aux
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  bool has_algo = false;
  cublasLtMatmulAlgo_t algo{};

  CachedGemm() = default;
  CachedGemm(const CachedGemm&) = delete;
  CachedGemm& operator=(const CachedGemm&) = delete;
  // Runs only for an entry that failed half-built (cached entries live until process exit).
  ~CachedGemm() {
    if (la != nullptr) (void)cublasLtMatrixLayoutDestroy(la);
    if (lb != nullptr) (void)cublasLtMatrixLayoutDestroy(lb);
    if (ld != nullptr) (void)cublasLtMatrixLayoutDestroy(ld);
    if (desc != nullptr) (void)cublasLtMatmulDescDestroy(desc);
  }
};

struct Buffer {
  void* ptr = nullptr;
  size_t bytes = 0;
};

enum Slot { kW16 = 0, kX16, kDz16, kDz, kBias, kWorkspace, kSlots };

struct StreamScratch {
  int device = -1;
  cudaStream_t stream = nullptr;
  Buffer slot[kSlots];
};

struct Engine {
  std::mutex mu;
  std::vector<std::pair<int, cublasLtHandle_t>> handles;
  std::vector<std::unique_ptr<CachedGemm>> gemms;
  std::vector<std::unique_ptr<StreamScratch>> scratch;
};

// Lives until process exit (the plugin is never unloaded); handles are not destroyed at exit,
// when the CUDA runtime may already be gone.
Engine& GetEngine() {
  static Engine* e = new Engine;
  return *e;
}

Status Handle(Engine& e, int device, cublasLtHandle_t* out) {
  for (auto& [d, h] : e.handles) {
    if (d == device) {
      *out = h;
      return Status::Ok();
    }
  }
  cublasLtHandle_t h = nullptr;
  SR_RETURN_IF_ERROR(LtStatus(cublasLtCreate(&h), "cublasLtCreate"));
  e.handles.emplace_back(device, h);
  *out = h;
  return Status::Ok();
}

StreamScratch& ScratchFor(Engine& e, int device, cudaStream_t stream) {
  for (auto& s : e.scratch) {
    if (s->device == device && s->stream == stream) return *s;
  }
  e.scratch.push_back(std::make_unique<StreamScratch>());
  e.scratch.back()->device = device;
  e.scratch.back()->stream = stream;
  return *e.scratch.back();
}

// Grows a slot stream-ordered: the old buffer is freed after the work already queued on the
// stream, so no host synchronisation is needed.
Status Reserve(StreamScratch& s, Slot slot, size_t bytes, void** out) {
  Buffer& b = s.slot[slot];
  if (b.bytes < bytes) {
    const size_t want = (bytes + 255) / 256 * 256;
    if (b.ptr != nullptr) SR_RETURN_IF_ERROR(Rt(cudaFreeAsync(b.ptr, s.stream), "cudaFreeAsync"));
    b = Buffer{};
    void* p = nullptr;
    SR_RETURN_IF_ERROR(
        Rt(cudaMallocAsync(&p, want, s.stream), "cudaMallocAsync (cuBLASLt scratch)"));
    b.ptr = p;
    b.bytes = want;
  }
  *out = b.ptr;
  return Status::Ok();
}

Status Workspace(StreamScratch& s, int device, void** out, size_t* bytes) {
  int major = 0;
  SR_RETURN_IF_ERROR(Rt(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                        "cudaDeviceGetAttribute"));
  *bytes = static_cast<size_t>(dl::WorkspaceBytes(major));
  return Reserve(s, kWorkspace, *bytes, out);
}

template <typename T>
Status SetDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  return LtStatus(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)),
                  "cublasLtMatmulDescSetAttribute");
}

Status Layout(const dl::Layout& l, cublasLtMatrixLayout_t* out) {
  return LtStatus(cublasLtMatrixLayoutCreate(out, static_cast<cudaDataType_t>(l.type),
                                             static_cast<uint64_t>(l.rows),
                                             static_cast<uint64_t>(l.cols), l.ld),
                  "cublasLtMatrixLayoutCreate");
}

// Pointers of one GEMM call. d is also C.
struct GemmArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  void* bias = nullptr;  // BIAS input or BGRAD output
  void* aux = nullptr;
};

Status Lookup(Engine& e, int device, cublasLtHandle_t h, const dl::GemmPlan& g, const GemmArgs& p,
              size_t ws_bytes, CachedGemm** out) {
  const dl::GemmKey key = dl::KeyOf(g);
  const uint32_t align[4] = {Alignment(p.a), Alignment(p.b), Alignment(p.d), Alignment(p.aux)};
  for (auto& c : e.gemms) {
    if (c->device == device && c->key == key && std::equal(align, align + 4, c->align)) {
      *out = c.get();
      return Status::Ok();
    }
  }
  auto c = std::make_unique<CachedGemm>();
  c->device = device;
  c->key = key;
  std::copy(align, align + 4, c->align);
  SR_RETURN_IF_ERROR(
      LtStatus(cublasLtMatmulDescCreate(&c->desc, static_cast<cublasComputeType_t>(g.compute),
                                        static_cast<cudaDataType_t>(g.scale)),
               "cublasLtMatmulDescCreate"));
  SR_RETURN_IF_ERROR(
      SetDesc(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<cublasOperation_t>(g.trans_a)));
  SR_RETURN_IF_ERROR(
      SetDesc(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<cublasOperation_t>(g.trans_b)));
  SR_RETURN_IF_ERROR(
      SetDesc(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<cublasLtEpilogue_t>(g.epilogue)));
  if (g.epilogue != dl::Epilogue::kDefault && g.epilogue != dl::Epilogue::kDRelu) {
    SR_RETURN_IF_ERROR(SetDesc(c->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                               static_cast<cudaDataType_t>(g.bias_type)));
    SR_RETURN_IF_ERROR(SetDesc(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias));
  }
  if (g.uses_aux) {
    SR_RETURN_IF_ERROR(SetDesc(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld));
    SR_RETURN_IF_ERROR(SetDesc(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux));
  }
  SR_RETURN_IF_ERROR(Layout(g.a, &c->la));
  SR_RETURN_IF_ERROR(Layout(g.b, &c->lb));
  SR_RETURN_IF_ERROR(Layout(g.d, &c->ld));

  cublasLtMatmulPreference_t pref = nullptr;
  SR_RETURN_IF_ERROR(LtStatus(cublasLtMatmulPreferenceCreate(&pref), "preference create"));
  const uint64_t ws = ws_bytes;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  const cublasLtMatmulPreferenceAttributes_t align_attr[3] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 3 && st == CUBLAS_STATUS_SUCCESS; ++i) {
    st = cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof(uint32_t));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(h, c->desc, c->la, c->lb, c->ld, c->ld, pref, 1, &result,
                                        &found);
  }
  (void)cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED or no result: the plan falls back; other errors are errors.
  if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
    return LtStatus(st, "cublasLtMatmulAlgoGetHeuristic");
  }
  c->has_algo = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (c->has_algo) c->algo = result.algo;
  e.gemms.push_back(std::move(c));
  *out = e.gemms.back().get();
  return Status::Ok();
}

// Runs one GEMM; *unsupported = true (and nothing enqueued) when cuBLASLt has no algorithm.
Status RunGemm(Engine& e, int device, StreamScratch& s, const dl::GemmPlan& g, const GemmArgs& p,
               bool* unsupported) {
  *unsupported = false;
  cublasLtHandle_t h = nullptr;
  SR_RETURN_IF_ERROR(Handle(e, device, &h));
  void* ws = nullptr;
  size_t ws_bytes = 0;
  SR_RETURN_IF_ERROR(Workspace(s, device, &ws, &ws_bytes));
  CachedGemm* c = nullptr;
  SR_RETURN_IF_ERROR(Lookup(e, device, h, g, p, ws_bytes, &c));
  if (!c->has_algo) {
    *unsupported = true;
    return Status::Ok();
  }
  // The descriptor is shared by every call of this shape: set this call's pointers.
  if (g.epilogue != dl::Epilogue::kDefault && g.epilogue != dl::Epilogue::kDRelu) {
    SR_RETURN_IF_ERROR(SetDesc(c->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias));
  }
  if (g.uses_aux) {
    SR_RETURN_IF_ERROR(SetDesc(c->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux));
  }
  const float alpha = g.alpha, beta = g.beta;
  return LtStatus(cublasLtMatmul(h, c->desc, &alpha, p.a, c->la, p.b, c->lb, &beta, p.d, c->ld, p.d,
                                 c->ld, &c->algo, ws, ws_bytes, s.stream),
                  "cublasLtMatmul");
}

Status CheckArgs(const shardrec_plugin_linear_t& a) {
  if (a.in < 1 || a.out < 1 || a.batch < 1) {
    return Status::InvalidArgument("linear on the GPU: in ", a.in, ", out ", a.out, ", batch ",
                                   a.batch, " must be >= 1");
  }
  if (!dense::IsKnownActivation(a.activation) || !dense::IsKnownActivation(a.input_activation) ||
      !dl::IsKnownMath(a.math)) {
    return Status::InvalidArgument("linear on the GPU: unknown activation or math mode");
  }
  return Status::Ok();
}

// The bf16 copy of a fp32 operand (math = bf16), else the operand itself.
Status Input(StreamScratch& s, dl::Math math, Slot slot, const float* src, int64_t n,
             const void** out) {
  if (math != dl::Math::kBf16) {
    *out = src;
    return Status::Ok();
  }
  void* dst = nullptr;
  SR_RETURN_IF_ERROR(Reserve(s, slot, static_cast<size_t>(n) * 2, &dst));
  SR_RETURN_IF_ERROR(Rt(lt_kernels::ToBf16(src, dst, n, s.stream), "bf16 conversion kernel"));
  *out = dst;
  return Status::Ok();
}

}  // namespace

Status LinearForward(int device, const shardrec_plugin_linear_t& a, const float* w, const float* b,
                     const float* x, float* y, void* aux, int32_t* aux_written,
                     cudaStream_t stream) {
  SR_RETURN_IF_ERROR(CheckArgs(a));
  if (w == nullptr || b == nullptr || x == nullptr || y == nullptr || aux_written == nullptr) {
    return Status::InvalidArgument("linear forward on the GPU: w, b, x, y must not be NULL");
  }
  *aux_written = 0;
  const dense::LinearShape shape{a.in, a.out, static_cast<Activation>(a.activation)};
  const auto math = static_cast<dl::Math>(a.math);
  Engine& e = GetEngine();
  std::lock_guard<std::mutex> lock(e.mu);
  DeviceGuard guard(RealDeviceApi());
  SR_RETURN_IF_ERROR(guard.Set(device));
  StreamScratch& s = ScratchFor(e, device, stream);

  dl::Support sup;
  if (aux == nullptr) sup.relu_aux = false;
  dl::ForwardPlan plan;
  GemmArgs p;
  SR_RETURN_IF_ERROR(Input(s, math, kW16, w, a.out * a.in, &p.a));
  SR_RETURN_IF_ERROR(Input(s, math, kX16, x, a.batch * a.in, &p.b));
  p.d = y;
  for (;;) {
    SR_RETURN_IF_ERROR(dl::PlanForward(shape, a.batch, math, sup, &plan));
    p.bias = const_cast<float*>(b);
    p.aux = plan.writes_aux ? aux : nullptr;
    bool unsupported = false;
    SR_RETURN_IF_ERROR(RunGemm(e, device, s, plan.gemm, p, &unsupported));
    if (!unsupported) break;
    if (plan.gemm.epilogue == dl::Epilogue::kReluAuxBias) {
      sup.relu_aux = false;
    } else if (plan.gemm.epilogue == dl::Epilogue::kBias) {
      sup.bias = false;
    } else {
      return Status::Unsupported("cuBLASLt has no algorithm for the ", dl::MathName(math), " GEMM ",
                                 a.out, "x", a.batch, "x", a.in, " on device ", device);
    }
  }
  const int64_t n = a.batch * a.out;
  switch (plan.post) {
    case dl::Kernel::kBiasReluForward:
      SR_RETURN_IF_ERROR(Rt(lt_kernels::BiasAdd(y, b, a.batch, a.out, true, s.stream), "bias"));
      break;
    case dl::Kernel::kBiasAdd:
      SR_RETURN_IF_ERROR(Rt(lt_kernels::BiasAdd(y, b, a.batch, a.out, false, s.stream), "bias"));
      if (shape.act == Activation::kSigmoid) {
        SR_RETURN_IF_ERROR(Rt(lt_kernels::SigmoidForward(y, n, s.stream), "sigmoid"));
      }
      break;
    case dl::Kernel::kSigmoidForward:
      SR_RETURN_IF_ERROR(Rt(lt_kernels::SigmoidForward(y, n, s.stream), "sigmoid"));
      break;
    default:
      break;
  }
  *aux_written = plan.writes_aux ? 1 : 0;
  return Status::Ok();
}

Status LinearBackward(int device, const shardrec_plugin_linear_t& a, const float* w, const float* x,
                      const float* y, const float* dy, const void* input_aux, float* dw, float* db,
                      float* dx, cudaStream_t stream) {
  SR_RETURN_IF_ERROR(CheckArgs(a));
  if (w == nullptr || x == nullptr || y == nullptr || dy == nullptr || dw == nullptr ||
      db == nullptr) {
    return Status::InvalidArgument(
        "linear backward on the GPU: w, x, y, dy, dw, db must not be "
        "NULL");
  }
  const dense::LinearShape shape{a.in, a.out, static_cast<Activation>(a.activation)};
  const auto math = static_cast<dl::Math>(a.math);
  Engine& e = GetEngine();
  std::lock_guard<std::mutex> lock(e.mu);
  DeviceGuard guard(RealDeviceApi());
  SR_RETURN_IF_ERROR(guard.Set(device));
  StreamScratch& s = ScratchFor(e, device, stream);

  dl::BackwardOptions opt;
  opt.input_act = static_cast<Activation>(a.input_activation);
  opt.need_dx = dx != nullptr;
  opt.dy_is_dz = (a.flags & SHARDREC_PLUGIN_LINEAR_DY_IS_DZ) != 0;
  dl::Support sup;
  if ((a.flags & SHARDREC_PLUGIN_LINEAR_INPUT_AUX_VALID) == 0 || input_aux == nullptr) {
    sup.relu_aux = false;
  }
  sup.drelu_bgrad = false;  // the entry produces only this layer's bias gradient
  dl::BackwardPlan plan;
  SR_RETURN_IF_ERROR(dl::PlanBackward(shape, a.batch, math, sup, opt, &plan));

  const int64_t n = a.batch * a.out;
  const float* dz = dy;
  if (plan.pre != dl::Kernel::kNone) {
    void* buf = nullptr;
    SR_RETURN_IF_ERROR(Reserve(s, kDz, static_cast<size_t>(n) * sizeof(float), &buf));
    float* out = static_cast<float*>(buf);
    if (plan.pre == dl::Kernel::kSigmoidBackward) {
      SR_RETURN_IF_ERROR(Rt(lt_kernels::SigmoidBackward(dy, y, out, n, s.stream), "sigmoid'"));
    } else {
      SR_RETURN_IF_ERROR(Rt(lt_kernels::ReluBackward(dy, y, out, n, s.stream), "relu'"));
    }
    dz = out;
  }
  const void *dz_in = nullptr, *x_in = nullptr, *w_in = nullptr;
  SR_RETURN_IF_ERROR(Input(s, math, kDz16, dz, n, &dz_in));
  SR_RETURN_IF_ERROR(Input(s, math, kX16, x, a.batch * a.in, &x_in));
  if (plan.has_dx) SR_RETURN_IF_ERROR(Input(s, math, kW16, w, a.out * a.in, &w_in));

  // dW (+ dBias).
  for (;;) {
    GemmArgs p;
    p.a = x_in;
    p.b = dz_in;
    p.d = dw;
    if (plan.dw.epilogue == dl::Epilogue::kBGradB) {
      SR_RETURN_IF_ERROR(Reserve(s, kBias, static_cast<size_t>(plan.bias_scratch) * 4, &p.bias));
    }
    bool unsupported = false;
    SR_RETURN_IF_ERROR(RunGemm(e, device, s, plan.dw, p, &unsupported));
    if (!unsupported) {
      if (plan.dw_post == dl::Kernel::kAccumulate) {
        SR_RETURN_IF_ERROR(
            Rt(lt_kernels::Accumulate(db, static_cast<const float*>(p.bias), a.out, s.stream),
               "bias-gradient accumulate"));
      } else if (plan.dw_post == dl::Kernel::kBiasGrad) {
        SR_RETURN_IF_ERROR(
            Rt(lt_kernels::BiasGrad(dz, a.batch, a.out, db, s.stream), "bias-gradient kernel"));
      }
      break;
    }
    if (plan.dw.epilogue != dl::Epilogue::kBGradB) {
      return Status::Unsupported("cuBLASLt has no algorithm for the weight-gradient GEMM ", a.in,
                                 "x", a.out, "x", a.batch, " on device ", device);
    }
    sup.bgradb = false;
    SR_RETURN_IF_ERROR(dl::PlanBackward(shape, a.batch, math, sup, opt, &plan));
  }

  // dX (with the input layer's ReLU').
  while (plan.has_dx) {
    GemmArgs p;
    p.a = w_in;
    p.b = dz_in;
    p.d = dx;
    p.aux = plan.reads_input_aux ? const_cast<void*>(input_aux) : nullptr;
    bool unsupported = false;
    SR_RETURN_IF_ERROR(RunGemm(e, device, s, plan.dx, p, &unsupported));
    if (!unsupported) {
      if (plan.dx_post == dl::Kernel::kReluBackward) {
        SR_RETURN_IF_ERROR(
            Rt(lt_kernels::ReluBackward(dx, x, dx, a.batch * a.in, s.stream), "relu'"));
      }
      break;
    }
    if (plan.dx.epilogue != dl::Epilogue::kDRelu) {
      return Status::Unsupported("cuBLASLt has no algorithm for the input-gradient GEMM ", a.in,
                                 "x", a.batch, "x", a.out, " on device ", device);
    }
    sup.relu_aux = false;
    SR_RETURN_IF_ERROR(dl::PlanBackward(shape, a.batch, math, sup, opt, &plan));
  }
  return Status::Ok();
}

}  // namespace shardrec::cuda_plugin::lt
