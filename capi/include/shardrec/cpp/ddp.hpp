/**
 * @file cpp/ddp.hpp
 * shardrec::Ddp (a gradient bucketer for data-parallel dense layers) and shardrec::Fsdp (fully
 * sharded parameters), over ddp.h. Included by shardrec.hpp.
 */
#ifndef SHARDREC_CPP_DDP_HPP_
#define SHARDREC_CPP_DDP_HPP_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/cpp/comm.hpp"
#include "shardrec/cpp/error.hpp"

namespace shardrec {

/**
 * A DDP gradient bucketer: per step mark_ready() each tensor as its gradient is final, then
 * finish(); the gradients then hold the group average. Move-only; one thread at a time.
 */
class Ddp {
 public:
  Ddp() = default;

  /** Collective over @p comm: @p counts (elements per tensor) the same on every rank. */
  static Ddp create(Comm& comm, std::span<const int64_t> counts,
                    const shardrec_ddp_options_t* options = nullptr) {
    shardrec_ddp_t* d = nullptr;
    check(shardrec_ddp_create(&d, detail::live(comm.get(), "shardrec::Comm"), counts.data(),
                              counts.size(), options));
    return Ddp(d, counts);
  }

  /** Tensor @p index's gradient storage (a view into its bucket, or the external buffer). */
  std::span<float> grad(size_t index) const {
    float* g = nullptr;
    check(shardrec_ddp_grad(h(), index, &g));
    return {g, static_cast<size_t>(counts_.at(index))};
  }

  /**
   * Makes tensor @p index's gradient live in @p grad (its count of floats, kept alive by the
   * caller); an empty span gives the tensor back its bucket storage.
   */
  void set_external(size_t index, std::span<float> grad) {
    if (!grad.empty() && index < counts_.size() &&
        grad.size() != static_cast<size_t>(counts_[index])) {
      throw Error(SHARDREC_EINVAL, "Ddp::set_external: tensor " + std::to_string(index) + " has " +
                                       std::to_string(counts_[index]) + " elements, the span " +
                                       std::to_string(grad.size()));
    }
    check(shardrec_ddp_set_external(h(), index, grad.empty() ? nullptr : grad.data()));
  }

  void zero_grad() { check(shardrec_ddp_zero_grad(h())); }
  void mark_ready(size_t index) { check(shardrec_ddp_mark_ready(h(), index)); }
  void finish() { check(shardrec_ddp_finish(h())); }

  /** no_sync: false makes the next steps accumulate locally (every rank alike). */
  void set_sync(bool enabled) { check(shardrec_ddp_set_sync(h(), enabled ? 1 : 0)); }

  shardrec_ddp_stats_t stats() const {
    shardrec_ddp_stats_t s{};
    check(shardrec_ddp_stats(h(), &s));
    return s;
  }

  /** The tensor indices of bucket @p bucket, in launch order. */
  std::vector<size_t> bucket(size_t bucket) const {
    size_t n = 0;
    check(shardrec_ddp_bucket(h(), bucket, nullptr, 0, &n));
    std::vector<size_t> out(n);
    check(shardrec_ddp_bucket(h(), bucket, out.data(), out.size(), &n));
    out.resize(n);
    return out;
  }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_ddp_t* get() const noexcept { return h_.get(); }

  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  Ddp(shardrec_ddp_t* handle, std::span<const int64_t> counts)
      : h_(handle), counts_(counts.begin(), counts.end()) {}
  shardrec_ddp_t* h() const { return detail::live(h_.get(), "shardrec::Ddp"); }

  struct Deleter {
    void operator()(shardrec_ddp_t* d) const noexcept { shardrec_ddp_destroy(d); }
  };
  std::unique_ptr<shardrec_ddp_t, Deleter> h_;
  std::vector<int64_t> counts_;
};

/**
 * Fully sharded parameters: units (e.g. one per layer) of which each rank keeps 1/W, gathered
 * for use and reduced after the backward. Move-only; one thread at a time.
 */
class Fsdp {
 public:
  Fsdp() = default;

  /**
   * Collective over @p comm. @p initial holds one span per unit with its full initial values,
   * identical on every rank (copied); @p optimizer as for DenseOptimizer.
   */
  static Fsdp create(Comm& comm, std::span<const std::span<const float>> initial,
                     const shardrec_optimizer_config_t& optimizer) {
    std::vector<int64_t> counts;
    std::vector<const float*> data;
    for (std::span<const float> unit : initial) {
      counts.push_back(static_cast<int64_t>(unit.size()));
      data.push_back(unit.data());
    }
    shardrec_fsdp_t* f = nullptr;
    check(shardrec_fsdp_create(&f, detail::live(comm.get(), "shardrec::Comm"), counts.data(),
                               data.data(), counts.size(), &optimizer));
    return Fsdp(f, std::move(counts));
  }

  /**
   * Unit @p unit's full parameters, valid until release(unit) or the next step (collective);
   * a @p prefetch >= 0 starts gathering that unit in the background.
   */
  std::span<float> gather(size_t unit, int64_t prefetch = -1) {
    float* full = nullptr;
    check(shardrec_fsdp_gather(h(), unit, prefetch, &full));
    return {full, static_cast<size_t>(counts_.at(unit))};
  }

  void release(size_t unit) { check(shardrec_fsdp_release(h(), unit)); }

  /** Unit @p unit's full gradient buffer for this step, valid until reduce_grad(unit). */
  std::span<float> grad(size_t unit) {
    float* full = nullptr;
    check(shardrec_fsdp_grad(h(), unit, &full));
    return {full, static_cast<size_t>(counts_.at(unit))};
  }

  /** Starts averaging unit @p unit's gradient into this rank's shard (collective). */
  void reduce_grad(size_t unit) { check(shardrec_fsdp_reduce_grad(h(), unit)); }

  /** Waits for the reductions and applies the optimizer to the local shards. */
  void step() { check(shardrec_fsdp_step(h())); }

  /** This rank's slice of @p unit and where it starts in the unit. */
  std::pair<std::span<float>, int64_t> shard(size_t unit) const {
    float* data = nullptr;
    int64_t offset = 0, count = 0;
    check(shardrec_fsdp_shard(h(), unit, &data, &offset, &count));
    return {{data, static_cast<size_t>(count)}, offset};
  }

  /** Host bytes held now and at most so far. */
  std::pair<int64_t, int64_t> memory() const {
    int64_t current = 0, peak = 0;
    check(shardrec_fsdp_memory(h(), &current, &peak));
    return {current, peak};
  }

  /** The C handle (still owned by this object); NULL after a move. */
  shardrec_fsdp_t* get() const noexcept { return h_.get(); }

  explicit operator bool() const noexcept { return h_ != nullptr; }

 private:
  Fsdp(shardrec_fsdp_t* handle, std::vector<int64_t> counts)
      : h_(handle), counts_(std::move(counts)) {}
  shardrec_fsdp_t* h() const { return detail::live(h_.get(), "shardrec::Fsdp"); }

  struct Deleter {
    void operator()(shardrec_fsdp_t* f) const noexcept { shardrec_fsdp_destroy(f); }
  };
  std::unique_ptr<shardrec_fsdp_t, Deleter> h_;
  std::vector<int64_t> counts_;
};

}  // namespace shardrec

#endif  // SHARDREC_CPP_DDP_HPP_
