// What each rank of tiered_step_bench runs between its embedding forward and backward: a model's
// dense part, stood in for by a wait or a busy loop, or a DLRM's through the public C API.
#pragma once

#include <cstdint>
#include <memory>

#include "shardrec/shardrec.h"

namespace shardrec::bench {

// One rank's dense model, run identically in the in-memory and the tiered runs. Aborts on a
// library failure (a benchmark has no way on).
class DenseWork {
 public:
  virtual ~DenseWork() = default;
  // Between the embedding forward and backward: reads the pooled embeddings ([batch, dim], this
  // rank's samples) and writes their gradients, the same shape, for the embedding backward.
  virtual void ForwardBackward(const float* pooled, float* d_pooled) = 0;
  // After the embedding backward: what a model does there (a DLRM: the bottom MLP's backward,
  // the dense gradients' average over the ranks and the optimizer step).
  virtual void Finish() {}
};

// `ms` milliseconds of waiting (the dense model on an accelerator, the host CPU free) or, with
// `spin`, of a busy loop on the calling thread; the gradients are a constant 0.01.
std::unique_ptr<DenseWork> MakeStandInDense(double ms, bool spin, int64_t batch, int32_t dim);

// The dense part of examples/dlrm's model (its defaults: 13 dense features, bottom MLP 64-32 and
// then `dim`, the dot interaction, top MLP 128-64-1, sigmoid + BCE, Adam, dense gradients
// averaged over `comm` by a bucketer), over one pooled sparse feature of width `dim`, at `batch`
// samples per rank. Collective over `comm` (the bucketer's creation): every rank makes one.
// Dense features and labels are random (`seed`), the same every step.
std::unique_ptr<DenseWork> MakeDlrmDense(shardrec_comm_t* comm, int64_t batch, int32_t dim,
                                         uint64_t seed);

}  // namespace shardrec::bench
