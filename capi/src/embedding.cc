// C API of the sharded embedding collection: argument checks and translation to
// shardrec::embedding::EmbeddingCollection.
#include "shardrec/embedding.h"

#include <cmath>

#include "capi/src/embedding_handle.h"
#include "capi/src/guard.h"
#include "capi/src/handles.h"
#include "capi/src/plan_handle.h"
#include "capi/src/versioned.h"

namespace shardrec::capi {
namespace {

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

Status ToOptions(const shardrec_embedding_options_t* o, embedding::CollectionOptions* out) {
  *out = embedding::CollectionOptions();
  if (o == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(
      CheckStructVersion(o->version, SHARDREC_EMBEDDING_OPTIONS_VERSION, "embedding options"));
  if (o->bounds_policy < SHARDREC_BOUNDS_ERROR || o->bounds_policy > SHARDREC_BOUNDS_SKIP)
    return Status::InvalidArgument("embedding options: unknown bounds_policy ", o->bounds_policy);
  if (o->num_threads < 0)
    return Status::InvalidArgument("embedding options: num_threads must be >= 0, got ",
                                   o->num_threads);
  if (o->device_type == SHARDREC_DEVICE_CUDA)
    return Status::Unsupported(
        "embedding options: CUDA collections are not available in this "
        "build yet; use SHARDREC_DEVICE_HOST");
  if (o->device_type != SHARDREC_DEVICE_HOST)
    return Status::InvalidArgument("embedding options: unknown device_type ", o->device_type);
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
  return Status::Ok();
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Guard;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_optimizer_config_init(shardrec_optimizer_config_t* config,
                                                              uint32_t version) {
  const shardrec_optimizer_config_t d = SHARDREC_OPTIMIZER_CONFIG_INIT;
  return shardrec::capi::InitStruct(config, version, SHARDREC_OPTIMIZER_CONFIG_VERSION, d,
                                    "config");
}

SHARDREC_API shardrec_status_t
shardrec_embedding_options_init(shardrec_embedding_options_t* options, uint32_t version) {
  const shardrec_embedding_options_t d = SHARDREC_EMBEDDING_OPTIONS_INIT;
  return shardrec::capi::InitStruct(options, version, SHARDREC_EMBEDDING_OPTIONS_VERSION, d,
                                    "options");
}

SHARDREC_API shardrec_status_t shardrec_embedding_create(
    shardrec_embedding_t** out, const shardrec_plan_t* plan, shardrec_comm_t* comm,
    const shardrec_optimizer_config_t* optimizer, const shardrec_embedding_options_t* options) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    SR_RETURN_IF_ERROR(CheckNotNull(plan, "plan"));
    SR_RETURN_IF_ERROR(CheckNotNull(comm, "comm"));
    if (plan->impl == nullptr || comm->impl == nullptr)
      return Status::InvalidArgument("plan or comm handle is empty");
    shardrec::optim::OptimizerConfig oc;
    shardrec::embedding::CollectionOptions co;
    // A bad config is a local error, but the collective check must still run on every rank.
    Status local = shardrec::capi::ToOptimizer(optimizer, &oc);
    if (local.ok()) local = shardrec::capi::ToOptions(options, &co);
    if (!local.ok()) {
      // Take part in creation's agreement with a deliberately failing configuration.
      shardrec::embedding::CollectionOptions bad;
      bad.bounds = static_cast<shardrec::embedding::BoundsPolicy>(-1);
      std::unique_ptr<shardrec::embedding::EmbeddingCollection> ignored;
      (void)shardrec::embedding::EmbeddingCollection::Create(
          plan->impl, comm->impl, shardrec::optim::OptimizerConfig(), bad, &ignored);
      return local;
    }
    // Stochastic rounding draws its bits from the collection's seed (documented there).
    oc.seed = co.seed;
    auto handle = std::make_unique<shardrec_embedding>();
    SR_RETURN_IF_ERROR(shardrec::embedding::EmbeddingCollection::Create(plan->impl, comm->impl, oc,
                                                                        co, &handle->impl));
    handle->states = handle->impl->States();
    *out = handle.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_embedding_destroy(shardrec_embedding_t* coll) { delete coll; }

SHARDREC_API shardrec_status_t shardrec_embedding_output_dim(const shardrec_embedding_t* coll,
                                                             int64_t* out) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = coll->impl->output_dim();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_is_sequence(const shardrec_embedding_t* coll,
                                                              int32_t* out) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = coll->impl->sequence() ? 1 : 0;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_forward(shardrec_embedding_t* coll,
                                                          const shardrec_kjt_view_t* batch,
                                                          float* out, size_t out_len,
                                                          void* /*stream*/) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    shardrec::embedding::Batch b;
    // A NULL batch is still a batch this rank rejects: peers must learn it, so route an
    // invalid batch (negative size) through the collective validation.
    Status conv = shardrec::capi::ToBatch(batch, &b);
    if (!conv.ok()) {
      b = shardrec::embedding::Batch();
      b.batch_size = -1;
      Status s = coll->impl->Forward(b, out, out_len);
      return s.code() == shardrec::Code::kInvalidArgument ? conv : s;
    }
    return coll->impl->Forward(b, out, out_len);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_input_dist_start(shardrec_embedding_t* coll,
                                                                   const shardrec_kjt_view_t* batch,
                                                                   void* /*stream*/) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    shardrec::embedding::Batch b;
    Status conv = shardrec::capi::ToBatch(batch, &b);
    if (!conv.ok()) {
      b = shardrec::embedding::Batch();
      b.batch_size = -1;
      Status s = coll->impl->StartInputDist(b);
      return s.code() == shardrec::Code::kInvalidArgument ? conv : s;
    }
    return coll->impl->StartInputDist(b);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_input_dist_wait(shardrec_embedding_t* coll,
                                                                  void* /*stream*/) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    return coll->impl->WaitInputDist();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_forward_distributed(shardrec_embedding_t* coll,
                                                                      float* out, size_t out_len,
                                                                      void* /*stream*/) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    return coll->impl->ForwardDistributed(out, out_len);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_backward(shardrec_embedding_t* coll,
                                                           const float* grad, size_t grad_len,
                                                           void* /*stream*/) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    return coll->impl->Backward(grad, grad_len);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_set_learning_rate(shardrec_embedding_t* coll,
                                                                    float learning_rate) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    return coll->impl->SetLearningRate(learning_rate);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_num_steps(const shardrec_embedding_t* coll,
                                                            int64_t* out) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = coll->impl->num_steps();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_set_num_steps(shardrec_embedding_t* coll,
                                                                int64_t steps) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    return coll->impl->SetNumSteps(steps);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_get_weights(shardrec_embedding_t* coll,
                                                              const char* table, float* out,
                                                              size_t len) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    return coll->impl->GetWeights(table ? table : "", out, len);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_set_weights(shardrec_embedding_t* coll,
                                                              const char* table,
                                                              const float* weights, size_t len) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    return coll->impl->SetWeights(table ? table : "", weights, len);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_num_states(const shardrec_embedding_t* coll,
                                                             size_t* out) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = coll->states.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_state_info(const shardrec_embedding_t* coll,
                                                             size_t index, const char** name_out,
                                                             int32_t* row_wise_out) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    SR_RETURN_IF_ERROR(CheckNotNull(name_out, "name_out"));
    if (index >= coll->states.size())
      return Status::InvalidArgument("state index ", index, " is out of range (the optimizer has ",
                                     coll->states.size(), " states)");
    *name_out = coll->states[index].name.c_str();
    if (row_wise_out != nullptr) *row_wise_out = coll->states[index].row_wise ? 1 : 0;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_get_state(shardrec_embedding_t* coll,
                                                            const char* table, const char* state,
                                                            float* out, size_t len) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    return coll->impl->GetState(table ? table : "", state ? state : "", out, len);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_set_state(shardrec_embedding_t* coll,
                                                            const char* table, const char* state,
                                                            const float* values, size_t len) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    return coll->impl->SetState(table ? table : "", state ? state : "", values, len);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_timings(const shardrec_embedding_t* coll,
                                                          double* comm_seconds_out,
                                                          double* total_seconds_out) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(coll, "coll"));
    const auto& t = coll->impl->timings();
    if (comm_seconds_out != nullptr) *comm_seconds_out = t.comm_seconds;
    if (total_seconds_out != nullptr) *total_seconds_out = t.total_seconds;
    return Status::Ok();
  });
}

}  // extern "C"
