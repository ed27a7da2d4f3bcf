// The tiered stages (stages.h).
#include "impl/embedding/tiered/stages.h"

#include <utility>

#include "impl/core/check.h"
#include "impl/embedding/tiered/dynamic_tier.h"
#include "impl/embedding/tiered/resolve_verdict.h"
#include "impl/embedding/tiered/row_resolver.h"

namespace shardrec::embedding::tiered {

namespace {

// The batch a backward may still train (its rows are cache slots already), or null.
const RoutedBatch* InFlight(const StepState& s) {
  return s.current != nullptr && !s.current_consumed ? s.current.get() : nullptr;
}

class TieredDynamicRows final : public RowResolver {
 public:
  TieredDynamicRows(DynamicTier* tier, std::unique_ptr<RowResolver> inner)
      : tier_(*tier), inner_(std::move(inner)) {}
  Status Resolve(RoutedBatch& rb, const std::vector<int64_t>& dp_words) override {
    SR_RETURN_IF_ERROR(inner_->Resolve(rb, dp_words));
    return tier_.WriteCreated(rb);
  }

 private:
  DynamicTier& tier_;
  std::unique_ptr<RowResolver> inner_;
};

class TieredDynamicKeys final : public RowResolver {
 public:
  TieredDynamicKeys(DynamicTier* tier, std::unique_ptr<RowResolver> inner)
      : tier_(*tier), inner_(std::move(inner)) {}
  Status Resolve(RoutedBatch& rb, const std::vector<int64_t>& dp_words) override {
    SR_RETURN_IF_ERROR(inner_->Resolve(rb, dp_words));
    tier_.KeyRounding(rb);
    return Status::Ok();
  }
  void Prefetch(const RoutedBatch& rb) override { inner_->Prefetch(rb); }

 private:
  DynamicTier& tier_;
  std::unique_ptr<RowResolver> inner_;
};

class TieredVerdict final : public RowResolver {
 public:
  // `tier`: this rank's tiered dynamic shards (null: none); `agree_fit`: some rank has some.
  TieredVerdict(StepState* s, std::unique_ptr<DynamicTier> tier, bool agree_fit,
                std::unique_ptr<RowResolver> inner)
      : s_(*s), tier_(std::move(tier)), agree_fit_(agree_fit), inner_(std::move(inner)) {}
  Status Resolve(RoutedBatch& rb, const std::vector<int64_t>& dp_words) override {
    if (agree_fit_ && s_.training) {
      const Status fits = tier_ != nullptr ? tier_->CheckFits(rb, InFlight(s_)) : Status::Ok();
      SR_RETURN_IF_ERROR(AgreeResolution(*s_.comm, fits));
    }
    return AgreeResolution(*s_.comm, inner_->Resolve(rb, dp_words));
  }
  void Prefetch(const RoutedBatch& rb) override { inner_->Prefetch(rb); }

 private:
  StepState& s_;
  std::unique_ptr<DynamicTier> tier_;
  bool agree_fit_;
  std::unique_ptr<RowResolver> inner_;
};

}  // namespace

std::unique_ptr<RowResolver> WrapTiered(StepState* s, std::unique_ptr<RowResolver> rows) {
  // GPU collections take no tier (cache_layout.h refuses one on every rank). One over a device
  // communicator has only GPU peers and skips the agreement below; one over a host communicator
  // may have host peers (a mixed 2D mesh, refused after creation), so it answers it with zeros.
  if (s->options.device.is_cuda() && !s->comm->device().is_host()) return rows;
  const bool tiered = s->tiered != nullptr && !s->tiered->empty();
  std::unique_ptr<DynamicTier> tier;
  if (tiered) {
    tier = std::make_unique<DynamicTier>(s->tiered.get(), &s->dynamic);
    if (tier->empty()) tier.reset();
  }
  // Whether any rank holds a tiered table, and a tiered dynamic one. A failed all-reduce leaves
  // this rank's own answer: the communicator is broken then, and the next forward says so.
  int64_t any[2] = {tiered ? 1 : 0, tier != nullptr ? 1 : 0};
  if (s->comm->Size() > 1)
    (void)s->comm->AllReduce(any, any, 2, DType::kInt64, comm::ReduceOp::kMax);
  if (any[0] == 0 || s->options.device.is_cuda()) return rows;
  if (tier != nullptr) rows = std::make_unique<TieredDynamicRows>(tier.get(), std::move(rows));
  if (tiered) rows = std::make_unique<TieredRows>(s, std::move(rows));
  if (tier != nullptr) rows = std::make_unique<TieredDynamicKeys>(tier.get(), std::move(rows));
  return std::make_unique<TieredVerdict>(s, std::move(tier), any[1] != 0, std::move(rows));
}

}  // namespace shardrec::embedding::tiered
