// Collection lifecycle and the order of a step's calls: creation (plan agreement, arenas, init,
// the engine picked), input distribution (synchronous or queued on the communication worker),
// lookup + output distribution, and the backward's checks. The step's work is the engine's
// (engine.h).
#include "impl/embedding/collection.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "impl/comm/agree.h"
#include "impl/core/finite.h"
#include "impl/embedding/tiered/cache_layout.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

namespace {

// The optimizer each table trains with: its own, else the default (given, or the plan's).
Status ResolveOptimizers(const sharding::Plan& plan, const optim::OptimizerConfig* given,
                         optim::OptimizerConfig* default_out,
                         std::vector<optim::OptimizerConfig>* per_table) {
  optim::OptimizerConfig def;
  // The planner counted the plan's optimizer for the tables without their own: training
  // another one there would use memory the plan did not budget (a plan saying "sgd" while
  // training Adam). A default that no table uses does not matter.
  bool uses_default = false;
  for (const auto& t : plan.tables) uses_default = uses_default || !t.has_optimizer;
  if (given != nullptr && uses_default && plan.planned_optimizer >= 0 &&
      static_cast<int32_t>(given->type) != plan.planned_optimizer) {
    const auto planned = static_cast<optim::OptimizerType>(plan.planned_optimizer);
    return Status::InvalidArgument(
        "optimizer: the collection's optimizer is ", optim::OptimizerName(given->type),
        " but the plan was made for ", optim::OptimizerName(planned),
        " (topology.optimizer); plan with topology.optimizer = ", optim::OptimizerName(given->type),
        ", or pass no optimizer to train with the plan's");
  }
  if (given != nullptr) {
    def = *given;
  } else if (plan.planned_optimizer >= 0) {
    def.type = static_cast<optim::OptimizerType>(plan.planned_optimizer);
  }
  SR_RETURN_IF_ERROR(optim::ValidateConfig(def));
  per_table->clear();
  for (const auto& t : plan.tables) {
    if (t.has_optimizer) {
      per_table->push_back(t.optimizer);
      continue;
    }
    per_table->push_back(def);
  }
  *default_out = def;
  return Status::Ok();
}

// A GPU collection has no dynamic tables yet (docs/dynamic-tables.md): their translation to slots
// runs on the host, next to host parameters.
Status RefuseDynamicOnDevice(const sharding::Plan& plan) {
  for (const auto& t : plan.tables)
    if (t.dynamic.enabled)
      return Status::Unsupported("table '", t.name,
                                 "' is dynamic: GPU collections do not take dynamic tables yet "
                                 "(docs/dynamic-tables.md); create the collection on the host");
  return Status::Ok();
}

// A digest of the options every rank must share: results depend on them (the seed draws rows and
// rounding bits; the optimizers train; the bounds and non-finite policies decide which batches
// train) or the exchanges' sizes do (the encodings). The thread count and huge pages are this
// rank's own, and so are the tiers, except the cache of a table whose column shards exchange row
// statistics: they travel in slot order, so its ranks' slot counts must match (disk-tier.md).
int64_t SharedOptionsDigest(const CollectionOptions& o, const Layout& layout,
                            const std::vector<optim::OptimizerConfig>& table_optim) {
  std::vector<int64_t> v = {static_cast<int64_t>(o.seed), static_cast<int64_t>(o.bounds),
                            o.check_non_finite ? 1 : 0, static_cast<int64_t>(o.forward_encoding),
                            static_cast<int64_t>(o.backward_encoding)};
  for (const optim::OptimizerConfig& c : table_optim) {
    const std::vector<int64_t> words = optim::ConfigWords(c);
    v.insert(v.end(), words.begin(), words.end());
  }
  for (size_t t = 0; t < layout.tables.size(); ++t) {
    const TableLayout& tl = layout.tables[t];
    if (!tl.split_columns || tl.num_row_stats == 0) continue;
    int64_t cache_bytes = 0;  // not tiered
    for (const tiered::TierConfig& tc : o.tiers)
      if (tc.table == layout.plan->tables[t].name) cache_bytes = tc.cache_bytes;
    v.push_back(cache_bytes);
  }
  return comm::Digest63(v);
}

}  // namespace

Status EmbeddingCollection::Create(std::shared_ptr<const sharding::Plan> plan,
                                   std::shared_ptr<comm::Communicator> comm,
                                   const optim::OptimizerConfig* optimizer,
                                   const CollectionOptions& options,
                                   std::unique_ptr<EmbeddingCollection>* out,
                                   const Status& rejected) {
  if (comm == nullptr) return Status::InvalidArgument("comm must not be null");
  if (plan == nullptr) return Status::InvalidArgument("plan must not be null");
  std::unique_ptr<EmbeddingCollection> c(new EmbeddingCollection());
  StepState& s = c->s_;
  s.options = options;
  // Picked by the options alone, before any check: a rank that rejects its arguments still takes
  // part in the agreement through the same communicator as its peers.
  c->engine_ = MakeEngine(&s, &c->agreement_, options.device);
  Status local = rejected;
  if (!local.ok()) {
    // The caller's verdict stands; this rank only takes part in the agreement.
  } else if (options.device.is_cuda() && !comm->device().is_host() &&
             (comm->device().index != options.device.index || !comm->device().is_cuda())) {
    local = Status::InvalidArgument("a GPU collection on ", options.device.ToString(),
                                    " exchanges over its own device: its communicator is on ",
                                    comm->device().ToString(),
                                    " (create the NCCL communicator on the collection's device, "
                                    "or give it a host (Gloo) one)");
  } else if (!options.device.is_host() && !options.device.is_cuda()) {
    local = Status::InvalidArgument("options: unknown device ", options.device.ToString());
  } else if (!options.device.is_cuda() && !comm->device().is_host()) {
    local = Status::Unsupported("a host embedding collection runs on host communicators only; ",
                                "got a ", comm->device().ToString(),
                                " communicator (a GPU collection, options.device CUDA, takes it)");
  } else if (comm->Size() != plan->world_size) {
    local = Status::InvalidArgument("the communicator has ", comm->Size(),
                                    " ranks but the plan was made for ", plan->world_size);
  } else if (static_cast<int32_t>(options.bounds) < 0 || static_cast<int32_t>(options.bounds) > 2) {
    local = Status::InvalidArgument("options: unknown bounds policy ",
                                    static_cast<int32_t>(options.bounds));
  } else if (!comm::IsKnownEncoding(static_cast<int32_t>(options.forward_encoding)) ||
             !comm::IsKnownEncoding(static_cast<int32_t>(options.backward_encoding))) {
    local = Status::InvalidArgument("options: unknown communication encoding (forward ",
                                    static_cast<int32_t>(options.forward_encoding), ", backward ",
                                    static_cast<int32_t>(options.backward_encoding), ")");
  } else {
    local = ResolveOptimizers(*plan, optimizer, &c->optim_, &s.table_optim);
    std::vector<optim::OptimizerType> types;
    for (const auto& o : s.table_optim) types.push_back(o.type);
    if (local.ok()) local = BuildLayout(plan, comm->Rank(), types, &s.layout);
    std::vector<tiered::TieredShard> tiered_shards;
    if (local.ok())
      local =
          tiered::ShrinkToCache(options.tiers, options.device.is_cuda(), &s.layout, &tiered_shards);
    if (local.ok() && options.device.is_cuda()) local = RefuseDynamicOnDevice(*plan);
    if (local.ok()) local = s.dynamic.Init(s.layout);
    if (local.ok()) local = c->engine_->Available();
    // The memory is taken and initialised before the agreement, so a rank that has not got it
    // (or whose device copies fail) fails like any other rejection and no rank goes on alone.
    if (local.ok()) local = s.params.Allocate(&s.layout, options.huge_pages, options.device);
    if (local.ok()) s.dynamic.Build();
    if (local.ok() && options.num_threads > 1)
      s.pool = std::make_unique<ThreadPool>(options.num_threads);
    s.exec = ExecContext::Host(s.pool.get());
    if (local.ok())
      local = s.params.Initialise(options.seed, s.exec, [&] { return comm::UsableNow(*comm); });
    if (local.ok() && !tiered_shards.empty()) {
      s.tiered = std::make_unique<tiered::TieredTables>();
      local = s.tiered->Open(&s.layout, &s.params, std::move(tiered_shards), options.tiers,
                             options.seed);
    }
    if (local.ok()) local = c->engine_->Init(*comm);
  }
  // A host collection cannot even agree over a device communicator (its agreement buffers are
  // host memory): every rank given one refuses here, without a collective.
  if (!options.device.is_cuda() && !comm->device().is_host()) return local;
  SR_RETURN_IF_ERROR(c->engine_->HostComm(&comm, local.ok()));
  // One agreement on the plan, the shared options and what the engine may offer.
  const int64_t digest = local.ok() ? SharedOptionsDigest(options, s.layout, s.table_optim) : 0;
  int64_t offer[StepAgreement::kEngineWords];
  std::copy_n(c->engine_->offer(), StepAgreement::kEngineWords, offer);
  SR_RETURN_IF_ERROR(StepAgreement::Create(*comm, plan.get(), digest, local, offer));
  s.comm = std::move(comm);
  SR_RETURN_IF_ERROR(c->engine_->Connect(offer, options.dp_comm));
  c->resolver_ = MakeRowResolver(&s);
  // Stochastic rounding draws its bits from the collection's seed (embedding.h).
  c->optim_.seed = options.seed;
  for (auto& o : s.table_optim) o.seed = options.seed;
  s.options.dp_comm.reset();
  s.updater.Init(&s.layout, &s.params, &s.dynamic);
  s.worker = std::make_unique<comm::CommWorker>();
  *out = std::move(c);
  return Status::Ok();
}

Status EmbeddingCollection::RefuseCreate(const std::shared_ptr<comm::Communicator>& comm,
                                         const Status& why) {
  if (comm == nullptr || !comm->device().is_host()) return why;
  // Create's agreement as a rejecting rank makes it (no engine's HostComm runs a collective
  // over a host communicator).
  StepAgreement::Refuse(*comm);
  return why;
}

EmbeddingCollection::~EmbeddingCollection() {
  // The worker may still be exchanging a pending batch over the input communicator: let it finish
  // first.
  s_.worker.reset();
}

std::unique_ptr<RoutedBatch> EmbeddingCollection::TakeSpare() {
  if (spare_) return std::move(spare_);
  return std::make_unique<RoutedBatch>();
}

Status EmbeddingCollection::CheckGradFinite(const float* grad, size_t len) const {
  // In parallel over chunks; the first non-finite element of the lowest chunk that has one is
  // the first of all, whatever the thread count.
  constexpr int64_t kChunk = 16384;
  const auto n = static_cast<int64_t>(len);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::atomic<int64_t> first_chunk{chunks};
  s_.exec.ParallelFor(0, chunks, 4, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1 && c < first_chunk.load(std::memory_order_relaxed); ++c) {
      const auto m = static_cast<size_t>(std::min(kChunk, n - c * kChunk));
      if (FirstNonFinite(grad + c * kChunk, m) == m) continue;
      int64_t cur = first_chunk.load(std::memory_order_relaxed);
      while (c < cur && !first_chunk.compare_exchange_weak(cur, c)) {
      }
      break;
    }
  });
  if (first_chunk.load() == chunks) return Status::Ok();
  size_t i = static_cast<size_t>(first_chunk.load() * kChunk);
  while (i < len && std::isfinite(grad[i])) ++i;
  return GradNotFinite(s_.layout, i, grad[i]);
}

bool EmbeddingCollection::WritesDeviceOutput(const Device& device) const {
  return engine_->traits().writes_device_output && device == s_.options.device;
}

bool EmbeddingCollection::TakesDeviceGradient(const Device& device) const {
  return engine_->traits().takes_device_gradient && device == s_.options.device;
}

Status EmbeddingCollection::RunForward(const Batch& batch, float* out, size_t out_len,
                                       const Status& rejected, const DeviceOutput* device_out) {
  agreement_.PayOwed();
  if (pending_ != nullptr)
    return Status::InvalidUsage(
        "an input distribution is in flight; finish it with "
        "input_dist_wait and forward_distributed first");
  ScopedTimer total(&s_.timings.total_seconds);
  // What stream-ordered calls left to learn is learnt first: before the input distribution when
  // it has no wait of its own, else after its counts exchange (whose wait delivers it). Such a
  // failure is an earlier call's, not this batch's: the batch a backward trains stays as it was.
  SR_RETURN_IF_ERROR(engine_->Settle(SettlePoint::kBeforeInput));
  std::unique_ptr<RoutedBatch> rb = TakeSpare();
  // 1. Agree: the output buffer is known now, so this rank's verdict on it rides on the input
  // exchange as a rejection of the batch (after the batch's own checks): a rank given a wrong
  // out_len fails its peers' forwards with it, before any state changes, and no rank is left with
  // a batch to train alone. So does its mode, when the ranks must agree on it
  // (StepAgreement::Terms).
  const InputTerms terms = agreement_.Terms(
      OutputBuffer{out, out_len, device_out, WritesDeviceOutput(s_.options.device)});
  // 2. Route and exchange.
  Status s;
  {
    ScopedTimer phase(&s_.timings.input_dist_seconds);
    s = engine_->DistributeInput(batch, rejected, rb.get(), terms);
  }
  if (!s.ok()) {
    spare_ = std::move(rb);
    agreement_.Join(s);
    return Forwarded(s);
  }
  s = engine_->Settle(SettlePoint::kAfterInput);
  if (!s.ok()) {
    spare_ = std::move(rb);
    return s;
  }
  // The verdict that rode on the exchange was OK on this rank, or the exchange had failed.
  const Status local = terms.check_output
                           ? Status::Ok()
                           : CheckOutput(rb->batch_size, rb->num_values, out, out_len, device_out);
  return Forwarded(Distribute(std::move(rb), out, local, device_out, terms.agree_before_rows,
                              terms.check_output));
}

Status EmbeddingCollection::Forwarded(const Status& s) {
  // A forward whose batch failed, anywhere from its input exchange on, leaves no batch to train:
  // the batch before it (whose backward may not have run yet) must not take this forward's
  // gradient. The failure is every rank's (the forward's exchanges and agreements make it so),
  // and so is the refusal of the next backward.
  last_forward_failed_ = !s.ok();
  return s;
}

Status EmbeddingCollection::RunStartInputDist(const Batch& batch, const Status& rejected) {
  agreement_.PayOwed();
  if (pending_ != nullptr)
    return Status::InvalidUsage(
        "an input distribution is already in flight; call "
        "input_dist_wait and forward_distributed first");
  ScopedTimer total(&s_.timings.total_seconds);
  ScopedTimer phase(&s_.timings.input_dist_seconds);
  // As in Forward: what stream-ordered calls left to learn, first.
  SR_RETURN_IF_ERROR(engine_->Settle(SettlePoint::kBeforeInput));
  // The exchange runs on the worker, whose error input_dist_wait would report: an aborted or
  // failed communicator fails this call instead, as it fails every call made after it.
  if (!engine_->traits().exchanges_input_inline)
    SR_RETURN_IF_ERROR(comm::UsableNow(*s_.input_comm));
  std::unique_ptr<RoutedBatch> rb = TakeSpare();
  if (engine_->traits().exchanges_input_inline) {
    // NCCL runs operations of different communicators safely only in separate epochs, issued in
    // the same order on every rank; a worker thread exchanging while this thread's backward or
    // mesh sync uses the step's communicator gives neither. So over NCCL the exchange completes
    // here, at the point of the call sequence every rank shares, and input_dist_wait returns at
    // once (what overlaps with the caller's work is only what runs before this call). A
    // rejecting rank takes part in the exchange so its peers fail too.
    Status s = engine_->DistributeInput(batch, rejected, rb.get(), InputTerms{});
    if (s.ok()) s = engine_->Settle(SettlePoint::kAfterInput);
    if (!s.ok()) {
      spare_ = std::move(rb);
      agreement_.Owe(s);
      return s;
    }
    pending_ = std::move(rb);
    return Status::Ok();
  }
  Status local = engine_->Route(batch, rejected, rb.get());
  if (!local.ok()) {
    // The rejecting rank takes part in the count exchange so its peers' waits fail too.
    Status s = engine_->ExchangeAndUnpack(local, rb.get());
    spare_ = std::move(rb);
    agreement_.Owe(s);
    return s;
  }
  pending_ = std::move(rb);
  RoutedBatch* p = pending_.get();
  p->worker_seconds = 0;
  p->device_input = false;
  pending_work_ = s_.worker->Submit([this, p] {
    // Timed here and added by WaitInputDist: the worker never touches the timings.
    ScopedTimer t(&p->worker_seconds);
    SR_RETURN_IF_ERROR(ExchangeInput(s_.layout, *s_.input_comm, Status::Ok(), p, ForwardMode::kNone,
                                     0, &s_.input_caps));
    SR_RETURN_IF_ERROR(UnpackInput(s_.layout, p));
    // Tiered tables start reading this batch's misses while the caller trains the last one.
    resolver_->Prefetch(*p);
    return Status::Ok();
  });
  return Status::Ok();
}

Status EmbeddingCollection::WaitInputDist() {
  agreement_.PayOwed();
  if (pending_ == nullptr) return Status::InvalidUsage("no input distribution was started");
  if (pending_work_ == nullptr) return Status::Ok();
  ScopedTimer total(&s_.timings.total_seconds);
  Status s;
  {
    ScopedTimer t(&s_.timings.comm_seconds);
    s = pending_work_->Wait();
  }
  pending_work_.reset();
  s_.timings.input_dist_seconds += pending_->worker_seconds;
  if (!s.ok()) {
    spare_ = std::move(pending_);
    agreement_.Owe(s);
    return s;
  }
  return Status::Ok();
}

Status EmbeddingCollection::RunForwardDistributed(float* out, size_t out_len,
                                                  const Status& rejected,
                                                  const DeviceOutput* device_out) {
  agreement_.PayOwed();
  // A forward of the pipelined path that has no batch (its distribution failed, or was never
  // started or waited for) is a failed forward too: the gradient the caller passes next is this
  // forward's, not the batch before it (Forwarded).
  if (pending_ == nullptr || pending_work_ != nullptr)
    return Forwarded(Status::InvalidUsage(pending_ == nullptr
                                              ? "no input distribution was started"
                                              : "call input_dist_wait before forward_distributed"));
  ScopedTimer total(&s_.timings.total_seconds);
  std::unique_ptr<RoutedBatch> rb = std::move(pending_);
  const Status local = rejected.ok()
                           ? CheckOutput(rb->batch_size, rb->num_values, out, out_len, device_out)
                           : rejected;
  // The output buffer comes after the input exchange here, so the ranks agree on it before any
  // row moves (Distribute's StepAgreement::BeforeRows).
  return Forwarded(Distribute(std::move(rb), out, local, device_out, /*agree=*/true,
                              /*output_checked=*/false));
}

Status EmbeddingCollection::Distribute(std::unique_ptr<RoutedBatch> rb, float* out,
                                       const Status& local, const DeviceOutput* device_out,
                                       bool agree, bool output_checked) {
  // The stages after the input exchange: agree (where the input exchange did not settle it all),
  // resolve rows, look up and combine. The output exchange is collective: a rank with a bad
  // output buffer still takes part where the agreement let the forward go on.
  std::vector<int64_t> dp_words;
  Status s;
  if (agree)
    s = agreement_.BeforeRows(local, *rb, output_checked, engine_->traits().agrees_outputs_first,
                              &dp_words);
  if (s.ok()) s = resolver_->Resolve(*rb, dp_words);
  if (s.ok()) s = engine_->LookupAndCombine(*rb, out, local, device_out);
  return Finish(std::move(rb), s, local);
}

Status EmbeddingCollection::CheckOutput(int64_t batch_size, int64_t num_values, const float* out,
                                        size_t out_len, const DeviceOutput* device_out) const {
  return CheckOutputBuffer(
      s_.layout, OutputBuffer{out, out_len, device_out, WritesDeviceOutput(s_.options.device)},
      batch_size, num_values);
}

Status EmbeddingCollection::Finish(std::unique_ptr<RoutedBatch> rb, const Status& s,
                                   const Status& local) {
  if (!s.ok()) {
    spare_ = std::move(rb);
    return s;
  }
  spare_ = std::move(s_.current);
  s_.current = std::move(rb);
  // The batch backward trains now has the shape of the forward that ran (vbe.h).
  if (vbe_source_ != nullptr) std::swap(vbe_current_, *vbe_source_);
  s_.current_consumed = false;
  // A batch whose exchanges went through but whose output this rank refused stays the one its
  // backward applies to, so that backward takes part in the step with the batch its peers have
  // (and rejects it on every rank: the forward failed here, Forwarded).
  current_evaluated_ = !s_.training;
  if (!local.ok()) return local;
  ++s_.timings.forwards;
  s_.timings.samples += s_.current->batch_size;
  return Status::Ok();
}

Status EmbeddingCollection::RunBackward(const float* grad, size_t grad_len, const Status& rejected,
                                        const DeviceGradient* device_grad) {
  ScopedTimer total(&s_.timings.total_seconds);
  ScopedTimer phase(&s_.timings.backward_seconds);
  SR_RETURN_IF_ERROR(engine_->Settle(SettlePoint::kBeforeBackward));
  Status local = rejected;
  if (!local.ok()) {
    // The caller's verdict stands.
  } else if (last_forward_failed_) {
    local = Status::InvalidUsage(
        "backward needs a forward first: this rank's last forward failed (its error said why), so "
        "there is no batch to train");
  } else if (s_.current == nullptr || s_.current_consumed) {
    local = Status::InvalidUsage("backward needs a forward first (one backward per forward)");
  } else if (current_evaluated_) {
    local = Status::InvalidUsage(
        "backward of an evaluation forward: that forward ran with training off "
        "(shardrec_embedding_set_training(coll, 0)), so it recorded nothing to train; set "
        "training on before the forward of a training step");
  } else if (s_.params.step() >= ParamStore::kMaxStep) {
    local = Status::InvalidUsage("the step counter is at its maximum, ", ParamStore::kMaxStep,
                                 " (2^53): a backward cannot count another step (set a lower "
                                 "count with shardrec_embedding_set_num_steps)");
  } else {
    const size_t rows =
        static_cast<size_t>(s_.layout.sequence ? s_.current->num_values : s_.current->batch_size);
    const size_t need = rows * static_cast<size_t>(s_.layout.output_dim);
    if (grad_len != need)
      local = Status::InvalidArgument("grad_len is ", grad_len, " but the last forward's output ",
                                      "has ", need, " elements");
    else if (need > 0 && grad == nullptr)
      local = Status::InvalidArgument("grad must not be NULL");
    else if (device_grad == nullptr && s_.options.check_non_finite && !vbe_grad_checked_)
      local = CheckGradFinite(grad, need);
  }
  if (local.ok() && device_grad != nullptr && !TakesDeviceGradient(s_.options.device))
    local = Status::Internal("a device gradient for a collection that does not read one");
  return engine_->Backward(grad, grad_len, local, device_grad);
}

Status EmbeddingCollection::Synchronize() {
  ScopedTimer total(&s_.timings.total_seconds);
  return engine_->Settle(SettlePoint::kWait);
}

Status EmbeddingCollection::SetTraining(bool training) {
  // Evaluation is host-only for now: a device collection's lookups were never run with it.
  if (!training && !s_.options.device.is_host())
    return Status::Unsupported(
        "evaluation mode (set_training 0) is not supported on GPU collections; a forward "
        "without a backward already changes nothing in their fixed tables");
  s_.training = training;
  return Status::Ok();
}

Status EmbeddingCollection::SetDynamicScores(const std::string& table, std::span<const int64_t> ids,
                                             std::span<const double> scores, int64_t* num_set) {
  int32_t t = -1;
  SR_RETURN_IF_ERROR(FindTable(table, &t));
  const sharding::TableConfig& tc = s_.layout.plan->tables[t];
  if (!tc.dynamic.enabled) return Status::InvalidArgument("table '", table, "' is not dynamic");
  if (tc.dynamic.eviction != sharding::DynamicConfig::Eviction::kScore)
    return Status::InvalidArgument("table '", table,
                                   "' does not evict by score (its eviction policy is not "
                                   "SHARDREC_EVICTION_SCORE)");
  for (size_t i = 0; i < scores.size(); ++i)
    if (!std::isfinite(scores[i]))
      return Status::InvalidArgument("scores[", i, "] is ", scores[i],
                                     "; scores must be finite (nothing was set)");
  *num_set = s_.dynamic.SetScores(t, ids, scores);
  return Status::Ok();
}

Status EmbeddingCollection::SetLearningRate(float lr) {
  optim::OptimizerConfig c = optim_;
  c.learning_rate = lr;
  SR_RETURN_IF_ERROR(optim::ValidateConfig(c));
  optim_ = c;
  for (auto& t : s_.table_optim) t.learning_rate = lr;
  return Status::Ok();
}

Status EmbeddingCollection::SetTableLearningRate(const std::string& table, float lr) {
  int32_t t = -1;
  SR_RETURN_IF_ERROR(FindTable(table, &t));
  optim::OptimizerConfig c = s_.table_optim[t];
  c.learning_rate = lr;
  SR_RETURN_IF_ERROR(optim::ValidateConfig(c));
  s_.table_optim[t] = c;
  return Status::Ok();
}

std::vector<StateInfo> EmbeddingCollection::States() const {
  std::vector<StateInfo> out;
  for (const auto& s : optim::StateSpecs(optim_.type)) out.push_back({s.name, s.row_wise});
  return out;
}

Status EmbeddingCollection::TableStates(const std::string& table,
                                        std::vector<StateInfo>* out) const {
  int32_t t = -1;
  SR_RETURN_IF_ERROR(FindTable(table, &t));
  out->clear();
  for (const auto& s : s_.layout.tables[t].state_specs) out->push_back({s.name, s.row_wise});
  return Status::Ok();
}

}  // namespace shardrec::embedding
