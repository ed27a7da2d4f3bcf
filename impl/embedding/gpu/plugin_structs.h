// The embedding kernels' argument types as the plain-C structs of the CUDA plugin's table
// (impl/core/plugin_abi.h) and back. libshardrec.so marshals with ToAbi (dispatch.cc), the
// plugin unmarshals with FromAbi (impl/cuda_plugin/embedding_entries.cc); keeping both directions
// in one header keeps them each other's inverse. CUDA-free and header-only, so the plugin and the
// test double share it without linking anything of libshardrec's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/dtype.h"
#include "impl/core/plugin_abi.h"
#include "impl/core/status.h"
#include "impl/embedding/kernels/device_runs.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/simt/dp_body.h"
#include "impl/embedding/kernels/simt/grad_body.h"
#include "impl/embedding/kernels/simt/route_body.h"
#include "impl/embedding/kernels/simt/stats_body.h"
#include "impl/embedding/kernels/simt/unpack_body.h"
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
  if (s.row_state_stride != 1)
    return Status::Unsupported("shard: row-wise states ", s.row_state_stride,
                               " floats apart (the device kernels take dense state arrays)");
  if (s.row_ids != nullptr)
    return Status::Unsupported(
        "shard: rounding keyed by row ids (a dynamic table; the device kernels key it by row)");
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

// The route's steps' parameters, field for field (a field added to one and not the other changes
// the size).
static_assert(sizeof(shardrec_plugin_route_t) == sizeof(simt_body::RouteParams));
inline shardrec_plugin_route_t ToAbi(const simt_body::RouteParams& p) {
  shardrec_plugin_route_t r{};
  r.batch_size = p.batch_size;
  r.num_lengths = p.num_lengths;
  r.num_values = p.num_values;
  r.lengths = p.lengths;
  r.values = p.values;
  r.weights = p.weights;
  r.ids64 = p.ids64;
  r.bounds = p.bounds;
  r.check_non_finite = p.check_non_finite;
  r.sequence = p.sequence;
  r.num_pairs = p.num_pairs;
  r.num_slots = p.num_slots;
  r.num_real_slots = p.num_real_slots;
  r.pair_feature = p.pair_feature;
  r.pair_rows = p.pair_rows;
  r.pair_flags = p.pair_flags;
  r.pair_block_begin = p.pair_block_begin;
  r.block_first = p.block_first;
  r.block_slot_begin = p.block_slot_begin;
  r.block_slots = p.block_slots;
  r.slot_dest = p.slot_dest;
  r.slot_in_dest = p.slot_in_dest;
  r.bag_offsets = p.bag_offsets;
  r.wide = p.wide;
  r.slot_lengths = p.slot_lengths;
  r.id_scan = p.id_scan;
  r.ne_scan = p.ne_scan;
  r.mean_div = p.mean_div;
  r.slot_ids_at = p.slot_ids_at;
  r.slot_ne_at = p.slot_ne_at;
  r.status = p.status;
  r.send = p.send;
  r.send_bytes = p.send_bytes;
  r.ret_target = p.ret_target;
  r.dp_rows = p.dp_rows;
  r.dp_weights = p.dp_weights;
  r.dp_pos = p.dp_pos;
  r.dp_offsets = p.dp_offsets;
  r.dest_base = p.dest_base;
  r.dest_rows = p.dest_rows;
  r.dest_weights = p.dest_weights;
  r.dest_first_id = p.dest_first_id;
  return r;
}

// The unpack's run table lives in device memory, written by libshardrec and read by the kernel:
// the C and C++ records must have one layout (checked field by field), and its parameters are
// marshalled field for field.
static_assert(sizeof(shardrec_plugin_unpack_run_t) == sizeof(simt_body::UnpackRun));
static_assert(offsetof(shardrec_plugin_unpack_run_t, lengths) ==
              offsetof(simt_body::UnpackRun, lengths));
static_assert(offsetof(shardrec_plugin_unpack_run_t, offsets) ==
              offsetof(simt_body::UnpackRun, offsets));
static_assert(offsetof(shardrec_plugin_unpack_run_t, ids) == offsetof(simt_body::UnpackRun, ids));
static_assert(offsetof(shardrec_plugin_unpack_run_t, bags) == offsetof(simt_body::UnpackRun, bags));
static_assert(sizeof(shardrec_plugin_unpack_t) == sizeof(simt_body::UnpackParams));
inline shardrec_plugin_unpack_t ToAbi(const simt_body::UnpackParams& p) {
  return {p.num_runs,   p.num_cells, reinterpret_cast<const shardrec_plugin_unpack_run_t*>(p.runs),
          p.cell_begin, p.wide,      p.ne_scan,
          p.id_scan,    p.bad};
}

// The gradient kernels' parameters, field for field; the pack's job table lives in device
// memory, written by libshardrec and read by the kernel: one layout on both sides.
static_assert(sizeof(shardrec_plugin_finite_t) == sizeof(simt_body::FiniteParams));
static_assert(sizeof(simt_body::FiniteResult) == 16);
inline shardrec_plugin_finite_t ToAbi(const simt_body::FiniteParams& p) {
  return {p.x, p.n, p.flag_value, p.flag, p.result};
}
static_assert(sizeof(shardrec_plugin_pack_job_t) == sizeof(simt_body::PackJob));
static_assert(offsetof(shardrec_plugin_pack_job_t, targets) ==
              offsetof(simt_body::PackJob, targets));
static_assert(offsetof(shardrec_plugin_pack_job_t, dst) == offsetof(simt_body::PackJob, dst));
static_assert(offsetof(shardrec_plugin_pack_job_t, div) == offsetof(simt_body::PackJob, div));
static_assert(offsetof(shardrec_plugin_pack_job_t, count) == offsetof(simt_body::PackJob, count));
static_assert(offsetof(shardrec_plugin_pack_job_t, col) == offsetof(simt_body::PackJob, col));
static_assert(offsetof(shardrec_plugin_pack_job_t, cols) == offsetof(simt_body::PackJob, cols));
static_assert(sizeof(shardrec_plugin_pack_t) == sizeof(simt_body::PackParams));
inline shardrec_plugin_pack_t ToAbi(const simt_body::PackParams& p) {
  return {p.grad, p.stride, p.num_jobs, reinterpret_cast<const shardrec_plugin_pack_job_t*>(p.jobs),
          p.first_row};
}

// The data-parallel steps' parameters, field for field; the pair and table records live in
// device memory, written by libshardrec and read by the kernels: one layout on both sides.
static_assert(sizeof(shardrec_plugin_dp_pair_t) == sizeof(simt_body::DpPair));
static_assert(offsetof(shardrec_plugin_dp_pair_t, offsets) == offsetof(simt_body::DpPair, offsets));
static_assert(offsetof(shardrec_plugin_dp_pair_t, div) == offsetof(simt_body::DpPair, div));
static_assert(offsetof(shardrec_plugin_dp_pair_t, col) == offsetof(simt_body::DpPair, col));
static_assert(offsetof(shardrec_plugin_dp_pair_t, table) == offsetof(simt_body::DpPair, table));
static_assert(sizeof(shardrec_plugin_dp_table_t) == sizeof(simt_body::DpTable));
static_assert(offsetof(shardrec_plugin_dp_table_t, grad_at) ==
              offsetof(simt_body::DpTable, grad_at));
static_assert(offsetof(shardrec_plugin_dp_table_t, touch_at) ==
              offsetof(simt_body::DpTable, touch_at));
static_assert(offsetof(shardrec_plugin_dp_table_t, dim) == offsetof(simt_body::DpTable, dim));
static_assert(sizeof(shardrec_plugin_dp_t) == sizeof(simt_body::DpParams));
inline shardrec_plugin_dp_t ToAbi(const simt_body::DpParams& p) {
  shardrec_plugin_dp_t d{};
  d.grad = p.grad;
  d.stride = p.stride;
  d.batch_size = p.batch_size;
  d.num_pairs = p.num_pairs;
  d.pairs = reinterpret_cast<const shardrec_plugin_dp_pair_t*>(p.pairs);
  d.pair_first = p.pair_first;
  d.num_ids = p.num_ids;
  d.rows = p.rows;
  d.weights = p.weights;
  d.pos = p.pos;
  d.num_tables = p.num_tables;
  d.tables = reinterpret_cast<const shardrec_plugin_dp_table_t*>(p.tables);
  d.key_first = p.key_first;
  d.num_keys = p.num_keys;
  d.dense = p.dense;
  d.dense_floats = p.dense_floats;
  d.scale = p.scale;
  d.rows_out = p.rows_out;
  d.grads_out = p.grads_out;
  d.counts_out = p.counts_out;
  d.gate = p.gate;
  return d;
}

static_assert(sizeof(shardrec_plugin_sum_sources_t) == sizeof(simt_body::SumSourcesParams));
static_assert(SHARDREC_PLUGIN_MAX_SUM_SOURCES == simt_body::kMaxSumSources);
inline shardrec_plugin_sum_sources_t ToAbi(const simt_body::SumSourcesParams& p) {
  shardrec_plugin_sum_sources_t s{};
  for (int k = 0; k < simt_body::kMaxSumSources; ++k) s.sources[k] = p.sources[k];
  s.num_sources = p.num_sources;
  s.accumulate = p.accumulate;
  s.row_floats = p.row_floats;
  s.max_rows = p.max_rows;
  s.count = p.count;
  s.dst = p.dst;
  return s;
}

inline shardrec_plugin_counted_rows_t ToAbi(const CountedRows& r) {
  return {r.rows, r.grads, r.count, r.max_rows};
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

inline simt_body::RouteParams FromAbi(const shardrec_plugin_route_t& r) {
  simt_body::RouteParams p;
  p.batch_size = r.batch_size;
  p.num_lengths = r.num_lengths;
  p.num_values = r.num_values;
  p.lengths = r.lengths;
  p.values = r.values;
  p.weights = r.weights;
  p.ids64 = r.ids64;
  p.bounds = r.bounds;
  p.check_non_finite = r.check_non_finite;
  p.sequence = r.sequence;
  p.num_pairs = r.num_pairs;
  p.num_slots = r.num_slots;
  p.num_real_slots = r.num_real_slots;
  p.pair_feature = r.pair_feature;
  p.pair_rows = r.pair_rows;
  p.pair_flags = r.pair_flags;
  p.pair_block_begin = r.pair_block_begin;
  p.block_first = r.block_first;
  p.block_slot_begin = r.block_slot_begin;
  p.block_slots = r.block_slots;
  p.slot_dest = r.slot_dest;
  p.slot_in_dest = r.slot_in_dest;
  p.bag_offsets = r.bag_offsets;
  p.wide = r.wide;
  p.slot_lengths = r.slot_lengths;
  p.id_scan = r.id_scan;
  p.ne_scan = r.ne_scan;
  p.mean_div = r.mean_div;
  p.slot_ids_at = r.slot_ids_at;
  p.slot_ne_at = r.slot_ne_at;
  p.status = static_cast<simt_body::RouteStatus*>(r.status);
  p.send = r.send;
  p.send_bytes = r.send_bytes;
  p.ret_target = r.ret_target;
  p.dp_rows = r.dp_rows;
  p.dp_weights = r.dp_weights;
  p.dp_pos = r.dp_pos;
  p.dp_offsets = r.dp_offsets;
  p.dest_base = r.dest_base;
  p.dest_rows = r.dest_rows;
  p.dest_weights = r.dest_weights;
  p.dest_first_id = r.dest_first_id;
  return p;
}

inline simt_body::UnpackParams FromAbi(const shardrec_plugin_unpack_t& u) {
  simt_body::UnpackParams p;
  p.num_runs = u.num_runs;
  p.num_cells = u.num_cells;
  p.runs = reinterpret_cast<const simt_body::UnpackRun*>(u.runs);
  p.cell_begin = u.cell_begin;
  p.wide = u.wide;
  p.ne_scan = u.ne_scan;
  p.id_scan = u.id_scan;
  p.bad = u.bad;
  return p;
}

inline simt_body::FiniteParams FromAbi(const shardrec_plugin_finite_t& f) {
  simt_body::FiniteParams p;
  p.x = f.x;
  p.n = f.n;
  p.flag_value = f.flag_value;
  p.flag = f.flag;
  p.result = static_cast<simt_body::FiniteResult*>(f.result);
  return p;
}

inline simt_body::PackParams FromAbi(const shardrec_plugin_pack_t& k) {
  simt_body::PackParams p;
  p.grad = k.grad;
  p.stride = k.stride;
  p.num_jobs = k.num_jobs;
  p.jobs = reinterpret_cast<const simt_body::PackJob*>(k.jobs);
  p.first_row = k.first_row;
  return p;
}

inline simt_body::DpParams FromAbi(const shardrec_plugin_dp_t& d) {
  simt_body::DpParams p;
  p.grad = d.grad;
  p.stride = d.stride;
  p.batch_size = d.batch_size;
  p.num_pairs = d.num_pairs;
  p.pairs = reinterpret_cast<const simt_body::DpPair*>(d.pairs);
  p.pair_first = d.pair_first;
  p.num_ids = d.num_ids;
  p.rows = d.rows;
  p.weights = d.weights;
  p.pos = d.pos;
  p.num_tables = d.num_tables;
  p.tables = reinterpret_cast<const simt_body::DpTable*>(d.tables);
  p.key_first = d.key_first;
  p.num_keys = d.num_keys;
  p.dense = d.dense;
  p.dense_floats = d.dense_floats;
  p.scale = d.scale;
  p.rows_out = d.rows_out;
  p.grads_out = d.grads_out;
  p.counts_out = d.counts_out;
  p.gate = d.gate;
  return p;
}

inline simt_body::SumSourcesParams FromAbi(const shardrec_plugin_sum_sources_t& s) {
  simt_body::SumSourcesParams p;
  for (int k = 0; k < simt_body::kMaxSumSources; ++k) p.sources[k] = s.sources[k];
  p.num_sources = s.num_sources;
  p.accumulate = s.accumulate;
  p.row_floats = s.row_floats;
  p.max_rows = s.max_rows;
  p.count = s.count;
  p.dst = s.dst;
  return p;
}

inline CountedRows FromAbi(const shardrec_plugin_counted_rows_t& r) {
  return {r.rows, r.grads, r.count, r.max_rows};
}

}  // namespace shardrec::embedding::kernels::abi
