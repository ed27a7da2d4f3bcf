// A deliberately simple, unsharded reference of the embedding collection for equivalence tests:
// one process, plain loops, full tables, and optimizer formulas written from the TorchRec/FBGEMM
// update rules (FBGEMM's exact fused optimizers), independent of impl/optim. It trains on the
// concatenation of every rank's batch with the sharded gradient rule (sum / world size).
// fp16/bf16 tables keep fp32 math but round their weights to the storage type after
// initialisation and after every update (nearest even); FP8 tables re-encode each such row whole
// (RoundRowToFp8).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardrec::testing {

// Values mirror the SHARDREC_* constants of the C API.
struct RefTable {
  std::string name;
  int64_t rows = 0;
  int32_t dim = 0;
  int32_t pooling = 0;  // 0 SUM, 1 MEAN, 2 NONE
  std::vector<int32_t> features;
  int32_t init_kind = 0;  // 0 default, 1 uniform, 2 constant
  float init_low = 0.0f;
  float init_high = 0.0f;
  // Weight storage: 0 float32, 1 float16, 2 bfloat16, 7 FP8 E4M3, 8 FP8 E5M2 (SHARDREC_DTYPE_*).
  int32_t dtype = 0;
};

// `x` rounded to nearest even in the storage type `dtype` (values as RefTable::dtype; float32
// returns x). Written from the IEEE definitions with frexp/nearbyint, independently of the
// bit tricks of impl/core/half.h.
// FP8 dtypes (7, 8) return x: their rounding is a row's (RoundRowToFp8).
float RoundToStorage(float x, int32_t dtype);

// Whether `dtype` (RefTable::dtype) is an FP8 one (7 E4M3, 8 E5M2).
inline bool IsFp8Storage(int32_t dtype) { return dtype == 7 || dtype == 8; }

// `row[0..dim)` replaced by its FP8 encoding decoded again, as the C API documents it
// (embedding.h, "Weight storage"): the row's scale is the smallest power of two 2^k (k clamped
// to [-126, 111]; 0 for a row without a finite nonzero value) with which the largest finite
// magnitude over 2^k is at most the format's largest finite value plus half its last unit (E4M3:
// 448 + 16, E5M2: 57344 + 4096); each value over 2^k rounds to nearest even with the format's
// mantissa and smallest normal exponent, saturating at the largest finite value (a NaN stays a
// NaN), then times 2^k. Written from that description with frexp/nearbyint in double,
// independently of impl/core/fp8.h. With `bits` (dim values, not null) each value over 2^k rounds
// stochastically instead, as config.h's stochastic_rounding documents it: between its two
// neighbouring codes lo <= |v| < hi, away from zero iff (|v| - lo) / (hi - lo) >= 1 - bits[c] x
// 2^-32 (then saturating as above).
void RoundRowToFp8(float* row, int32_t dim, int32_t dtype, const uint32_t* bits = nullptr);
// Either rounding, by dtype: RoundRowToFp8 for FP8, else RoundToStorage per value.
void RoundRowToStorage(float* row, int32_t dim, int32_t dtype);

// The initial fp32 value of element (row, col) of table `t` (before rounding to its storage
// type): the counter generator keyed by (seed, table name, row, column) the constructor uses.
// Dynamic tables key it by the id instead of the row (docs/dynamic-tables.md).
float RefInitValue(const RefTable& t, uint64_t seed, uint64_t row, int32_t col);

struct RefOptimizer {
  int32_t type =
      0;  // 0 SGD, 1 Adagrad, 2 row-wise Adagrad, 3 Adam, 4 partial row-wise Adam, 5 LAMB
  float lr = 0.01f;
  float eps = 1e-8f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float weight_decay = 0.0f;
  int32_t weight_decay_mode = 0;  // 0 none, 1 L2, 2 decoupled
  // Stochastic rounding in the collection. The reference rounds FP8 rows the same way, with the
  // collection's bits (optim::RoundingBits of seed, step, table name's key, row, column); its
  // fp16/bf16 weights always round to nearest even, so only tests that do not compare 16-bit
  // tables against it set this with 16-bit tables.
  bool stochastic_rounding = false;
};

// One rank's batch, feature-major like the KJT view; weights empty when unweighted.
struct RefBatch {
  int64_t batch_size = 0;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<float> weights;
};

class ReferenceModel {
 public:
  ReferenceModel(int32_t num_features, std::vector<RefTable> tables, RefOptimizer optimizer,
                 uint64_t seed, int32_t world);

  bool sequence() const;
  int64_t output_dim() const;
  // The output of one rank's batch (pooled [B, output_dim] or sequence [num_ids, dim]).
  std::vector<float> Forward(const RefBatch& batch) const;
  // One optimizer step from every rank's batch and output gradient.
  void Backward(const std::vector<RefBatch>& batches, const std::vector<std::vector<float>>& grads);

  const std::vector<float>& weights(size_t table) const { return weights_[table]; }
  // "momentum1" / "momentum2"; empty when the optimizer has no such state.
  const std::vector<float>& state(size_t table, const std::string& name) const;
  // Writable views for the 2D replica simulation, which averages models between steps.
  std::vector<float>& mutable_weights(size_t table) { return weights_[table]; }
  std::vector<float>& mutable_state(size_t table, const std::string& name) {
    return name == "momentum2" ? m2_[table] : m1_[table];
  }
  void set_lr(float lr) { opt_.lr = lr; }
  int64_t steps() const { return step_; }

 private:
  struct Occurrence {
    size_t table;
    int64_t row;
    size_t grad_offset;  // into the rank's gradient
    float scale;         // weight / divisor
    int32_t cols;
  };
  // Every id occurrence of a batch with its place in the output.
  std::vector<Occurrence> Occurrences(const RefBatch& batch) const;
  void Update(size_t table, int64_t row, const float* g);

  int32_t num_features_;
  std::vector<RefTable> tables_;
  RefOptimizer opt_;
  int32_t world_;
  uint64_t seed_;
  int64_t step_ = 0;
  std::vector<float> empty_;
  std::vector<std::vector<float>> weights_;
  std::vector<std::vector<float>> m1_;
  std::vector<std::vector<float>> m2_;
};

}  // namespace shardrec::testing
