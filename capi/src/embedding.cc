// C API of the sharded embedding collection (shardrec/embedding.h): thin wrappers that convert
// arguments (embedding_convert.h) and call shardrec::embedding::EmbeddingCollection. A rank whose
// arguments do not convert still calls into the collection with its rejection, so its peers
// learn of it through the collection's one agreement mechanism.
#include "shardrec/embedding.h"

#include <cstddef>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Exclusive;
using shardrec::capi::Handle;
using shardrec::capi::NotNull;
namespace embedding = shardrec::embedding;

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
  return shardrec::capi::InitStruct(
      options, version, SHARDREC_EMBEDDING_OPTIONS_VERSION, d, "options",
      {offsetof(shardrec_embedding_options_t, non_finite),
       offsetof(shardrec_embedding_options_t, forward_comm_encoding),
       offsetof(shardrec_embedding_options_t, max_batch_size),
       offsetof(shardrec_embedding_options_t, tiers), sizeof(shardrec_embedding_options_t)});
}

SHARDREC_API shardrec_status_t shardrec_table_tier_init(shardrec_table_tier_t* tier,
                                                        uint32_t version) {
  const shardrec_table_tier_t d = SHARDREC_TABLE_TIER_INIT;
  return shardrec::capi::InitStruct(tier, version, SHARDREC_TABLE_TIER_VERSION, d, "table tier");
}

SHARDREC_API shardrec_status_t shardrec_embedding_create(
    shardrec_embedding_t** out, const shardrec_plan_t* plan, shardrec_comm_t* comm,
    const shardrec_optimizer_config_t* optimizer, const shardrec_embedding_options_t* options) {
  return Enter({NotNull(comm, "comm")}, [&] {
    if (comm->impl == nullptr) return Status::InvalidArgument("comm handle is empty");
    // Creation is collective: a rank refusing its own arguments still meets its peers'
    // agreement, so they fail naming it rather than wait out their timeout.
    Status args = CheckNotNull(out, "out");
    if (args.ok()) args = CheckNotNull(plan, "plan");
    if (args.ok() && plan->impl == nullptr) args = Status::InvalidArgument("plan handle is empty");
    if (!args.ok()) return embedding::EmbeddingCollection::RefuseCreate(comm->impl, args);
    shardrec::optim::OptimizerConfig oc;
    embedding::CollectionOptions co;
    Status local = shardrec::capi::ToOptimizer(optimizer, &oc);
    if (local.ok()) local = shardrec::capi::ToCollectionOptions(options, &co);
    auto handle = std::make_unique<shardrec_embedding>();
    // No optimizer: the one the plan was made for.
    SR_RETURN_IF_ERROR(embedding::EmbeddingCollection::Create(
        plan->impl, comm->impl, optimizer != nullptr ? &oc : nullptr, co, &handle->impl, local));
    handle->states = handle->impl->States();
    *out = handle.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_embedding_destroy(shardrec_embedding_t* coll) { delete coll; }

SHARDREC_API shardrec_status_t shardrec_embedding_output_dim(const shardrec_embedding_t* coll,
                                                             int64_t* out) {
  return Enter({Handle(coll, "coll"), NotNull(out, "out")}, [&] {
    *out = coll->impl->output_dim();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_is_sequence(const shardrec_embedding_t* coll,
                                                              int32_t* out) {
  return Enter({Handle(coll, "coll"), NotNull(out, "out")}, [&] {
    *out = coll->impl->sequence() ? 1 : 0;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_forward(shardrec_embedding_t* coll,
                                                          const shardrec_kjt_view_t* batch,
                                                          float* out, size_t out_len,
                                                          void* stream) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    embedding::Batch b;
    const Status conv = shardrec::capi::ToBatch(batch, &b);
    b.stream = stream;
    return coll->impl->Forward(b, out, out_len, conv);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_input_dist_start(shardrec_embedding_t* coll,
                                                                   const shardrec_kjt_view_t* batch,
                                                                   void* stream) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    embedding::Batch b;
    const Status conv = shardrec::capi::ToBatch(batch, &b);
    b.stream = stream;
    return coll->impl->StartInputDist(b, conv);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_input_dist_wait(shardrec_embedding_t* coll,
                                                                  void* /*stream*/) {
  return Enter({Exclusive(coll, "coll", "collection")},
               [&] { return coll->impl->WaitInputDist(); });
}

SHARDREC_API shardrec_status_t shardrec_embedding_forward_distributed(shardrec_embedding_t* coll,
                                                                      float* out, size_t out_len,
                                                                      void* /*stream*/) {
  return Enter({Exclusive(coll, "coll", "collection")},
               [&] { return coll->impl->ForwardDistributed(out, out_len); });
}

SHARDREC_API shardrec_status_t shardrec_embedding_backward(shardrec_embedding_t* coll,
                                                           const float* grad, size_t grad_len,
                                                           void* /*stream*/) {
  return Enter({Exclusive(coll, "coll", "collection")},
               [&] { return coll->impl->Backward(grad, grad_len); });
}

SHARDREC_API shardrec_status_t shardrec_embedding_forward_tensor(shardrec_embedding_t* coll,
                                                                 const shardrec_kjt_view_t* batch,
                                                                 const shardrec_tensor_view_t* out,
                                                                 void* stream) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    embedding::Batch b;
    float* data = nullptr;
    float* target = nullptr;
    size_t count = 0;
    shardrec::Device device;
    Status conv = shardrec::capi::ToBatch(batch, &b);
    b.stream = stream;
    if (conv.ok())
      conv =
          shardrec::capi::ToFloatRows(out, coll->impl->output_dim(), "out", &data, &count, &device);
    if (conv.ok() && coll->impl->WritesDeviceOutput(device)) {
      // A GPU collection that combines on the device writes the view itself (device to device).
      const embedding::DeviceOutput direct{stream};
      return coll->impl->Forward(b, data, count, conv, &direct);
    }
    if (conv.ok()) conv = coll->staging.OutputTarget(device, data, count, &target);
    SR_RETURN_IF_ERROR(coll->impl->Forward(b, target, count, conv));
    return coll->staging.FinishOutput(device, data, count, stream, coll->impl->comm().timeout());
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_forward_distributed_tensor(
    shardrec_embedding_t* coll, const shardrec_tensor_view_t* out, void* stream) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    float* data = nullptr;
    float* target = nullptr;
    size_t count = 0;
    shardrec::Device device;
    Status conv =
        shardrec::capi::ToFloatRows(out, coll->impl->output_dim(), "out", &data, &count, &device);
    if (conv.ok() && coll->impl->WritesDeviceOutput(device)) {
      const embedding::DeviceOutput direct{stream};
      return coll->impl->ForwardDistributed(data, count, conv, &direct);
    }
    if (conv.ok()) conv = coll->staging.OutputTarget(device, data, count, &target);
    SR_RETURN_IF_ERROR(coll->impl->ForwardDistributed(target, count, conv));
    return coll->staging.FinishOutput(device, data, count, stream, coll->impl->comm().timeout());
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_backward_tensor(
    shardrec_embedding_t* coll, const shardrec_tensor_view_t* grad, void* stream) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    float* data = nullptr;
    const float* source = nullptr;
    size_t count = 0;
    shardrec::Device device;
    Status conv =
        shardrec::capi::ToFloatRows(grad, coll->impl->output_dim(), "grad", &data, &count, &device);
    if (conv.ok() && coll->impl->TakesDeviceGradient(device)) {
      // A GPU collection that packs on the device reads the view itself (after `stream`'s work).
      const embedding::DeviceGradient direct{stream};
      return coll->impl->Backward(data, count, conv, &direct);
    }
    // A gradient that cannot be brought to the host rejects the step on every rank.
    if (conv.ok())
      conv = coll->staging.GradientSource(device, data, count, stream, coll->impl->comm().timeout(),
                                          &source);
    return coll->impl->Backward(source, count, conv);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_synchronize(shardrec_embedding_t* coll) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] { return coll->impl->Synchronize(); });
}

SHARDREC_API shardrec_status_t shardrec_embedding_set_learning_rate(shardrec_embedding_t* coll,
                                                                    float learning_rate) {
  return Enter({Exclusive(coll, "coll", "collection")},
               [&] { return coll->impl->SetLearningRate(learning_rate); });
}

SHARDREC_API shardrec_status_t shardrec_embedding_num_steps(const shardrec_embedding_t* coll,
                                                            int64_t* out) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = coll->impl->num_steps();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_set_num_steps(shardrec_embedding_t* coll,
                                                                int64_t steps) {
  return Enter({Exclusive(coll, "coll", "collection")},
               [&] { return coll->impl->SetNumSteps(steps); });
}

SHARDREC_API shardrec_status_t shardrec_embedding_get_weights(shardrec_embedding_t* coll,
                                                              const char* table, float* out,
                                                              size_t len) {
  return Enter({Exclusive(coll, "coll", "collection")},
               [&] { return coll->impl->GetWeights(table ? table : "", out, len); });
}

SHARDREC_API shardrec_status_t shardrec_embedding_set_weights(shardrec_embedding_t* coll,
                                                              const char* table,
                                                              const float* weights, size_t len) {
  return Enter({Exclusive(coll, "coll", "collection")},
               [&] { return coll->impl->SetWeights(table ? table : "", weights, len); });
}

SHARDREC_API shardrec_status_t shardrec_embedding_num_states(const shardrec_embedding_t* coll,
                                                             size_t* out) {
  return Enter({Handle(coll, "coll"), NotNull(out, "out")}, [&] {
    *out = coll->states.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_state_info(const shardrec_embedding_t* coll,
                                                             size_t index, const char** name_out,
                                                             int32_t* row_wise_out) {
  return Enter({Handle(coll, "coll"), NotNull(name_out, "name_out")}, [&] {
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
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    return coll->impl->GetState(table ? table : "", state ? state : "", out, len);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_set_state(shardrec_embedding_t* coll,
                                                            const char* table, const char* state,
                                                            const float* values, size_t len) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    return coll->impl->SetState(table ? table : "", state ? state : "", values, len);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_timings(const shardrec_embedding_t* coll,
                                                          double* comm_seconds_out,
                                                          double* total_seconds_out) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    const auto& t = coll->impl->timings();
    if (comm_seconds_out != nullptr) *comm_seconds_out = t.comm_seconds;
    if (total_seconds_out != nullptr) *total_seconds_out = t.total_seconds;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_set_table_learning_rate(
    shardrec_embedding_t* coll, const char* table, float learning_rate) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    return coll->impl->SetTableLearningRate(table, learning_rate);
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_table_optimizer(
    const shardrec_embedding_t* coll, const char* table, shardrec_optimizer_config_t* out) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    int32_t t = -1;
    SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
    shardrec::capi::FromOptimizer(coll->impl->table_optimizer(t), out);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_table_num_states(const shardrec_embedding_t* coll,
                                                                   const char* table, size_t* out) {
  return Enter({Handle(coll, "coll"), NotNull(table, "table"), NotNull(out, "out")}, [&] {
    std::vector<embedding::StateInfo> states;
    SR_RETURN_IF_ERROR(coll->impl->TableStates(table, &states));
    *out = states.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_table_state_info(const shardrec_embedding_t* coll,
                                                                   const char* table, size_t index,
                                                                   const char** name_out,
                                                                   int32_t* row_wise_out) {
  return Enter({Handle(coll, "coll"), NotNull(table, "table"), NotNull(name_out, "name_out")}, [&] {
    int32_t t = -1;
    SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
    const auto& specs = coll->impl->layout().tables[t].state_specs;
    if (index >= specs.size())
      return Status::InvalidArgument("state index ", index, " is out of range (table '", table,
                                     "' has ", specs.size(), " states)");
    *name_out = specs[index].name;  // a static string
    if (row_wise_out != nullptr) *row_wise_out = specs[index].row_wise ? 1 : 0;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_num_outputs(const shardrec_embedding_t* coll,
                                                              size_t* out) {
  return Enter({Handle(coll, "coll"), NotNull(out, "out")}, [&] {
    *out = coll->impl->layout().pairs.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_embedding_output_info(
    const shardrec_embedding_t* coll, size_t index, const char** feature_out,
    const char** table_out, int64_t* offset_out, int64_t* width_out) {
  return Enter({Handle(coll, "coll")}, [&] {
    const auto& l = coll->impl->layout();
    if (index >= l.pairs.size())
      return Status::InvalidArgument("output index ", index, " is out of range (the output has ",
                                     l.pairs.size(), " column blocks)");
    const embedding::Pair& p = l.pairs[index];
    const auto& table = l.plan->tables[p.table];
    // The plan is immutable and shared by the collection: its strings live as long as it does.
    if (feature_out != nullptr) *feature_out = l.plan->features[p.feature].name.c_str();
    if (table_out != nullptr) *table_out = table.name.c_str();
    if (offset_out != nullptr) *offset_out = p.out_offset;
    if (width_out != nullptr) *width_out = table.dim;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_step_timings_init(shardrec_step_timings_t* timings,
                                                          uint32_t version) {
  const shardrec_step_timings_t d = SHARDREC_STEP_TIMINGS_INIT;
  return shardrec::capi::InitStruct(
      timings, version, SHARDREC_STEP_TIMINGS_VERSION, d, "timings",
      {offsetof(shardrec_step_timings_t, embedding_comm_seconds), sizeof(shardrec_step_timings_t)});
}

SHARDREC_API shardrec_status_t shardrec_embedding_step_timings(const shardrec_embedding_t* coll,
                                                               shardrec_step_timings_t* out) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    SR_RETURN_IF_ERROR(
        shardrec::capi::CheckStructVersion(out->version, SHARDREC_STEP_TIMINGS_VERSION, "timings"));
    const auto& t = coll->impl->timings();
    out->forwards = t.forwards;
    out->backwards = t.backwards;
    out->samples = t.samples;
    out->total_seconds = t.total_seconds;
    out->collective_seconds = t.comm_seconds;
    out->input_dist_seconds = t.input_dist_seconds;
    out->lookup_seconds = t.lookup_seconds;
    out->output_dist_seconds = t.output_dist_seconds;
    out->backward_seconds = t.backward_seconds;
    if (out->version >= 2) out->embedding_comm_seconds = t.embedding_comm_seconds;
    return Status::Ok();
  });
}

}  // extern "C"
