// Buckets launch strictly in bucket order: a complete bucket waits for the ones before it, so
// every rank issues the same collectives in the same order whatever order its own gradients
// become ready in.
#include "impl/ddp/bucketer.h"

#include <algorithm>
#include <cstring>

#include "impl/comm/agree.h"
#include "impl/core/check.h"
#include "impl/core/half.h"
#include "impl/ddp/buckets.h"
#include "impl/ddp/reduce_avg.h"

namespace shardrec::ddp {

namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Status CheckBucketerArgs(const std::vector<int64_t>& counts, const DdpOptions& options) {
  if (options.first_bucket_bytes < 1 || options.bucket_cap_bytes < 1) {
    return Status::InvalidArgument("bucket caps must be >= 1 byte (got ",
                                   options.first_bucket_bytes, " and ", options.bucket_cap_bytes,
                                   ")");
  }
  if (options.compression != Compression::kNone && options.compression != Compression::kBFloat16) {
    return Status::InvalidArgument("unknown gradient compression ",
                                   static_cast<int32_t>(options.compression));
  }
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0 || counts[i] > (int64_t{1} << 40) || total > (int64_t{1} << 40)) {
      return Status::InvalidArgument("gradient ", i, " has ", counts[i], " elements");
    }
    total += counts[i];
  }
  return Status::Ok();
}

}  // namespace

Status Bucketer::Create(std::shared_ptr<comm::Communicator> comm, std::vector<int64_t> counts,
                        const DdpOptions& options, std::unique_ptr<Bucketer>* out,
                        const Status& local) {
  if (comm == nullptr) return Status::InvalidArgument("communicator must not be null");
  Status args = local;
  if (args.ok() && out == nullptr) args = Status::InvalidArgument("out must not be null");
  if (args.ok()) args = CheckBucketerArgs(counts, options);
  // Every rank must give the same options: the buckets (and so every all-reduce's size) are cut
  // by the caps, and compression halves the messages.
  const int64_t same[] = {options.first_bucket_bytes, options.bucket_cap_bytes,
                          static_cast<int64_t>(options.compression)};
  SR_RETURN_IF_ERROR(comm::AgreeToCreate(
      *comm, args, "DDP bucketer", same,
      "first_bucket_bytes, bucket_cap_bytes or compression differ; every rank must give the same "
      "DDP options"));
  // And register the same tensors (the buckets are cut from them).
  SR_RETURN_IF_ERROR(comm::AgreeOnCounts(*comm, counts, "DDP registrations (gradient sizes)"));
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::unique_ptr<comm::Communicator> mine;
  SR_RETURN_IF_ERROR(comm->Split(0, comm->Rank(), &mine));
  std::unique_ptr<Bucketer> b(new Bucketer());
  b->comm_ = std::move(mine);
  b->options_ = options;
  b->counts_ = std::move(counts);
  const size_t n = b->counts_.size();
  try {
    b->arena_.assign(static_cast<size_t>(total), 0.0f);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("DDP gradient arena of ", total, " elements");
  }
  // Reverse registration order in the arena: a backward pass produces the last layers first.
  b->offset_.resize(n);
  b->grads_.resize(n);
  size_t off = 0;
  for (size_t k = n; k-- > 0;) {
    b->offset_[k] = off;
    b->grads_[k] = b->arena_.data() + off;
    off += static_cast<size_t>(b->counts_[k]);
  }
  b->external_.assign(n, false);
  std::vector<size_t> order(n);
  for (size_t k = 0; k < n; ++k) order[k] = n - 1 - k;
  b->Rebucket(order);
  b->ready_.assign(n, false);
  b->worker_ = std::make_unique<comm::CommWorker>();
  *out = std::move(b);
  return Status::Ok();
}

Bucketer::~Bucketer() {
  for (auto& w : works_) {
    if (w) (void)w->Wait();
  }
}

void Bucketer::Rebucket(const std::vector<size_t>& order) {
  const int64_t width = options_.compression == Compression::kBFloat16 ? 2 : 4;
  buckets_ =
      AssignBuckets(counts_, order, width, options_.first_bucket_bytes, options_.bucket_cap_bytes);
  bucket_of_.assign(counts_.size(), -1);
  pack_.assign(buckets_.size(), {});
  half_.assign(buckets_.size(), {});
  scratch_.assign(buckets_.size(), {});
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t i : buckets_[b]) bucket_of_[i] = static_cast<int>(b);
  }
  ready_count_.assign(buckets_.size(), 0);
  works_.assign(buckets_.size(), nullptr);
  stats_.buckets = static_cast<int64_t>(buckets_.size());
}

Status Bucketer::SetExternal(size_t i, float* grad) {
  if (i >= counts_.size()) {
    return Status::InvalidArgument("gradient ", i, " out of range (", counts_.size(),
                                   " registered)");
  }
  if (next_launch_ != 0 || std::any_of(ready_.begin(), ready_.end(), [](bool r) { return r; })) {
    return Status::InvalidUsage("gradient buffers cannot change in the middle of a step");
  }
  if (grad == nullptr) {
    grads_[i] = arena_.data() + offset_[i];
    external_[i] = false;
  } else {
    grads_[i] = grad;
    external_[i] = true;
  }
  return Status::Ok();
}

Status Bucketer::ZeroGrad() {
  // A launched bucket reads and rewrites its gradients on the worker thread until Finish, so
  // clearing them mid-step would race with it (and lose the zeros or the average by timing).
  if (std::any_of(ready_.begin(), ready_.end(), [](bool r) { return r; })) {
    return Status::InvalidUsage(
        "gradients cannot be zeroed in the middle of a step (a tensor was marked ready; call "
        "finish first)");
  }
  for (size_t i = 0; i < counts_.size(); ++i) {
    std::memset(grads_[i], 0, sizeof(float) * static_cast<size_t>(counts_[i]));
  }
  return Status::Ok();
}

Status Bucketer::MarkReady(size_t i) {
  if (i >= counts_.size()) {
    return Status::InvalidArgument("gradient ", i, " out of range (", counts_.size(),
                                   " registered)");
  }
  if (ready_[i]) {
    return Status::InvalidUsage("gradient ", i, " was marked ready twice in one step");
  }
  ready_[i] = true;
  ready_order_.push_back(i);
  if (!sync_) return Status::Ok();
  ++ready_count_[bucket_of_[i]];
  while (next_launch_ < buckets_.size() &&
         ready_count_[next_launch_] == buckets_[next_launch_].size()) {
    Launch(next_launch_++);
  }
  return Status::Ok();
}

void Bucketer::Launch(size_t b) {
  works_[b] = worker_->Submit([this, b] {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = ReduceBucket(b);
    comm_nanos_.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count(),
        std::memory_order_relaxed);
    return s;
  });
}

Status Bucketer::ReduceBucket(size_t b) {
  const std::vector<size_t>& members = buckets_[b];
  size_t n = 0;
  bool in_place = options_.compression == Compression::kNone;
  for (size_t k = 0; k < members.size(); ++k) {
    const size_t i = members[k];
    n += static_cast<size_t>(counts_[i]);
    if (external_[i]) in_place = false;
    if (k > 0) {
      const size_t prev = members[k - 1];
      if (offset_[i] != offset_[prev] + static_cast<size_t>(counts_[prev])) in_place = false;
    }
  }
  const size_t shard = (n + comm_->Size() - 1) / comm_->Size();
  if (options_.compression == Compression::kBFloat16) {
    auto& h = half_[b];
    h.resize(n);
    size_t pos = 0;
    for (size_t i : members) {
      for (int64_t e = 0; e < counts_[i]; ++e) h[pos++] = FloatToBFloat16(grads_[i][e]);
    }
    std::vector<uint16_t> scratch(shard);
    SR_RETURN_IF_ERROR(AverageInPlace(*comm_, h.data(), n, DType::kBFloat16, scratch.data()));
    pos = 0;
    for (size_t i : members) {
      for (int64_t e = 0; e < counts_[i]; ++e) grads_[i][e] = BFloat16ToFloat(h[pos++]);
    }
    return Status::Ok();
  }
  scratch_[b].resize(shard);
  if (in_place) {
    float* base = members.empty() ? nullptr : grads_[members.front()];
    return AverageInPlace(*comm_, base, n, DType::kFloat32, scratch_[b].data());
  }
  auto& p = pack_[b];
  p.resize(n);
  size_t pos = 0;
  for (size_t i : members) {
    std::memcpy(p.data() + pos, grads_[i], sizeof(float) * static_cast<size_t>(counts_[i]));
    pos += static_cast<size_t>(counts_[i]);
  }
  SR_RETURN_IF_ERROR(AverageInPlace(*comm_, p.data(), n, DType::kFloat32, scratch_[b].data()));
  pos = 0;
  for (size_t i : members) {
    std::memcpy(grads_[i], p.data() + pos, sizeof(float) * static_cast<size_t>(counts_[i]));
    pos += static_cast<size_t>(counts_[i]);
  }
  return Status::Ok();
}

Status Bucketer::Finish() {
  std::vector<size_t> missing;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (!ready_[i]) missing.push_back(i);
  }
  Status status = Status::Ok();
  // With sync on: the highest rank (+ 1) that left a gradient unmarked, 0 when none did.
  int64_t unmarked_rank = 0;
  if (sync_) {
    // Launch what is left so every rank issues the same collectives, even on misuse.
    while (next_launch_ < buckets_.size()) Launch(next_launch_++);
    // A rank that left a gradient unmarked averaged a buffer that is not that step's gradient,
    // so no rank may apply the step: every rank learns it from one small all-reduce queued
    // behind the buckets (the peers would otherwise get OK and apply it, and the replicas part).
    unmarked_rank = missing.empty() ? 0 : comm_->Rank() + 1;
    std::shared_ptr<comm::Work> agree = worker_->Submit([this, &unmarked_rank] {
      return comm_->AllReduce(&unmarked_rank, &unmarked_rank, 1, DType::kInt64,
                              comm::ReduceOp::kMax);
    });
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& w : works_) {
      Status s = w->Wait();
      if (status.ok() && !s.ok()) status = s;
    }
    Status s = agree->Wait();
    if (status.ok() && !s.ok()) status = s;
    const auto t1 = std::chrono::steady_clock::now();
    stats_.exposed_seconds += Seconds(t0, t1);
    stats_.comm_seconds = 1e-9 * static_cast<double>(comm_nanos_.load(std::memory_order_relaxed));
    int64_t total = 0;
    for (int64_t c : counts_) total += c;
    stats_.bytes_reduced =
        total * (options_.compression == Compression::kBFloat16 ? 2 : int64_t{4});
    ++stats_.steps;
  }
  if (status.ok() && !missing.empty()) {
    std::string names;
    for (size_t k = 0; k < missing.size() && k < 8; ++k) {
      names += (k ? ", " : "") + std::to_string(missing[k]);
    }
    if (missing.size() > 8) names += ", ...";
    status = Status::InvalidUsage("step finished with ", missing.size(),
                                  " gradient(s) never marked ready: ", names);
  } else if (status.ok() && unmarked_rank != 0) {
    status = Status::InvalidUsage(
        "rank ", unmarked_rank - 1,
        " finished the step with gradient(s) never marked ready (its error names them): this "
        "step's averaged gradients include buffers that were not gradients, on every rank, and "
        "must not be applied");
  }
  // Rebuild once, after the first synced step, in rank 0's observed ready order. Every rank
  // takes part in the broadcast whatever its local status, so none is left waiting.
  if (sync_ && !rebuilt_) {
    rebuilt_ = true;
    std::vector<int64_t> order(counts_.size(), -1);
    for (size_t k = 0; k < ready_order_.size(); ++k)
      order[k] = static_cast<int64_t>(ready_order_[k]);
    Status s = comm_->Broadcast(order.data(), order.size(), DType::kInt64, 0);
    if (!s.ok()) {
      if (status.ok()) status = s;
    } else {
      std::vector<size_t> observed;
      std::vector<bool> seen(counts_.size(), false);
      for (int64_t i : order) {
        // Rank 0's order is a permutation unless it missed a gradient: then keep the buckets.
        if (i < 0 || static_cast<size_t>(i) >= counts_.size() || seen[i]) break;
        seen[i] = true;
        observed.push_back(static_cast<size_t>(i));
      }
      if (observed.size() == counts_.size()) Rebucket(observed);
    }
  }
  ready_.assign(counts_.size(), false);
  ready_order_.clear();
  std::fill(ready_count_.begin(), ready_count_.end(), 0);
  std::fill(works_.begin(), works_.end(), nullptr);
  next_launch_ = 0;
  return status;
}

}  // namespace shardrec::ddp
