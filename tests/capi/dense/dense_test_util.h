// Shared helpers of the dense C API tests: owning handles, communicator groups, deterministic
// batches, and one data-parallel training step of an MLP driven through shardrec/ddp.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/comm.h"
#include "shardrec/ddp.h"
#include "shardrec/dense.h"

namespace shardrec::testing {

struct MlpDeleter {
  void operator()(shardrec_mlp_t* m) const { shardrec_mlp_destroy(m); }
};
struct DdpDeleter {
  void operator()(shardrec_ddp_t* d) const { shardrec_ddp_destroy(d); }
};
struct FsdpDeleter {
  void operator()(shardrec_fsdp_t* f) const { shardrec_fsdp_destroy(f); }
};
struct OptDeleter {
  void operator()(shardrec_dense_optimizer_t* o) const { shardrec_dense_optimizer_destroy(o); }
};
struct CommDeleter {
  void operator()(shardrec_comm_t* c) const { shardrec_comm_destroy(c); }
};
using MlpPtr = std::unique_ptr<shardrec_mlp_t, MlpDeleter>;
using DdpPtr = std::unique_ptr<shardrec_ddp_t, DdpDeleter>;
using FsdpPtr = std::unique_ptr<shardrec_fsdp_t, FsdpDeleter>;
using OptPtr = std::unique_ptr<shardrec_dense_optimizer_t, OptDeleter>;
using CommPtr = std::unique_ptr<shardrec_comm_t, CommDeleter>;

// A group of `n` in-process ranks (Gloo, collectives through shared memory); handle r is rank r.
std::vector<CommPtr> LocalGroup(int n);

// The test MLPs: `in` inputs, ReLU hidden layers of `hidden` widths, one logit out.
struct MlpShape {
  int64_t in = 16;
  std::vector<int64_t> outs = {32, 24, 1};
  uint64_t seed = 7;
};
MlpPtr MakeMlp(const MlpShape& shape, const char* name = nullptr);
// A one-layer MLP (in -> out) with the activation the full MLP uses at that layer.
MlpPtr MakeLayer(int64_t in, int64_t out, int32_t activation);

std::vector<int64_t> TensorCounts(shardrec_mlp_t* mlp);
// Copies of every tensor's parameters (index order).
std::vector<std::vector<float>> Params(shardrec_mlp_t* mlp);
std::vector<std::vector<float>> Grads(shardrec_mlp_t* mlp);
std::vector<shardrec_dense_param_t> Tensors(shardrec_mlp_t* mlp);

// Deterministic inputs and 0/1 labels of a global batch: sample i of `step` is the same whatever
// the rank that holds it, so rank r's slice [r*b, (r+1)*b) of a W*b batch equals what the
// single-rank reference reads.
struct Batch {
  std::vector<float> x, labels;
};
Batch MakeBatch(int64_t in, int64_t first, int64_t count, int step);

shardrec_optimizer_config_t SgdConfig(float lr);
shardrec_optimizer_config_t AdamConfig(float lr);

// Forward + BCE (normalised by the local batch) + backward on one MLP. Gradients accumulate
// into whatever the MLP's gradients are bound to. `on_ready` as in shardrec_mlp_backward.
// Returns the loss.
double ForwardBackward(shardrec_mlp_t* mlp, const Batch& b, shardrec_grad_ready_fn on_ready,
                       void* user);

// Largest |a - b| / (atol + rtol |b|) over two tensor lists of the same shape (<= 1 passes).
double WorstError(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b, double atol, double rtol);
// Largest |a - b| over two tensor lists.
double MaxAbsDiff(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b);

std::string LastError();

}  // namespace shardrec::testing
