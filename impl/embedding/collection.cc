// Collection lifecycle and the forward path: creation (plan agreement, arenas, init), input
// distribution (synchronous or queued on the communication worker), lookup + output
// distribution, and the backward's order of steps.
#include "impl/embedding/collection.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>

#include "impl/core/cuda_plugin.h"
#include "impl/embedding/device_input.h"
#include "impl/embedding/output_dist.h"
#include "impl/embedding/staged_comm.h"
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
  Status local = rejected;
  // Whether this rank's plugin can take the device input distribution (device_input.h); every
  // rank must, or none uses it (the agreement below). The same for data-parallel tables trained
  // on the device (device_dp.h).
  bool device_input = false;
  bool device_dp = false;
  bool gated = false;   // a backward gated on the device by its agreed verdict
  bool counts = false;  // unique-row counts kept on the device (DeviceStep::set_counts_on_device)
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
    local = ResolveOptimizers(*plan, optimizer, &c->optim_, &c->table_optim_);
    std::vector<optim::OptimizerType> types;
    for (const auto& o : c->table_optim_) types.push_back(o.type);
    if (local.ok()) local = BuildLayout(plan, comm->Rank(), types, &c->layout_);
    // A GPU collection needs the plugin and the device before any memory is taken.
    if (local.ok() && options.device.is_cuda()) local = core::CheckDevice(options.device);
    // The memory is taken and initialised before the agreement, so a rank that has not got it
    // (or whose device copies fail) fails like any other rejection and no rank goes on alone.
    if (local.ok()) local = c->params_.Allocate(&c->layout_, options.huge_pages, options.device);
    if (local.ok() && options.num_threads > 1)
      c->pool_ = std::make_unique<ThreadPool>(options.num_threads);
    c->exec_ = ExecContext::Host(c->pool_.get());
    if (local.ok()) local = c->params_.Initialise(options.seed, c->exec_);
    if (local.ok() && options.device.is_cuda()) {
      device_input = !comm->device().is_host() && plan->world_size > 1 &&
                     options.forward_encoding == comm::Encoding::kFp32 &&
                     options.backward_encoding == comm::Encoding::kFp32 &&
                     DeviceStep::HasDeviceInput();
      c->device_ = std::make_unique<DeviceStep>();
      local = c->device_->Init(&c->layout_, &c->params_, options.device.index, options.capacity,
                               device_input);
      // Data-parallel gradients stay on the device when their group needs no collective or
      // all-reduces them between device buffers of this device (fp32: a 16-bit wire keeps the
      // host's encoded all-reduce).
      const comm::Communicator& group = options.dp_comm ? *options.dp_comm : *comm;
      device_dp = local.ok() && !c->layout_.dp_tables.empty() &&
                  DeviceStep::HasDeviceDataParallel() &&
                  (group.Size() == 1 ||
                   (group.device().is_cuda() && group.device().index == options.device.index &&
                    options.backward_encoding == comm::Encoding::kFp32));
      if (device_dp) local = c->device_->InitDataParallel(options.capacity);
      gated = local.ok() && DeviceStep::HasGate();
      counts = local.ok() && DeviceStep::CanCountOnDevice();
    }
  }
  // A host collection cannot even agree over a device communicator (its agreement buffers are
  // host memory): every rank given one refuses here, without a collective.
  if (!options.device.is_cuda() && !comm->device().is_host()) return local;
  // A device (NCCL) communicator: the host-buffer collectives go through a staging wrapper on
  // the step's stream; the payloads that stay on the device use the communicator itself.
  const bool device_comm = options.device.is_cuda() && !comm->device().is_host();
  if (device_comm) {
    std::unique_ptr<StagedComm> staged;
    SR_RETURN_IF_ERROR(StagedComm::Create(comm, comm->device().index,
                                          c->device_ != nullptr ? c->device_->stream() : nullptr,
                                          /*own_stream=*/false, &staged));
    // The data-parallel gradients' all-reduce goes through it with the plan's one size
    // (unless they stay on the device): allocated here, not in a step.
    if (local.ok() && !c->layout_.dp_tables.empty() && !device_dp)
      SR_RETURN_IF_ERROR(staged->Reserve(sizeof(float) * c->layout_.dp_grad_size));
    c->device_comm_ = comm;
    comm = std::move(staged);
  }
  // One allreduce(max) agrees on the plan hash (max of h and of ~h: equal iff min == max), on
  // whether any rank failed, so every rank returns instead of waiting on a peer, and on whether
  // any rank lacks the device input distribution.
  const uint64_t hash = plan->Hash();
  int64_t agree[7] = {static_cast<int64_t>(hash),
                      static_cast<int64_t>(~hash),
                      local.ok() ? 0 : comm->Rank() + 1,
                      device_input ? 0 : 1,
                      device_dp ? 0 : 1,
                      gated ? 0 : 1,
                      counts ? 0 : 1};
  const Status agreed = comm->AllReduce(agree, agree, 7, DType::kInt64, comm::ReduceOp::kMax);
  // A rank's own rejection says more than a failed agreement (e.g. a staged NCCL agreement
  // without the plugin, when the communicator is of another device).
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(agreed);
  if (agree[2] != 0)
    return Status::InvalidArgument("rank ", agree[2] - 1,
                                   " rejected the collection configuration (its error says why)");
  if (static_cast<uint64_t>(agree[0]) != hash || ~static_cast<uint64_t>(agree[1]) != hash)
    return Status::InvalidArgument(
        "ranks were given different plans (plan hashes differ); "
        "every rank must create the collection from the same plan");
  if (device_comm) {
    // The input exchange runs on the communication worker's thread: its own stream.
    std::unique_ptr<comm::Communicator> child;
    SR_RETURN_IF_ERROR(c->device_comm_->Split(0, comm->Rank(), &child));
    if (child == nullptr) return Status::Internal("input communicator split failed");
    std::unique_ptr<StagedComm> staged;
    SR_RETURN_IF_ERROR(StagedComm::Create(std::move(child), options.device.index, nullptr,
                                          /*own_stream=*/true, &staged));
    c->input_comm_ = std::move(staged);
  } else {
    SR_RETURN_IF_ERROR(comm->Split(0, comm->Rank(), &c->input_comm_));
  }
  if (c->input_comm_ == nullptr) return Status::Internal("input communicator split failed");
  c->device_input_ = device_input && agree[3] == 0;
  c->device_dp_ = device_dp && agree[4] == 0;
  c->gated_ = gated && agree[5] == 0;
  if (c->device_ != nullptr) c->device_->set_counts_on_device(counts && agree[6] == 0);
  if (c->device_input_) c->route_tables_ = BuildRouteTables(c->layout_);
  c->comm_ = std::move(comm);
  c->dp_comm_ = options.dp_comm ? options.dp_comm : c->comm_;
  if (options.device.is_cuda() && !c->dp_comm_->device().is_host()) {
    std::unique_ptr<StagedComm> staged;
    SR_RETURN_IF_ERROR(StagedComm::Create(c->dp_comm_, options.device.index, c->device_->stream(),
                                          /*own_stream=*/false, &staged));
    // The data-parallel gradients' all-reduce has one size (the plan's): allocated here.
    if (!c->layout_.dp_tables.empty() && !c->device_dp_)
      SR_RETURN_IF_ERROR(staged->Reserve(sizeof(float) * c->layout_.dp_grad_size));
    c->dp_comm_ = std::move(staged);
  }
  if (c->device_dp_ && c->dp_comm_->Size() > 1)
    c->dp_device_comm_ = options.dp_comm ? options.dp_comm : c->device_comm_;
  c->options_ = options;
  // Stochastic rounding draws its bits from the collection's seed (embedding.h).
  c->optim_.seed = options.seed;
  for (auto& o : c->table_optim_) o.seed = options.seed;
  c->options_.dp_comm.reset();
  c->updater_.Init(&c->layout_, &c->params_);
  c->worker_ = std::make_unique<comm::CommWorker>();
  *out = std::move(c);
  return Status::Ok();
}

EmbeddingCollection::~EmbeddingCollection() {
  // The worker may still be exchanging a pending batch over input_comm_: let it finish first.
  worker_.reset();
}

std::unique_ptr<RoutedBatch> EmbeddingCollection::TakeSpare() {
  if (spare_) return std::move(spare_);
  return std::make_unique<RoutedBatch>();
}

Status EmbeddingCollection::Route(const Batch& batch, const Status& rejected, RoutedBatch* rb) {
  if (!rejected.ok()) return rejected;
  const RouteOptions route{options_.bounds, options_.check_non_finite};
  try {
    if (device_ != nullptr && batch.device.is_cuda()) {
      // A KJT on the device is routed there (device_route.h): the messages come back to the host
      // for the exchange, RouteBatch's bytes.
      if (batch.device.index != options_.device.index)
        return Status::InvalidArgument("the batch is on ", batch.device.ToString(),
                                       " but the collection on ", options_.device.ToString());
      if (route_device_ == nullptr) {
        route_tables_ = BuildRouteTables(layout_);
        route_device_ =
            std::make_unique<DeviceRouteBackend>(options_.device.index, device_->stream());
      }
      return RouteWith(layout_, route_tables_, route, batch, *route_device_, rb);
    }
    return RouteBatch(exec_, layout_, route, batch, rb);
  } catch (const StatusError& e) {
    return e.status();
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("routing the batch: out of host memory");
  } catch (const std::exception& e) {
    return Status::Internal("routing the batch: ", e.what());
  }
}

Status EmbeddingCollection::CheckGradFinite(const float* grad, size_t len) const {
  // In parallel over chunks; the first non-finite element of the lowest chunk that has one is
  // the first of all, whatever the thread count.
  constexpr int64_t kChunk = 16384;
  const auto n = static_cast<int64_t>(len);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::atomic<int64_t> first_chunk{chunks};
  exec_.ParallelFor(0, chunks, 4, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1 && c < first_chunk.load(std::memory_order_relaxed); ++c) {
      const float* p = grad + c * kChunk;
      const int64_t m = std::min(kChunk, n - c * kChunk);
      // A branch-free scan the compiler vectorises: all exponent bits set is NaN or infinity.
      uint32_t bad = 0;
      for (int64_t j = 0; j < m; ++j)
        bad |= static_cast<uint32_t>((std::bit_cast<uint32_t>(p[j]) & 0x7f800000u) == 0x7f800000u);
      if (bad == 0) continue;
      int64_t cur = first_chunk.load(std::memory_order_relaxed);
      while (c < cur && !first_chunk.compare_exchange_weak(cur, c)) {
      }
      break;
    }
  });
  if (first_chunk.load() == chunks) return Status::Ok();
  size_t i = static_cast<size_t>(first_chunk.load() * kChunk);
  while (i < len && std::isfinite(grad[i])) ++i;
  return GradNotFinite(i, grad[i]);
}

Status EmbeddingCollection::GradNotFinite(size_t i, float value) const {
  const auto D = static_cast<size_t>(layout_.output_dim);
  const int64_t col = static_cast<int64_t>(i % D);
  std::string where;
  if (!layout_.sequence) {
    for (const Pair& p : layout_.pairs) {
      const auto& t = layout_.plan->tables[p.table];
      if (col < p.out_offset || col >= p.out_offset + t.dim) continue;
      where = StrCat(", feature '", layout_.plan->features[p.feature].name, "' of table '", t.name,
                     "'");
      break;
    }
  }
  return Status::InvalidArgument("grad: element ", i, " (", layout_.sequence ? "row " : "sample ",
                                 i / D, ", column ", col, where, ") is ", value,
                                 ", which is not finite");
}

bool EmbeddingCollection::TakesDeviceGradient(const Device& device) const {
  if (!device.is_cuda() || device_ == nullptr || device.index != options_.device.index)
    return false;
  // Data-parallel gradients accumulated on the host (a plugin before the device entries, a
  // 16-bit or host data-parallel group) need it there; a message over a host communicator leaves
  // from host memory.
  if (!layout_.dp_pairs.empty() && !device_dp_) return false;
  if (layout_.world > 1 &&
      (device_comm_ == nullptr || options_.backward_encoding != comm::Encoding::kFp32))
    return false;
  return DeviceStep::HasDeviceGradient();
}

Status EmbeddingCollection::AgreeOnDeviceGradient(const Status& local, const float* grad, size_t n,
                                                  const DeviceGradient& device_grad) {
  int64_t agreed = 0, first_bad = -1;
  float bad_value = 0.0f;
  Status s;
  {
    ScopedTimer t(&timings_.comm_seconds);
    comm::Communicator* c = layout_.world > 1 ? device_comm_.get() : nullptr;
    s = device_->Verdict(c, local.ok() ? 0 : comm_->Rank() + 1, local.ok() ? grad : nullptr,
                         local.ok() ? n : 0, options_.check_non_finite && grad != nullptr,
                         comm_->Rank(), device_grad.stream, &agreed, &first_bad, &bad_value);
  }
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(s);
  if (first_bad >= 0) return GradNotFinite(static_cast<size_t>(first_bad), bad_value);
  if (agreed != 0)
    return Status::InvalidArgument("rank ", agreed - 1,
                                   " rejected its backward call (its error says why); no rank "
                                   "changed any state");
  return Status::Ok();
}

Status EmbeddingCollection::Agree(const Status& local, const char* what) {
  int64_t flag = local.ok() ? 0 : comm_->Rank() + 1;
  SR_RETURN_IF_ERROR(comm_->AllReduce(&flag, &flag, 1, DType::kInt64, comm::ReduceOp::kMax));
  if (!local.ok()) return local;
  if (flag != 0)
    return Status::InvalidArgument("rank ", flag - 1, " rejected ", what,
                                   " (its error says why); no rank changed any state");
  return Status::Ok();
}

Status EmbeddingCollection::DistributeInput(const Batch& batch, const Status& rejected,
                                            RoutedBatch* rb) {
  if (!device_input_) return ExchangeAndUnpack(Route(batch, rejected, rb), rb);
  // A batch slot the last forwarded batch, whose backward still reads its ids, does not use.
  rb->device_slot = current_ != nullptr && current_->device_slot == 0 ? 1 : 0;
  rb->send_on_device = false;
  if (rejected.ok() && batch.device.is_cuda() && batch.device.index == options_.device.index)
    return RouteAndGatherOnDevice(batch, rb);
  // Routed on the host (or rejected): the summary goes up with the exchange.
  const Status local = Route(batch, rejected, rb);
  HostRouteSummary(route_tables_, local, *rb, &summary_);
  const size_t per = RouteSummaryBytes(route_tables_);
  gathered_.resize(per * static_cast<size_t>(layout_.world));
  Status s;
  {
    ScopedTimer t(&timings_.comm_seconds);
    s = device_->GatherSummaries(*device_comm_, summary_.data(), sizeof(SummaryHeader), nullptr,
                                 summary_.data() + sizeof(SummaryHeader),
                                 per - sizeof(SummaryHeader), gathered_.data());
  }
  // A rank's own rejection says more than the exchange's failure.
  if (!s.ok()) return local.ok() ? s : local;
  const RouteOptions route{options_.bounds, options_.check_non_finite};
  s = ReadRouteSummaries(layout_, route_tables_, route, local, gathered_, rb);
  return s.ok() ? UnpackCounts(layout_, rb) : s;
}

Status EmbeddingCollection::RouteAndGatherOnDevice(const Batch& batch, RoutedBatch* rb) {
  const RouteOptions route{options_.bounds, options_.check_non_finite};
  if (route_device_ == nullptr)
    route_device_ = std::make_unique<DeviceRouteBackend>(options_.device.index, device_->stream());
  RouteCounted counted;
  Status local;
  try {
    local = RouteCountOnly(layout_, route_tables_, route, batch, *route_device_, &counted);
  } catch (const StatusError& e) {
    local = e.status();
  } catch (const std::bad_alloc&) {
    local = Status::OutOfMemory("routing the batch: out of host memory");
  }
  // The route's read-back goes straight from its workspace into the exchange: the route's
  // sizing and every rank's counts come down together, with one wait.
  const SummaryHeader h{local.ok() ? 0 : 1, batch.batch_size,
                        static_cast<int64_t>(batch.num_values), batch.weights != nullptr ? 1 : 0};
  const size_t body = RouteReadbackBytes(route_tables_);
  const size_t per = sizeof(h) + body;
  summary_.assign(body, 0);
  gathered_.resize(per * static_cast<size_t>(layout_.world));
  Status s;
  {
    ScopedTimer t(&timings_.comm_seconds);
    s = device_->GatherSummaries(*device_comm_, &h, sizeof(h),
                                 local.ok() ? counted.readback : nullptr,
                                 local.ok() ? nullptr : summary_.data(), body, gathered_.data());
  }
  if (!s.ok()) return local.ok() ? s : local;
  RouteFillPlan plan;
  if (local.ok())
    local = RouteSize(layout_, route_tables_, route, batch,
                      gathered_.data() + static_cast<size_t>(layout_.rank) * per + sizeof(h), rb,
                      &plan);
  SR_RETURN_IF_ERROR(ReadRouteSummaries(layout_, route_tables_, route, local, gathered_, rb));
  SR_RETURN_IF_ERROR(UnpackCounts(layout_, rb));
  // The messages are written straight into the batch's slot block, where they leave from.
  SR_RETURN_IF_ERROR(device_->ReserveDeviceInput(*rb));
  SR_RETURN_IF_ERROR(
      RouteFill(layout_, batch, *route_device_, counted, plan, device_->SlotSend(*rb), rb));
  rb->send_on_device = true;
  return Status::Ok();
}

Status EmbeddingCollection::ExchangeAndUnpack(const Status& local, RoutedBatch* rb) {
  Status s;
  rb->device_input = false;
  {
    ScopedTimer t(&timings_.comm_seconds);
    s = ExchangeInput(layout_, *input_comm_, local, rb);
  }
  return s.ok() ? UnpackInput(layout_, rb) : s;
}

Status EmbeddingCollection::Forward(const Batch& batch, float* out, size_t out_len,
                                    const Status& rejected, const DeviceOutput* device_out) {
  if (pending_ != nullptr)
    return Status::InvalidUsage(
        "an input distribution is in flight; finish it with "
        "input_dist_wait and forward_distributed first");
  ScopedTimer total(&timings_.total_seconds);
  // What stream-ordered calls left to learn is learnt first: before the input distribution when
  // it has no wait of its own, else after its counts exchange (whose wait delivers it).
  if (!device_input_) SR_RETURN_IF_ERROR(Settle(true));
  std::unique_ptr<RoutedBatch> rb = TakeSpare();
  Status s;
  {
    ScopedTimer phase(&timings_.input_dist_seconds);
    s = DistributeInput(batch, rejected, rb.get());
  }
  if (s.ok() && device_input_) s = Settle(true);
  if (!s.ok()) {
    spare_ = std::move(rb);
    return s;
  }
  return Distribute(std::move(rb), out, out_len, Status::Ok(), device_out);
}

Status EmbeddingCollection::StartInputDist(const Batch& batch, const Status& rejected) {
  if (pending_ != nullptr)
    return Status::InvalidUsage(
        "an input distribution is already in flight; call "
        "input_dist_wait and forward_distributed first");
  ScopedTimer total(&timings_.total_seconds);
  ScopedTimer phase(&timings_.input_dist_seconds);
  // As in Forward: what stream-ordered calls left to learn, first.
  if (!device_input_) SR_RETURN_IF_ERROR(Settle(true));
  std::unique_ptr<RoutedBatch> rb = TakeSpare();
  if (device_comm_ != nullptr) {
    // NCCL runs operations of different communicators safely only in separate epochs, issued in
    // the same order on every rank; a worker thread exchanging while this thread's backward or
    // mesh sync uses the step's communicator gives neither. So over NCCL the exchange completes
    // here, at the point of the call sequence every rank shares, and input_dist_wait returns at
    // once (what overlaps with the caller's work is only what runs before this call). A
    // rejecting rank takes part in the exchange so its peers fail too.
    Status s = DistributeInput(batch, rejected, rb.get());
    if (s.ok() && device_input_) s = Settle(true);
    if (!s.ok()) {
      spare_ = std::move(rb);
      return s;
    }
    pending_ = std::move(rb);
    return Status::Ok();
  }
  Status local = Route(batch, rejected, rb.get());
  if (!local.ok()) {
    // The rejecting rank takes part in the count exchange so its peers' waits fail too.
    Status s = ExchangeAndUnpack(local, rb.get());
    spare_ = std::move(rb);
    return s;
  }
  pending_ = std::move(rb);
  RoutedBatch* p = pending_.get();
  p->worker_seconds = 0;
  p->device_input = false;
  pending_work_ = worker_->Submit([this, p] {
    // Timed here and added by WaitInputDist: the worker never touches timings_.
    ScopedTimer t(&p->worker_seconds);
    SR_RETURN_IF_ERROR(ExchangeInput(layout_, *input_comm_, Status::Ok(), p));
    return UnpackInput(layout_, p);
  });
  return Status::Ok();
}

Status EmbeddingCollection::WaitInputDist() {
  if (pending_ == nullptr) return Status::InvalidUsage("no input distribution was started");
  if (pending_work_ == nullptr) return Status::Ok();
  ScopedTimer total(&timings_.total_seconds);
  Status s;
  {
    ScopedTimer t(&timings_.comm_seconds);
    s = pending_work_->Wait();
  }
  pending_work_.reset();
  timings_.input_dist_seconds += pending_->worker_seconds;
  if (!s.ok()) {
    spare_ = std::move(pending_);
    return s;
  }
  return Status::Ok();
}

Status EmbeddingCollection::ForwardDistributed(float* out, size_t out_len, const Status& rejected,
                                               const DeviceOutput* device_out) {
  if (pending_ == nullptr || pending_work_ != nullptr)
    return Status::InvalidUsage(pending_ == nullptr
                                    ? "no input distribution was started"
                                    : "call input_dist_wait before forward_distributed");
  ScopedTimer total(&timings_.total_seconds);
  return Distribute(std::move(pending_), out, out_len, rejected, device_out);
}

Status EmbeddingCollection::Distribute(std::unique_ptr<RoutedBatch> rb, float* out, size_t out_len,
                                       const Status& rejected, const DeviceOutput* device_out) {
  const size_t rows = static_cast<size_t>(layout_.sequence ? rb->num_values : rb->batch_size);
  const size_t need = rows * static_cast<size_t>(layout_.output_dim);
  Status local = rejected;
  if (!local.ok()) {
    // The caller's verdict stands.
  } else if (out_len != need)
    local = Status::InvalidArgument(
        "out_len is ", out_len, " but this batch needs ", need,
        layout_.sequence ? " (num_values x dim)" : " (batch_size x output_dim)");
  else if (need > 0 && out == nullptr)
    local = Status::InvalidArgument("out must not be NULL");
  // The output exchange is collective: a rank with a bad output buffer still takes part.
  if (local.ok() && device_out != nullptr && !WritesDeviceOutput(options_.device))
    local = Status::Internal("a device output for a collection that does not write one");
  if (CombinesOnDevice()) {
    Status s;
    CombineOut target{out, device_out != nullptr,
                      device_out != nullptr ? device_out->stream : nullptr};
    // A device output is stream-ordered: the call returns with the phase queued.
    target.async = device_out != nullptr;
    // A rank that refused its output takes part in the same phase (every exchange of it) and
    // drops the output.
    if (!local.ok()) target = CombineOut{nullptr, false, nullptr, /*discard=*/true};
    {
      ScopedTimer phase(&timings_.lookup_seconds);
      s = LookupCombineOnDevice(*rb, target);
    }
    if (s.ok() && local.ok() && device_out == nullptr) {
      ScopedTimer phase(&timings_.output_dist_seconds);
      DivideMeans(exec_, layout_, *rb, out);
    }
    return Finish(std::move(rb), s, local);
  }
  Status s = LookupAndReturn(*rb);
  if (s.ok() && local.ok()) {
    ScopedTimer phase(&timings_.output_dist_seconds);
    WireRows wire;
    if (WireInKernels(options_.forward_encoding)) {
      wire.data = wire_.recv.data();
      wire.add = comm::DecodeAdderFor(options_.forward_encoding);
    }
    s = CombineOutput(exec_, layout_, params_, *rb, ret_recv_.data(), SelfRows(*rb), &jobs_, out,
                      device_.get(), wire);
  }
  return Finish(std::move(rb), s, local);
}

bool EmbeddingCollection::CombinesOnDevice() const {
  // The returned rows are on the device at world 1 and over NCCL (fp32 messages).
  if (device_ == nullptr) return false;
  return layout_.world == 1 ||
         (device_comm_ != nullptr && options_.forward_encoding == comm::Encoding::kFp32);
}

bool EmbeddingCollection::WritesDeviceOutput(const Device& device) const {
  if (!device.is_cuda() || device_ == nullptr || device.index != options_.device.index ||
      !CombinesOnDevice())
    return false;
  for (const Pair& p : layout_.pairs)
    if (p.mean) return DeviceStep::HasMeanDivide();
  return true;
}

Status EmbeddingCollection::LookupCombineOnDevice(RoutedBatch& rb, const CombineOut& out) {
  // Backward writes the gradient message into these (PackGradients), so they keep their sizes.
  ret_send_.resize(rb.ret_floats_total);
  size_t recv_total = 0;
  for (size_t v : ReturnRecvCounts(rb)) recv_total += v;
  ret_recv_.resize(recv_total);
  if (layout_.world == 1) return device_->LookupCombine(rb, nullptr, out);
  const DeviceExchange x{device_comm_.get(), ReturnSendCounts(rb), ReturnRecvCounts(rb)};
  return device_->LookupCombine(rb, &x, out);
}

Status EmbeddingCollection::Finish(std::unique_ptr<RoutedBatch> rb, const Status& s,
                                   const Status& local) {
  if (!s.ok()) {
    spare_ = std::move(rb);
    return s;
  }
  spare_ = std::move(current_);
  current_ = std::move(rb);
  current_consumed_ = false;
  // A batch whose exchanges went through but whose output this rank refused stays the one its
  // backward applies to, so that backward takes part in the step with the batch its peers have
  // (and rejects it on every rank).
  current_rejected_ = !local.ok();
  if (!local.ok()) return local;
  ++timings_.forwards;
  timings_.samples += current_->batch_size;
  return Status::Ok();
}

Status EmbeddingCollection::LookupAndReturn(RoutedBatch& rb) {
  ret_send_.resize(rb.ret_floats_total);
  size_t recv_total = 0;
  for (size_t v : ReturnRecvCounts(rb)) recv_total += v;
  ret_recv_.resize(recv_total);
  if (device_ != nullptr && device_comm_ != nullptr && layout_.world > 1 &&
      options_.forward_encoding == comm::Encoding::kFp32) {
    // Over NCCL the message leaves from the device block the lookups wrote (device_step.h).
    ScopedTimer phase(&timings_.lookup_seconds);
    const DeviceExchange x{device_comm_.get(), ReturnSendCounts(rb), ReturnRecvCounts(rb)};
    return device_->LookupExchange(rb, x, ret_recv_.data(), ret_send_.data());
  }
  const comm::Encoding enc = options_.forward_encoding;
  const bool in_kernels = WireInKernels(enc);
  if (in_kernels) {
    // The travelling rows are encoded by the lookups and decoded by the combine (WireRows).
    if (wire_.send.size() < rb.ret_self_offset) wire_.send.resize(rb.ret_self_offset);
    if (wire_.recv.size() < recv_total) wire_.recv.resize(recv_total);
  }
  auto exchange = [this, &rb, in_kernels, enc] {
    if (in_kernels)
      return comm_->AllToAllV(wire_.send.data(), ReturnSendCounts(rb), wire_.recv.data(),
                              ReturnRecvCounts(rb), comm::WireType(enc));
    return comm::EncodedAllToAllV(*comm_, enc, ret_send_.data(), ReturnSendCounts(rb),
                                  ret_recv_.data(), ReturnRecvCounts(rb), &wire_);
  };
  if (device_ != nullptr || layout_.world == 1) {
    {
      ScopedTimer phase(&timings_.lookup_seconds);
      if (device_ != nullptr)
        SR_RETURN_IF_ERROR(device_->LookupToSend(rb, ret_send_.data()));
      else
        SR_RETURN_IF_ERROR(LookupToSend(exec_, layout_, params_, rb, &jobs_, ret_send_.data()));
    }
    // A single rank looks up only its own samples, which never travel (SelfRows).
    if (layout_.world == 1) return Status::Ok();
    ScopedTimer phase(&timings_.output_dist_seconds);
    ScopedTimer t(&timings_.comm_seconds);
    ScopedTimer e(&timings_.embedding_comm_seconds);
    return exchange();
  }
  // On the host the rows that travel are looked up first and sent by the background worker while
  // this thread looks up the rows of its own samples, which stay here: the exchange (and the wait
  // for the slowest rank) hides behind that lookup.
  WireRows wire;
  if (in_kernels) {
    wire.data = wire_.send.data();
    wire.encode = comm::EncoderFor(enc);
  }
  {
    ScopedTimer phase(&timings_.lookup_seconds);
    SR_RETURN_IF_ERROR(LookupToSend(exec_, layout_, params_, rb, &jobs_, ret_send_.data(), wire,
                                    RunSet::kTravelling));
  }
  double worker_seconds = 0;
  std::shared_ptr<comm::Work> sent = worker_->Submit([&exchange, &worker_seconds] {
    ScopedTimer t(&worker_seconds);
    return exchange();
  });
  Status own;
  try {
    ScopedTimer phase(&timings_.lookup_seconds);
    own = LookupToSend(exec_, layout_, params_, rb, &jobs_, ret_send_.data(), wire, RunSet::kOwn);
  } catch (...) {
    (void)sent->Wait();  // the worker reads this frame's buffers: it finishes first
    throw;
  }
  Status s;
  double waited = 0;
  {
    ScopedTimer phase(&timings_.output_dist_seconds);
    ScopedTimer t(&waited);
    s = sent->Wait();
  }
  // The exchange's time is the worker's (the wait lies within it): collective time is the union
  // of the two, and the output distribution phase only what this thread waited.
  timings_.comm_seconds += std::max(worker_seconds, waited);
  timings_.embedding_comm_seconds += worker_seconds;
  return own.ok() ? s : own;
}

Status EmbeddingCollection::Backward(const float* grad, size_t grad_len, const Status& rejected,
                                     const DeviceGradient* device_grad) {
  ScopedTimer total(&timings_.total_seconds);
  ScopedTimer phase(&timings_.backward_seconds);
  // The last stream-ordered backward's verdict decides which batch and step this one takes: learnt
  // first (one wait; every rank learns the same and returns here alike on a rejection).
  if (pending_verdict_.pending) SR_RETURN_IF_ERROR(Settle(true));
  Status local = rejected;
  if (!local.ok()) {
    // The caller's verdict stands.
  } else if (current_ == nullptr || current_consumed_) {
    local = Status::InvalidUsage("backward needs a forward first (one backward per forward)");
  } else if (current_rejected_) {
    local = Status::InvalidUsage(
        "backward needs a forward first: this rank's last forward failed (its output buffer was "
        "refused), so its batch cannot be trained");
  } else {
    const size_t rows =
        static_cast<size_t>(layout_.sequence ? current_->num_values : current_->batch_size);
    const size_t need = rows * static_cast<size_t>(layout_.output_dim);
    if (grad_len != need)
      local = Status::InvalidArgument("grad_len is ", grad_len, " but the last forward's output ",
                                      "has ", need, " elements");
    else if (need > 0 && grad == nullptr)
      local = Status::InvalidArgument("grad must not be NULL");
    else if (device_grad == nullptr && options_.check_non_finite)
      local = CheckGradFinite(grad, need);
  }
  if (local.ok() && device_grad != nullptr && !TakesDeviceGradient(options_.device))
    local = Status::Internal("a device gradient for a collection that does not read one");
  const bool device_verdict =
      device_grad != nullptr || (device_comm_ != nullptr && layout_.world > 1);
  // Gated on the device when the gradient message also travels between device blocks (or not at
  // all): a 16-bit wire keeps the staged exchange below.
  if (device_verdict && gated_ &&
      (layout_.world == 1 || options_.backward_encoding == comm::Encoding::kFp32))
    return BackwardGated(grad, local, device_grad);
  if (device_verdict) {
    // Over a device communicator the verdicts are agreed between device buffers, whatever the
    // gradient's side (so every rank issues the same collective); a device gradient is checked
    // there too, in the same phase.
    const DeviceGradient none;
    SR_RETURN_IF_ERROR(AgreeOnDeviceGradient(local, device_grad != nullptr ? grad : nullptr,
                                             device_grad != nullptr ? grad_len : 0,
                                             device_grad != nullptr ? *device_grad : none));
  } else {
    ScopedTimer t(&timings_.comm_seconds);
    SR_RETURN_IF_ERROR(Agree(local, "its backward call"));
  }
  const RoutedBatch& rb = *current_;
  current_consumed_ = true;
  const int64_t step = params_.step() + 1;
  params_.set_step(step);
  // Data-parallel tables trained on the device (device_dp.h) ride in the sharded tables' phase.
  const DeviceDpWork dpw =
      device_grad == nullptr ? DataParallelWork(grad, grad_len) : DataParallelWork(nullptr, 0);
  const DeviceDpWork* dp = device_dp_ ? &dpw : nullptr;
  if (device_grad != nullptr) {
    // Packed on the device and exchanged between device buffers (or not at all at world 1).
    const DeviceExchange x{device_comm_.get(), ReturnRecvCounts(rb), ReturnSendCounts(rb)};
    DeviceStep::ShardedInputs in;
    in.x = layout_.world > 1 ? &x : nullptr;
    in.grad_dev = grad;
    in.grad_on_device = true;
    in.dp = dp;
    SR_RETURN_IF_ERROR(device_->ApplySharded(*comm_, updater_, rb, table_optim_, step,
                                             &timings_.comm_seconds, in));
    ++timings_.backwards;
    return Status::Ok();
  }
  // The gradient travels the forward's return route backwards: the sample side packs into the
  // buffer it received into, the owners receive into the buffer they looked up into; the rows of
  // this rank's own samples are written straight to where its shards read them (SelfRows).
  const comm::Encoding benc = options_.backward_encoding;
  if (WireInKernels(benc)) {
    // The other ranks' gradient rows are encoded as they are packed, sent 16-bit, and decoded
    // once into the blocks the kernels read; this rank's own rows stay fp32 (SelfRows).
    size_t send_total = 0;
    for (size_t v : ReturnRecvCounts(rb)) send_total += v;
    if (wire_.send.size() < send_total) wire_.send.resize(send_total);
    if (wire_.recv.size() < rb.ret_self_offset) wire_.recv.resize(rb.ret_self_offset);
    PackGradients(exec_, layout_, rb, grad, ret_recv_.data(), SelfRows(rb),
                  WireRows{wire_.send.data(), comm::EncoderFor(benc), nullptr});
    {
      ScopedTimer t(&timings_.comm_seconds);
      ScopedTimer e(&timings_.embedding_comm_seconds);
      SR_RETURN_IF_ERROR(comm_->AllToAllV(wire_.send.data(), ReturnRecvCounts(rb),
                                          wire_.recv.data(), ReturnSendCounts(rb),
                                          comm::WireType(benc)));
    }
    // One decoding pass, not a widening per id in the kernels: each gradient row is read once per
    // id of its bag (~20 times), and widening it each time cost the compute threads ~1.5 ms per
    // step at world 2 where this pass costs ~0.1 ms (RESULTS.md, 2026-11-24 evening).
    const uint16_t* arrived = wire_.recv.data();
    float* decoded = ret_send_.data();
    exec_.ParallelFor(
        0, static_cast<int64_t>(rb.ret_self_offset), int64_t{1} << 16, [&](int64_t b, int64_t e) {
          comm::DecodeFloats(benc, arrived + b, static_cast<size_t>(e - b), decoded + b);
        });
    SR_RETURN_IF_ERROR(updater_.ApplySharded(exec_, *comm_, rb, ret_send_.data(), table_optim_,
                                             step, &timings_.comm_seconds));
    return ApplyDataParallelTables(rb, grad, step);
  }
  PackGradients(exec_, layout_, rb, grad, ret_recv_.data(), SelfRows(rb));
  if (device_ != nullptr && device_comm_ != nullptr && layout_.world > 1 &&
      options_.backward_encoding == comm::Encoding::kFp32) {
    // Over NCCL the message travels into the device block the backward kernels read.
    const DeviceExchange x{device_comm_.get(), ReturnRecvCounts(rb), ReturnSendCounts(rb)};
    DeviceStep::ShardedInputs in;
    in.grads = ret_send_.data();
    in.x = &x;
    in.packed = ret_recv_.data();
    in.dp = dp;
    SR_RETURN_IF_ERROR(device_->ApplySharded(*comm_, updater_, rb, table_optim_, step,
                                             &timings_.comm_seconds, in));
  } else {
    {
      ScopedTimer t(&timings_.comm_seconds);
      ScopedTimer e(&timings_.embedding_comm_seconds);
      SR_RETURN_IF_ERROR(comm::EncodedAllToAllV(*comm_, options_.backward_encoding,
                                                ret_recv_.data(), ReturnRecvCounts(rb),
                                                ret_send_.data(), ReturnSendCounts(rb), &wire_));
    }
    if (device_ != nullptr) {
      DeviceStep::ShardedInputs in;
      in.grads = ret_send_.data();
      in.dp = dp;
      SR_RETURN_IF_ERROR(device_->ApplySharded(*comm_, updater_, rb, table_optim_, step,
                                               &timings_.comm_seconds, in));
    } else {
      SR_RETURN_IF_ERROR(updater_.ApplySharded(exec_, *comm_, rb, ret_send_.data(), table_optim_,
                                               step, &timings_.comm_seconds));
    }
  }
  return ApplyDataParallelTables(rb, grad, step);
}

DeviceDpWork EmbeddingCollection::DataParallelWork(const float* host_grad, size_t floats) const {
  DeviceDpWork w;
  w.comm = dp_device_comm_.get();
  w.comm_size = dp_comm_->Size();
  w.host_grad = host_grad;
  w.host_grad_floats = floats;
  return w;
}

Status EmbeddingCollection::BackwardGated(const float* grad, const Status& local,
                                          const DeviceGradient* device_grad) {
  // Every rank takes part in the step's collectives with its batch. Without one (no forward since
  // the last backward) no rank has one, as forwards and backwards succeed or fail on every rank
  // together (a rank that refused its output keeps its batch: Finish), so every rank stops here.
  if (current_ == nullptr || current_consumed_) return local;
  const RoutedBatch& rb = *current_;
  const size_t rows = static_cast<size_t>(layout_.sequence ? rb.num_values : rb.batch_size);
  const size_t need = rows * static_cast<size_t>(layout_.output_dim);
  const bool on_device = device_grad != nullptr && TakesDeviceGradient(options_.device);
  // A rank that rejected its call packs and accumulates a gradient whose values do not matter:
  // the agreed verdict shuts every update.
  const float* g = grad;
  if (!local.ok() && on_device) {
    SR_RETURN_IF_ERROR(device_->JunkGradient(need, &g));
  } else if (!local.ok()) {
    junk_grad_.assign(need, 0.0f);
    g = junk_grad_.data();
  }
  const int64_t step = params_.step() + 1;
  DeviceVerdictWork v;
  v.comm = layout_.world > 1 ? device_comm_.get() : nullptr;
  v.local_flag = local.ok() ? 0 : comm_->Rank() + 1;
  v.grad = on_device ? g : nullptr;
  v.n = on_device ? need : 0;
  v.check = on_device && local.ok() && options_.check_non_finite;
  v.rank = comm_->Rank();
  v.caller = on_device ? device_grad->stream : nullptr;
  const DeviceDpWork dpw = on_device ? DataParallelWork(nullptr, 0) : DataParallelWork(g, need);
  const DeviceExchange x{device_comm_.get(), ReturnRecvCounts(rb), ReturnSendCounts(rb)};
  DeviceStep::ShardedInputs in;
  in.verdict = &v;
  in.dp = device_dp_ ? &dpw : nullptr;
  in.x = layout_.world > 1 ? &x : nullptr;
  if (on_device) {
    // Checked, packed and exchanged on the device.
    in.grad_dev = g;
    in.grad_on_device = true;
  } else {
    // Packed on the host (the sample side into the buffer it received into, this rank's own rows
    // where its shards read them); over NCCL the message travels between device blocks.
    PackGradients(exec_, layout_, rb, g, ret_recv_.data(), SelfRows(rb));
    in.grads = ret_send_.data();
    in.packed = ret_recv_.data();
  }
  // A CUDA gradient view is stream-ordered: the call returns with the update phase queued.
  in.async = on_device;
  const Status s =
      device_->ApplySharded(*comm_, updater_, rb, table_optim_, step, &timings_.comm_seconds, in);
  if (in.async && s.ok()) {
    // Counted now, taken back at the next synchronisation if any rank rejected it (Settle). A
    // rank's own rejection is reported there too, as its peers learn of it, so every rank's next
    // synchronising call fails alike.
    pending_verdict_ = PendingVerdict{true, step, timings_.forwards, local};
    current_consumed_ = true;
    params_.set_step(step);
    ++timings_.backwards;
    return Status::Ok();
  }
  // A rank's own rejection says more than a failure of the step it took part in.
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(s);
  int64_t agreed = 0, first_bad = -1;
  float bad_value = 0.0f;
  device_->ReadVerdict(&agreed, &first_bad, &bad_value);
  if (first_bad >= 0) return GradNotFinite(static_cast<size_t>(first_bad), bad_value);
  if (agreed != 0)
    return Status::InvalidArgument("rank ", agreed - 1,
                                   " rejected its backward call (its error says why); no rank "
                                   "changed any state");
  current_consumed_ = true;
  params_.set_step(step);
  ++timings_.backwards;
  return Status::Ok();
}

Status EmbeddingCollection::Settle(bool wait) {
  if (device_ == nullptr) return Status::Ok();
  const Status waited = wait ? device_->Synchronize() : Status::Ok();
  const Status deferred = device_->TakeDeferredError();
  Status verdict;
  if (pending_verdict_.pending && device_->VerdictArrived()) {
    const PendingVerdict p = pending_verdict_;
    pending_verdict_ = PendingVerdict{};
    int64_t agreed = 0, first_bad = -1;
    float bad_value = 0.0f;
    device_->ReadVerdict(&agreed, &first_bad, &bad_value);
    if (!p.local.ok()) {
      verdict = p.local;
    } else if (first_bad >= 0) {
      verdict = GradNotFinite(static_cast<size_t>(first_bad), bad_value);
    } else if (agreed != 0) {
      verdict = Status::InvalidArgument("rank ", agreed - 1,
                                        " rejected its last backward call (its error says why); "
                                        "no rank changed any state");
    }
    if (!verdict.ok()) {
      // Its updates were gated off: the step does not count, and its batch may be trained again
      // while it is still the last one forwarded.
      params_.set_step(p.step - 1);
      --timings_.backwards;
      if (timings_.forwards == p.forwards) current_consumed_ = false;
    }
  }
  // A failed wait says most; then the verdict (every rank learns the same); then an internal
  // error found on this rank's device.
  if (!waited.ok()) return waited;
  if (!verdict.ok()) return verdict;
  return deferred;
}

Status EmbeddingCollection::Synchronize() {
  ScopedTimer total(&timings_.total_seconds);
  return Settle(true);
}

Status EmbeddingCollection::ApplyDataParallelTables(const RoutedBatch& rb, const float* grad,
                                                    int64_t step) {
  if (!device_dp_) {
    // The data-parallel all-reduce is this step's only collective: its comm time is all
    // embedding communication.
    const double before = timings_.comm_seconds;
    SR_RETURN_IF_ERROR(updater_.ApplyDataParallel(exec_, *dp_comm_, options_.backward_encoding, rb,
                                                  grad, table_optim_, step, &timings_.comm_seconds,
                                                  device_.get()));
    timings_.embedding_comm_seconds += timings_.comm_seconds - before;
  }
  ++timings_.backwards;
  return Status::Ok();
}

Status EmbeddingCollection::SetLearningRate(float lr) {
  optim::OptimizerConfig c = optim_;
  c.learning_rate = lr;
  SR_RETURN_IF_ERROR(optim::ValidateConfig(c));
  optim_ = c;
  for (auto& t : table_optim_) t.learning_rate = lr;
  return Status::Ok();
}

Status EmbeddingCollection::SetTableLearningRate(const std::string& table, float lr) {
  int32_t t = -1;
  SR_RETURN_IF_ERROR(FindTable(table, &t));
  optim::OptimizerConfig c = table_optim_[t];
  c.learning_rate = lr;
  SR_RETURN_IF_ERROR(optim::ValidateConfig(c));
  table_optim_[t] = c;
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
  for (const auto& s : layout_.tables[t].state_specs) out->push_back({s.name, s.row_wise});
  return Status::Ok();
}

}  // namespace shardrec::embedding
