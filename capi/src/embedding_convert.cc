// Conversions from the embedding C structs (embedding_convert.h).
#include "capi/src/embedding_convert.h"

#include "capi/src/guard.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"

namespace shardrec::capi {

static_assert(optim::kNumOptimizerTypes == SHARDREC_OPTIMIZER_LAMB + 1);
// One set of optimizer defaults: the C initialiser and the C++ config agree.
constexpr shardrec_optimizer_config_t kCDefaults = SHARDREC_OPTIMIZER_CONFIG_INIT;
constexpr optim::OptimizerConfig kDefaults{};
static_assert(kCDefaults.type == static_cast<int32_t>(kDefaults.type) &&
              kCDefaults.learning_rate == kDefaults.learning_rate &&
              kCDefaults.eps == kDefaults.eps && kCDefaults.beta1 == kDefaults.beta1 &&
              kCDefaults.beta2 == kDefaults.beta2 &&
              kCDefaults.weight_decay == kDefaults.weight_decay &&
              kCDefaults.weight_decay_mode == static_cast<int32_t>(kDefaults.weight_decay_mode));
static_assert(static_cast<int>(optim::WeightDecayMode::kDecoupled) ==
              SHARDREC_WEIGHT_DECAY_DECOUPLED);
static_assert(static_cast<int>(embedding::BoundsPolicy::kSkip) == SHARDREC_BOUNDS_SKIP);
static_assert(static_cast<int>(comm::Encoding::kFp16) == SHARDREC_COMM_ENCODING_FP16 &&
              static_cast<int>(comm::Encoding::kBf16) == SHARDREC_COMM_ENCODING_BF16);

namespace {

// The wire encoding of a shardrec_comm_encoding_t: 0-2 are the row formats of the same values,
// the FP8 ones (3, 4) are RowFormat's kFp8E4M3 / kFp8E5M2.
bool EncodingOf(int32_t c, comm::Encoding* out) {
  switch (c) {
    case SHARDREC_COMM_ENCODING_FP32:
    case SHARDREC_COMM_ENCODING_FP16:
    case SHARDREC_COMM_ENCODING_BF16:
      *out = static_cast<comm::Encoding>(c);
      return true;
    case SHARDREC_COMM_ENCODING_FP8_E4M3:
      *out = comm::Encoding::kFp8E4M3;
      return true;
    case SHARDREC_COMM_ENCODING_FP8_E5M2:
      *out = comm::Encoding::kFp8E5M2;
      return true;
    default:
      return false;
  }
}

constexpr const char* kEncodingNames =
    " (SHARDREC_COMM_ENCODING_FP32 0, FP16 1, BF16 2, FP8_E4M3 3 or FP8_E5M2 4)";

}  // namespace

Status ToOptimizer(const shardrec_optimizer_config_t* c, optim::OptimizerConfig* out) {
  *out = optim::OptimizerConfig();
  if (c == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(
      CheckStructVersion(c->version, SHARDREC_OPTIMIZER_CONFIG_VERSION, "optimizer config"));
  if (!optim::IsKnownOptimizerType(c->type))
    return Status::InvalidArgument("optimizer config: unknown type ", c->type);
  if (c->weight_decay_mode < SHARDREC_WEIGHT_DECAY_NONE ||
      c->weight_decay_mode > SHARDREC_WEIGHT_DECAY_DECOUPLED)
    return Status::InvalidArgument("optimizer config: unknown weight_decay_mode ",
                                   c->weight_decay_mode);
  out->type = static_cast<optim::OptimizerType>(c->type);
  out->learning_rate = c->learning_rate;
  out->eps = c->eps == 0.0f ? 1e-8f : c->eps;
  out->beta1 = c->beta1;
  out->beta2 = c->beta2;
  out->weight_decay = c->weight_decay;
  out->weight_decay_mode = static_cast<optim::WeightDecayMode>(c->weight_decay_mode);
  out->stochastic_rounding = c->stochastic_rounding != 0;
  return optim::ValidateConfig(*out);
}

Status ToCollectionOptions(const shardrec_embedding_options_t* o,
                           embedding::CollectionOptions* out) {
  *out = embedding::CollectionOptions();
  if (o == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(
      CheckStructVersion(o->version, SHARDREC_EMBEDDING_OPTIONS_VERSION, "embedding options"));
  if (o->bounds_policy < SHARDREC_BOUNDS_ERROR || o->bounds_policy > SHARDREC_BOUNDS_SKIP)
    return Status::InvalidArgument("embedding options: unknown bounds_policy ", o->bounds_policy);
  // A thread pool of millions of threads would exhaust the address space on thread stacks
  // (found by fuzz_create); no host has more than a few hundred cores.
  constexpr int32_t kMaxThreads = 1024;
  if (o->num_threads < 0 || o->num_threads > kMaxThreads)
    return Status::InvalidArgument("embedding options: num_threads must be in [0, ", kMaxThreads,
                                   "], got ", o->num_threads);
  if (o->device_type == SHARDREC_DEVICE_CUDA) {
    // The index (>= 0, a visible device, the plugin loaded) is checked by the collection's
    // creation (core::CheckDevice), with the same errors, before any memory is taken.
    out->device = Device::Cuda(o->device_index);
  } else if (o->device_type != SHARDREC_DEVICE_HOST) {
    return Status::InvalidArgument("embedding options: unknown device_type ", o->device_type);
  }
  // Fields of version 2 and later are read only from callers that have them.
  if (o->version >= 2) {
    if (o->non_finite != SHARDREC_NON_FINITE_CHECK && o->non_finite != SHARDREC_NON_FINITE_ALLOW)
      return Status::InvalidArgument("embedding options: unknown non_finite policy ",
                                     o->non_finite);
    out->check_non_finite = o->non_finite == SHARDREC_NON_FINITE_CHECK;
    if (o->table_memory != SHARDREC_TABLE_MEMORY_HUGE_PAGES &&
        o->table_memory != SHARDREC_TABLE_MEMORY_SMALL_PAGES)
      return Status::InvalidArgument("embedding options: unknown table_memory ", o->table_memory);
    out->huge_pages = o->table_memory == SHARDREC_TABLE_MEMORY_HUGE_PAGES;
  }
  if (o->version >= 3) {
    if (!EncodingOf(o->forward_comm_encoding, &out->forward_encoding))
      return Status::InvalidArgument("embedding options: unknown forward_comm_encoding ",
                                     o->forward_comm_encoding, kEncodingNames);
    if (!EncodingOf(o->backward_comm_encoding, &out->backward_encoding))
      return Status::InvalidArgument("embedding options: unknown backward_comm_encoding ",
                                     o->backward_comm_encoding, kEncodingNames);
  }
  if (o->version >= 4) {
    if (o->max_batch_size < 0 || o->max_ids_per_batch < 0)
      return Status::InvalidArgument(
          "embedding options: max_batch_size and max_ids_per_batch must be >= 0 (0 = unknown), "
          "got ",
          o->max_batch_size, " and ", o->max_ids_per_batch);
    out->capacity.max_batch_size = o->max_batch_size;
    out->capacity.max_ids_per_batch = o->max_ids_per_batch;
  }
  if (o->version >= 5) {
    std::vector<shardrec_table_tier_t> tiers;
    const shardrec_table_tier_t d = SHARDREC_TABLE_TIER_INIT;
    const StructVersion versions[] = {
        {sizeof(shardrec_table_tier_t), sizeof(shardrec_table_tier_t)}};
    SR_RETURN_IF_ERROR(ReadVersionedArray(o->tiers, o->num_tiers, d, std::span(versions),
                                          "embedding options: tiers", &tiers));
    for (size_t i = 0; i < tiers.size(); ++i) {
      const shardrec_table_tier_t& t = tiers[i];
      if (t.table == nullptr || t.table[0] == '\0')
        return Status::InvalidArgument("embedding options: tiers[", i, "].table is ",
                                       t.table == nullptr ? "NULL" : "empty");
      if (t.dir == nullptr || t.dir[0] == '\0')
        return Status::InvalidArgument("embedding options: tiers[", i, "] (table '", t.table,
                                       "'): dir is ", t.dir == nullptr ? "NULL" : "empty");
      if (t.cache_bytes <= 0)
        return Status::InvalidArgument("embedding options: tiers[", i, "] (table '", t.table,
                                       "'): cache_bytes must be > 0, got ", t.cache_bytes);
      out->tiers.push_back({t.table, t.dir, t.cache_bytes});
    }
  }
  out->seed = o->seed;
  out->bounds = static_cast<embedding::BoundsPolicy>(o->bounds_policy);
  out->num_threads = o->num_threads;
  if (o->dp_comm != nullptr) out->dp_comm = o->dp_comm->impl;
  return Status::Ok();
}

Status ToBatch(const shardrec_kjt_view_t* b, embedding::Batch* out) {
  SR_RETURN_IF_ERROR(CheckNotNull(b, "batch"));
  if (b->values_dtype != SHARDREC_DTYPE_INT64 && b->values_dtype != SHARDREC_DTYPE_INT32)
    return Status::InvalidArgument(
        "batch: values_dtype must be SHARDREC_DTYPE_INT64 or "
        "SHARDREC_DTYPE_INT32, got ",
        b->values_dtype);
  out->batch_size = b->batch_size;
  out->num_features = static_cast<int64_t>(b->num_features);
  out->lengths = b->lengths;
  out->num_lengths = b->num_lengths;
  out->values = b->values;
  out->values_dtype = static_cast<DType>(b->values_dtype);
  out->num_values = b->num_values;
  out->weights = b->weights;
  out->num_weights = b->num_weights;
  // Host collections ignore the device fields (tensor.h): only an exact CUDA value names a GPU
  // batch; the collection decides what it accepts.
  out->device = b->device_type == SHARDREC_DEVICE_CUDA && b->device_index >= 0
                    ? Device::Cuda(b->device_index)
                    : Device::Host();
  return Status::Ok();
}

void FromOptimizer(const optim::OptimizerConfig& c, shardrec_optimizer_config_t* out) {
  *out = shardrec_optimizer_config_t SHARDREC_OPTIMIZER_CONFIG_INIT;
  out->type = static_cast<int32_t>(c.type);
  out->learning_rate = c.learning_rate;
  out->eps = c.eps;
  out->beta1 = c.beta1;
  out->beta2 = c.beta2;
  out->weight_decay = c.weight_decay;
  out->weight_decay_mode = static_cast<int32_t>(c.weight_decay_mode);
  out->stochastic_rounding = c.stochastic_rounding ? 1 : 0;
}

Status FindTable(const embedding::EmbeddingCollection& coll, const char* table, int32_t* out) {
  *out = coll.plan().TableIndex(table);
  if (*out < 0) return Status::NotFound("no table named '", table, "' in the plan");
  return Status::Ok();
}

Status ToFloatRows(const shardrec_tensor_view_t* v, int64_t row_width, const char* what,
                   float** data, size_t* count, Device* device) {
  SR_RETURN_IF_ERROR(CheckNotNull(v, what));
  if (v->dtype != SHARDREC_DTYPE_FLOAT32)
    return Status::InvalidArgument(what, ": dtype must be SHARDREC_DTYPE_FLOAT32, got ", v->dtype);
  if (v->ndim < 1 || v->ndim > SHARDREC_TENSOR_MAX_DIMS)
    return Status::InvalidArgument(what, ": ndim must be in [1, ", SHARDREC_TENSOR_MAX_DIMS,
                                   "], got ", v->ndim);
  size_t n = 1;
  for (int32_t d = 0; d < v->ndim; ++d) {
    if (v->shape[d] < 0)
      return Status::InvalidArgument(what, ": shape[", d, "] is negative (", v->shape[d], ")");
    if (__builtin_mul_overflow(n, static_cast<size_t>(v->shape[d]), &n))
      return Status::InvalidArgument(what, ": the element count overflows");
  }
  if (v->ndim >= 2 && v->shape[v->ndim - 1] != row_width)
    return Status::InvalidArgument(what, ": the last dimension is ", v->shape[v->ndim - 1],
                                   " but rows of this collection have ", row_width, " columns");
  if (v->device_type == SHARDREC_DEVICE_HOST) {
    *device = Device::Host();
  } else if (v->device_type == SHARDREC_DEVICE_CUDA) {
    if (v->device_index < 0)
      return Status::InvalidArgument(what, ": device_index must be >= 0, got ", v->device_index);
    *device = Device::Cuda(v->device_index);
  } else {
    return Status::InvalidArgument(what, ": unknown device_type ", v->device_type);
  }
  *data = static_cast<float*>(v->data);
  *count = n;
  return Status::Ok();
}

}  // namespace shardrec::capi
