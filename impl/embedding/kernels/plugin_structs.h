// The embedding kernels' argument types as the plain-C structs of the CUDA plugin's table
// (impl/core/plugin_abi.h) and back. libshardrec.so marshals with ToAbi (device_dispatch.cc), the
// plugin unmarshals with FromAbi (impl/cuda_plugin/embedding_entries.cc); keeping both directions
// in one header keeps them each other's inverse. CUDA-free and header-only, so the plugin and the
// test double share it without linking anything of libshardrec's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/dtype.h"
#include "impl/core/plugin_abi.h"
#include "impl/core/status.h"
#include "impl/embedding/kernels/device_runs.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding::kernels::abi {

// ---- C++ -> C (libshardrec.so) ----------------------------------------------------------------

inline shardrec_plugin_weights_t ToAbi(const WeightsView& w) {
  return {w.data, w.rows, w.stride, static_cast<int32_t>(w.dtype), w.cols};
}

inline shardrec_plugin_bag_run_t ToAbi(const BagRun& r) {
  return {r.offsets, r.rows, r.weights, r.num_bags, r.io_offset};
}

inline shardrec_plugin_lookup_job_t ToAbi(const LookupJob& j) {
  return {ToAbi(j.weights), ToAbi(j.run), j.out, j.out_stride};
}

inline shardrec_plugin_optimizer_t ToAbi(const optim::OptimizerConfig& c) {
  return {static_cast<int32_t>(c.type),
          c.learning_rate,
          c.eps,
          c.beta1,
          c.beta2,
          c.weight_decay,
          static_cast<int32_t>(c.weight_decay_mode),
          c.stochastic_rounding ? 1 : 0,
          c.seed};
}

inline Status ToAbi(const optim::ShardParams& s, shardrec_plugin_shard_t* out) {
  if (s.states.size() > SHARDREC_PLUGIN_MAX_STATES)
    return Status::InvalidArgument("shard: ", s.states.size(), " optimizer states, at most ",
                                   SHARDREC_PLUGIN_MAX_STATES);
  *out = shardrec_plugin_shard_t{};
  out->weights = s.weights;
  for (size_t i = 0; i < s.states.size(); ++i) out->states[i] = s.states[i];
  out->rows = s.rows;
  out->stride = s.stride;
  out->row_offset = s.row_offset;
  out->table_key = s.table_key;
  out->dtype = static_cast<int32_t>(s.dtype);
  out->cols = s.cols;
  out->col_offset = s.col_offset;
  out->num_states = static_cast<int32_t>(s.states.size());
  return Status::Ok();
}

inline shardrec_plugin_row_update_t ToAbi(const optim::RowUpdate& u) {
  return {u.rows.data(), u.grads, static_cast<int64_t>(u.rows.size())};
}

// `storage` receives the run descriptors `out` points to; it must outlive the call.
inline Status ToAbi(const DeviceRuns& dr, std::vector<shardrec_plugin_bag_run_t>* storage,
                    shardrec_plugin_runs_t* out) {
  if (dr.num_ids.size() != dr.runs.size())
    return Status::InvalidArgument("backward: ", dr.num_ids.size(), " id counts for ",
                                   dr.runs.size(), " runs");
  if (dr.runs.size() > static_cast<size_t>(INT32_MAX))
    return Status::InvalidArgument("backward: ", dr.runs.size(), " runs");
  storage->clear();
  storage->reserve(dr.runs.size());
  for (const BagRun& r : dr.runs) storage->push_back(ToAbi(r));
  *out = {storage->data(), dr.num_ids.data(), static_cast<int32_t>(dr.runs.size()), dr.num_rows};
  return Status::Ok();
}

// ---- C -> C++ (the plugin) --------------------------------------------------------------------

inline WeightsView FromAbi(const shardrec_plugin_weights_t& w) {
  return {w.data, static_cast<DType>(w.dtype), w.rows, w.cols, w.stride};
}

inline BagRun FromAbi(const shardrec_plugin_bag_run_t& r) {
  return {r.offsets, r.num_bags, r.rows, r.weights, r.io_offset};
}

inline LookupJob FromAbi(const shardrec_plugin_lookup_job_t& j) {
  return {FromAbi(j.weights), FromAbi(j.run), j.out, j.out_stride};
}

// Refuses what the C++ enums cannot hold (and every other out-of-range field).
inline Status FromAbi(const shardrec_plugin_optimizer_t* c, optim::OptimizerConfig* out) {
  if (c == nullptr) return Status::InvalidArgument("optimizer config must not be NULL");
  if (!optim::IsKnownOptimizerType(c->type))
    return Status::InvalidArgument("optimizer type ", c->type, " is unknown");
  if (c->weight_decay_mode < 0 || c->weight_decay_mode > 2)
    return Status::InvalidArgument("weight decay mode ", c->weight_decay_mode, " is unknown");
  out->type = static_cast<optim::OptimizerType>(c->type);
  out->learning_rate = c->learning_rate;
  out->eps = c->eps;
  out->beta1 = c->beta1;
  out->beta2 = c->beta2;
  out->weight_decay = c->weight_decay;
  out->weight_decay_mode = static_cast<optim::WeightDecayMode>(c->weight_decay_mode);
  out->stochastic_rounding = c->stochastic_rounding != 0;
  out->seed = c->seed;
  return optim::ValidateConfig(*out);
}

inline Status FromAbi(const shardrec_plugin_shard_t* s, optim::ShardParams* out) {
  if (s == nullptr) return Status::InvalidArgument("shard must not be NULL");
  if (s->num_states < 0 || s->num_states > SHARDREC_PLUGIN_MAX_STATES)
    return Status::InvalidArgument("shard: ", s->num_states, " optimizer states");
  out->weights = s->weights;
  out->dtype = static_cast<DType>(s->dtype);
  out->rows = s->rows;
  out->cols = s->cols;
  out->stride = s->stride;
  out->states.assign(s->states, s->states + s->num_states);
  out->table_key = s->table_key;
  out->row_offset = s->row_offset;
  out->col_offset = s->col_offset;
  return Status::Ok();
}

inline Status FromAbi(const shardrec_plugin_row_update_t* u, optim::RowUpdate* out) {
  if (u == nullptr) return Status::InvalidArgument("row update must not be NULL");
  if (u->num_rows < 0 || (u->num_rows > 0 && u->rows == nullptr))
    return Status::InvalidArgument("row update: ", u->num_rows, " rows at ",
                                   static_cast<const void*>(u->rows));
  out->rows = std::span<const int64_t>(u->rows, static_cast<size_t>(u->num_rows));
  out->grads = u->grads;
  return Status::Ok();
}

// `storage` receives the C++ run descriptors `out` points to.
inline Status FromAbi(const shardrec_plugin_runs_t* r, std::vector<BagRun>* storage,
                      DeviceRuns* out) {
  if (r == nullptr) return Status::InvalidArgument("runs must not be NULL");
  if (r->num_runs < 0 || (r->num_runs > 0 && (r->runs == nullptr || r->num_ids == nullptr)))
    return Status::InvalidArgument("runs: ", r->num_runs, " runs without descriptors or counts");
  const auto n = static_cast<size_t>(r->num_runs);
  storage->clear();
  storage->reserve(n);
  for (size_t i = 0; i < n; ++i) storage->push_back(FromAbi(r->runs[i]));
  out->runs = std::span<const BagRun>(storage->data(), n);
  out->num_ids = std::span<const int64_t>(r->num_ids, n);
  out->num_rows = r->num_rows;
  return Status::Ok();
}

}  // namespace shardrec::embedding::kernels::abi
