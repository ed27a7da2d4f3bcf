// Helpers of the VBE tests (variable batch size per feature, docs/variable-batch.md): random VBE
// batches, their expansion to the equivalent plain batch, and the run that trains a collection
// on VBE batches next to a second collection of the same plan fed the expanded plain batches
// (and, where the scenario allows, the unsharded reference model), comparing outputs bit for
// bit and weights within the documented bound (bit for bit where no bag is read twice).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardrec/embedding.h"
#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {

enum class VbeMode {
  kNoInverse,  // B_f in [0, 6], batch_size = max B_f, feature-major output
  kInverse,    // inverse indices drawn at random (bags read several times, some never)
  kOnce,       // inverse indices increasing and injective: no bag read twice
};
const char* VbeModeName(VbeMode m);

// One rank's VBE batch, owning its arrays.
struct VbeBatchData {
  int64_t batch_size = 0;
  std::vector<int64_t> sizes;  // B_f
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  std::vector<float> weights;
  bool has_inverse = false;
  std::vector<int64_t> inverse;  // F * batch_size entries when has_inverse (may be none)
  shardrec_kjt_vbe_view_t View() const;
};

// A random VBE batch: ids of feature f in [0, id_range[f]), bags of up to max_bag ids.
VbeBatchData MakeVbeBatch(uint64_t seed, const std::vector<int64_t>& id_range, VbeMode mode,
                          bool weighted, int32_t max_bag);
// The equivalent plain batch (bag inverse[f * B + b] of feature f at sample b; without inverse
// indices, sample b >= B_f of feature f is an empty bag).
RefBatch Expand(const VbeBatchData& v);
// The plain output of the expanded batch (B x dim, or a sequence's rows) turned into the VBE
// layout; `widths[f]` is feature f's output width (pooled).
std::vector<float> PlainToVbe(const VbeBatchData& v, const std::vector<float>& plain,
                              const std::vector<int64_t>& widths, int64_t output_dim,
                              bool sequence);
// A VBE-layout gradient turned into the expanded batch's gradient (no inverse: zeros in the
// empty padding rows; with inverse indices and sequences: the same floats).
std::vector<float> VbeGradToPlain(const VbeBatchData& v, const std::vector<float>& grad,
                                  const std::vector<int64_t>& widths, int64_t output_dim,
                                  bool sequence);
// Each feature's output width (the dims of the tables reading it).
std::vector<int64_t> FeatureWidths(const Scenario& s);
// Per feature: the ids valid in every table reading it.
std::vector<int64_t> IdRanges(const Scenario& s);

// What a VBE run checks and how it is driven.
struct VbeRunOptions {
  // kInverse: weights within the bound (bags read several times); the others: bit for bit.
  VbeMode mode = VbeMode::kInverse;
  // Rank `rank`'s batch of step `step`; null: MakeVbeBatch(..., mode, s.weighted, s.max_bag).
  std::function<VbeBatchData(size_t step, size_t rank)> batch;
  int32_t steps = 3;
  bool pipelined = false;         // input_dist_start_vbe + wait + forward_distributed
  bool mix_plain = true;          // the last rank of a world >= 2 feeds a plain batch at step 1
  bool check_reference = true;    // also against the reference model (fixed tables only)
  bool check_weights = true;      // weights and states through the accessors (fixed tables only)
  std::vector<int64_t> id_range;  // per feature; empty: IdRanges(s)
  // Per feature, the ids it draws from (raw ids of dynamic tables): an id k drawn in
  // [0, pools[f].size()) becomes pools[f][k]. Empty: the ids as drawn. Needs check_reference off.
  std::vector<std::vector<int64_t>> pools;
  // Options of both collections (encodings, ...): applied after init and the scenario's seed.
  std::function<void(shardrec_embedding_options_t*)> options;
  // Creates rank `rank`'s collection `which` (0: fed VBE batches, 1: the expanded ones), in that
  // order on every rank; null: shardrec_embedding_create of the plan over GroupComm(s.world).
  // Whatever it makes beside the collection (a mesh) must outlive the run.
  std::function<void(int rank, int which, shardrec_embedding_t** out)> create;
  // Called on both collections after each step's backwards, VBE first (a mesh sync).
  std::function<void(int rank, int which, shardrec_embedding_t* c)> after_step;
  // Called at the end on every rank with both collections (further checks: dynamic stats).
  std::function<void(int rank, shardrec_embedding_t* vbe, shardrec_embedding_t* expanded)> finish;
};

// Trains a VBE collection and a collection fed the expanded batches for opts.steps steps, every
// rank a thread (s.world); checks forward outputs bit for bit every step, weights and states at
// the end (bit for bit in modes kNoInverse and kOnce, else |a-b| <= 1e-5|b| + 1e-6), and the
// reference model's outputs and weights at the exactness suite's tolerance. s.world is the
// number of ranks (of a 2D mesh: the whole world, whatever the plan's sharding group).
void RunVbeEquivalence(const Scenario& s, shardrec_plan_t* plan, const VbeRunOptions& opts);

}  // namespace shardrec::testing
