// DLRM's feature interactions: the pairwise dot interaction of the DLRM paper, and the low-rank
// DCN-v2 cross network of the MLPerf DLRM-DCNv2 reference.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/dense/tensor.h"

namespace shardrec::dense {

// Dot interaction over F+1 vectors of width d per sample: the dense vector dense[B, d] and the F
// embeddings emb[B, F*d] (feature after feature). The output is [B, d + F(F+1)/2]: the dense
// vector, then the dot products of every pair (i, j) with i > j in row-major order of the
// strictly lower triangle (vector 0 is the dense one), as the DLRM reference does.
int64_t DotInteractionWidth(int64_t num_sparse, int64_t dim);
Status DotInteractionForward(const ExecContext& ctx, const float* dense, const float* emb,
                             int64_t batch, int64_t num_sparse, int64_t dim, float* out);
// Gradients of the inputs from dout[B, width]; d_dense and d_emb are overwritten.
Status DotInteractionBackward(const ExecContext& ctx, const float* dense, const float* emb,
                              const float* dout, int64_t batch, int64_t num_sparse, int64_t dim,
                              float* d_dense, float* d_emb);

// Low-rank cross network: with x0 the input [B, D], layer l computes
//   x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l     (element-wise product with x0)
// with V_l [rank, D], W_l [D, rank], b_l [D]. The output is x_L, width D.
// Thread-safety: one thread at a time, except Infer (const), which any number of threads may run
// at once while nothing else runs; Forward keeps the batch's intermediates for Backward.
class DcnCross {
 public:
  static Status Create(int64_t width, int num_layers, int64_t rank, uint64_t seed,
                       const std::string& name, std::unique_ptr<DcnCross>* out);

  int64_t width() const { return width_; }
  // 3 per layer: V_l weight, W_l weight, W_l bias.
  const std::vector<DenseTensor>& tensors() const { return tensors_; }
  Status BindTensor(size_t i, float* param, float* grad);

  Status Forward(const ExecContext& ctx, const float* x0, int64_t batch, float* y);
  // Forward's y, bit for bit, with the intermediates in buffers of the call (nothing kept).
  Status Infer(const ExecContext& ctx, const float* x0, int64_t batch, float* y) const;
  // Accumulates parameter gradients and writes dx0 (not null); on_ready as in Mlp::Backward.
  Status Backward(const ExecContext& ctx, const float* dy, float* dx0,
                  const std::function<void(size_t)>& on_ready = nullptr);
  void ZeroGrad();

 private:
  DcnCross() = default;

  int64_t width_ = 0, rank_ = 0;
  int num_layers_ = 0;
  std::vector<float> params_, grads_;
  std::vector<DenseTensor> tensors_;
  const float* x0_ = nullptr;
  int64_t batch_ = -1;
  std::vector<std::vector<float>> xs_, vs_, ws_;  // per layer: input, V x, W V x + b
};

// Binary cross-entropy with logits, summed over n samples and divided by `normalizer` (the
// global batch when ranks split a batch, so per-rank gradients sum to the global mean's).
// Writes dlogits[i] = (sigmoid(z_i) - y_i) / normalizer and returns the loss sum / normalizer
// in *loss. Stable for any |z|. Labels must be 0 or 1 (other values are rejected).
Status BceWithLogits(const float* logits, const float* labels, int64_t n, double normalizer,
                     double* loss, float* dlogits);

}  // namespace shardrec::dense
