// Memory accounting follows the buffers this object allocates, so the figure a benchmark reports
// is what the sharding saved, not an estimate.
#include "impl/ddp/sharded.h"

#include <cstring>

#include "impl/comm/agree.h"
#include "impl/core/check.h"
#include "impl/ddp/buckets.h"

namespace shardrec::ddp {

namespace {

Status CheckUnits(const std::vector<int64_t>& counts, const std::vector<const float*>& initial) {
  if (initial.size() != counts.size()) {
    return Status::InvalidArgument(counts.size(), " units but ", initial.size(),
                                   " initial buffers");
  }
  for (size_t u = 0; u < counts.size(); ++u) {
    if (counts[u] < 0 || counts[u] > (int64_t{1} << 40)) {
      return Status::InvalidArgument("unit ", u, " has ", counts[u], " elements");
    }
    if (counts[u] > 0 && initial[u] == nullptr) {
      return Status::InvalidArgument("unit ", u, " has no initial values");
    }
  }
  return Status::Ok();
}

}  // namespace

Status ShardedParams::Create(std::shared_ptr<comm::Communicator> comm, std::vector<int64_t> counts,
                             const std::vector<const float*>& initial,
                             const optim::OptimizerConfig& optimizer,
                             std::unique_ptr<ShardedParams>* out, const Status& local) {
  if (comm == nullptr) return Status::InvalidArgument("communicator must not be null");
  std::unique_ptr<ShardedParams> p(new ShardedParams());
  Status args = local;
  if (args.ok() && out == nullptr) args = Status::InvalidArgument("out must not be null");
  if (args.ok()) args = CheckUnits(counts, initial);
  if (args.ok()) args = dense::DenseOptimizer::Create(optimizer, &p->optimizer_);
  // Every rank must give the same optimizer: each rank updates its shard of every unit, so ranks
  // with other settings would update the parts of one unit differently.
  const int64_t same[] = {comm::Digest63(optim::ConfigWords(optimizer))};
  SR_RETURN_IF_ERROR(comm::AgreeToCreate(
      *comm, args, "sharded parameters", same,
      "the optimizers differ (type or settings); every rank must give the same optimizer"));
  // And the same units: each gather and reduce-scatter is sized by them.
  SR_RETURN_IF_ERROR(comm::AgreeOnCounts(*comm, counts, "FSDP units (element counts)"));
  std::unique_ptr<comm::Communicator> mine;
  SR_RETURN_IF_ERROR(comm->Split(0, comm->Rank(), &mine));
  p->comm_ = std::move(mine);
  const int w = p->comm_->Size(), r = p->comm_->Rank();
  p->counts_ = std::move(counts);
  const size_t n = p->counts_.size();
  p->shard_.resize(n);
  p->offset_.resize(n);
  p->params_.resize(n);
  p->grad_shard_.resize(n);
  p->full_.resize(n);
  p->full_grad_.resize(n);
  p->gather_work_.resize(n);
  p->reduce_work_.resize(n);
  p->reduced_.assign(n, false);
  for (size_t u = 0; u < n; ++u) {
    // The same split the bucketer's average uses, so element e is summed in the same order.
    const std::vector<size_t> split = SplitCounts(static_cast<size_t>(p->counts_[u]), w);
    size_t begin = 0;
    for (int k = 0; k < r; ++k) begin += split[k];
    p->shard_[u] = static_cast<int64_t>(split[r]);
    p->offset_[u] = static_cast<int64_t>(begin);
    p->params_[u].assign(initial[u] + begin, initial[u] + begin + split[r]);
    p->grad_shard_[u].assign(split[r], 0.0f);
    p->Account(static_cast<int64_t>(2 * sizeof(float) * split[r]));
  }
  p->Account(static_cast<int64_t>(p->optimizer_->num_states() * sizeof(float)) * [&] {
    int64_t s = 0;
    for (int64_t c : p->shard_) s += c;
    return s;
  }());
  p->worker_ = std::make_unique<comm::CommWorker>();
  *out = std::move(p);
  return Status::Ok();
}

ShardedParams::~ShardedParams() {
  for (auto& w : gather_work_) {
    if (w) (void)w->Wait();
  }
  for (auto& w : reduce_work_) {
    if (w) (void)w->Wait();
  }
}

void ShardedParams::Account(int64_t delta) {
  std::lock_guard<std::mutex> lock(bytes_mu_);
  bytes_ += delta;
  if (bytes_ > peak_) peak_ = bytes_;
}

Status ShardedParams::WaitGather(size_t u) {
  if (!gather_work_[u]) return Status::Ok();
  Status s = gather_work_[u]->Wait();
  gather_work_[u] = nullptr;
  return s;
}

Status ShardedParams::Gather(size_t u, int64_t prefetch, float** full) {
  if (u >= counts_.size() || full == nullptr) {
    return Status::InvalidArgument("unit ", u, " out of range (", counts_.size(), " units)");
  }
  if (prefetch >= static_cast<int64_t>(counts_.size())) {
    return Status::InvalidArgument("prefetch unit ", prefetch, " out of range");
  }
  auto start = [this](size_t v) {
    if (!full_[v].empty() || gather_work_[v] || counts_[v] == 0) return;
    const std::vector<size_t> split = SplitCounts(static_cast<size_t>(counts_[v]), comm_->Size());
    full_[v].resize(static_cast<size_t>(counts_[v]));
    Account(static_cast<int64_t>(sizeof(float)) * counts_[v]);
    gather_work_[v] = worker_->Submit([this, v, split] {
      return comm_->AllGatherV(params_[v].data(), split[comm_->Rank()], full_[v].data(), split,
                               DType::kFloat32);
    });
  };
  start(u);
  if (prefetch >= 0) start(static_cast<size_t>(prefetch));
  SR_RETURN_IF_ERROR(WaitGather(u));
  *full = full_[u].data();
  return Status::Ok();
}

Status ShardedParams::Release(size_t u) {
  if (u >= counts_.size()) return Status::InvalidArgument("unit ", u, " out of range");
  SR_RETURN_IF_ERROR(WaitGather(u));
  Account(-static_cast<int64_t>(sizeof(float) * full_[u].size()));
  std::vector<float>().swap(full_[u]);
  return Status::Ok();
}

Status ShardedParams::Grad(size_t u, float** full) {
  if (u >= counts_.size() || full == nullptr) {
    return Status::InvalidArgument("unit ", u, " out of range (", counts_.size(), " units)");
  }
  if (reduced_[u]) {
    return Status::InvalidUsage("unit ", u, " gradient was already reduced in this step");
  }
  if (full_grad_[u].size() != static_cast<size_t>(counts_[u])) {
    full_grad_[u].assign(static_cast<size_t>(counts_[u]), 0.0f);
    Account(static_cast<int64_t>(sizeof(float)) * counts_[u]);
  }
  *full = full_grad_[u].data();
  return Status::Ok();
}

Status ShardedParams::ReduceGrad(size_t u) {
  if (u >= counts_.size()) return Status::InvalidArgument("unit ", u, " out of range");
  if (reduced_[u]) {
    return Status::InvalidUsage("unit ", u, " gradient reduced twice in one step");
  }
  float* g = nullptr;
  SR_RETURN_IF_ERROR(Grad(u, &g));
  reduced_[u] = true;
  reduce_work_[u] = worker_->Submit([this, u] {
    const std::vector<size_t> split = SplitCounts(static_cast<size_t>(counts_[u]), comm_->Size());
    Status s = comm_->ReduceScatterV(full_grad_[u].data(), grad_shard_[u].data(), split,
                                     DType::kFloat32, comm::ReduceOp::kAvg);
    // ZeRO-3: the full gradient goes as soon as its shard is reduced, not at Step, so a
    // backward holds only the units in flight (the caller may not touch it after ReduceGrad).
    const int64_t bytes = static_cast<int64_t>(sizeof(float) * full_grad_[u].size());
    std::vector<float>().swap(full_grad_[u]);
    Account(-bytes);
    return s;
  });
  return Status::Ok();
}

Status ShardedParams::Step() {
  Status status = Status::Ok();
  std::vector<size_t> missing;
  for (size_t u = 0; u < counts_.size(); ++u) {
    if (!reduced_[u]) {
      missing.push_back(u);
      // Keep the ranks in step: reduce zeros from this rank (ddp.h), not whatever it left in the
      // unit's gradient, which it never declared final.
      std::fill(full_grad_[u].begin(), full_grad_[u].end(), 0.0f);
      if (ReduceGrad(u).ok()) continue;
    }
  }
  for (size_t u = 0; u < counts_.size(); ++u) {
    if (reduce_work_[u]) {
      Status s = reduce_work_[u]->Wait();
      reduce_work_[u] = nullptr;
      if (status.ok() && !s.ok()) status = s;
    }
    Account(-static_cast<int64_t>(sizeof(float) * full_grad_[u].size()));
    std::vector<float>().swap(full_grad_[u]);
    reduced_[u] = false;
  }
  // A communication failure leaves the shards unreduced: nothing is applied (the group is
  // poisoned anyway). A missed unit is different: it was reduced with this rank's zeros, so the
  // averaged shards agree across ranks and every rank must apply every unit. Skipping the update
  // only on the ranks that missed would leave the model half-updated when only some ranks miss.
  if (status.ok()) {
    std::vector<dense::DenseTensor> shards;
    for (size_t u = 0; u < counts_.size(); ++u) {
      shards.push_back(
          {"unit" + std::to_string(u), params_[u].data(), grad_shard_[u].data(), shard_[u]});
    }
    status = optimizer_->Step(shards);
  }
  for (auto& g : grad_shard_) std::fill(g.begin(), g.end(), 0.0f);
  // Gathered parameters are stale after the update.
  for (size_t u = 0; u < counts_.size(); ++u) {
    if (!full_[u].empty()) (void)Release(u);
  }
  if (status.ok() && !missing.empty()) {
    status = Status::InvalidUsage("step with ", missing.size(),
                                  " unit gradient(s) never reduced on this rank (applied with "
                                  "zeros from it), first: unit ",
                                  missing[0]);
  }
  return status;
}

}  // namespace shardrec::ddp
