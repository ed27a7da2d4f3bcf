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
  TieredVerdict(StepState* s, std::unique_ptr<DynamicTier> tier,
                std::unique_ptr<RowResolver> inner)
      : s_(*s), tier_(std::move(tier)), inner_(std::move(inner)) {}
  Status Resolve(RoutedBatch& rb, const std::vector<int64_t>& dp_words) override {
    if (tier_ != nullptr && s_.training)
      SR_RETURN_IF_ERROR(AgreeResolution(*s_.comm, tier_->CheckFits(rb, InFlight(s_))));
    return AgreeResolution(*s_.comm, inner_->Resolve(rb, dp_words));
  }
  void Prefetch(const RoutedBatch& rb) override { inner_->Prefetch(rb); }

 private:
  StepState& s_;
  std::unique_ptr<DynamicTier> tier_;  // null without tiered dynamic tables
  std::unique_ptr<RowResolver> inner_;
};

}  // namespace

std::unique_ptr<RowResolver> WrapTiered(StepState* s, std::unique_ptr<RowResolver> rows) {
  std::unique_ptr<DynamicTier> tier = std::make_unique<DynamicTier>(s->tiered.get(), &s->dynamic);
  if (tier->empty()) {
    tier.reset();
  } else {
    rows = std::make_unique<TieredDynamicRows>(tier.get(), std::move(rows));
  }
  rows = std::make_unique<TieredRows>(s, std::move(rows));
  if (tier != nullptr) rows = std::make_unique<TieredDynamicKeys>(tier.get(), std::move(rows));
  return std::make_unique<TieredVerdict>(s, std::move(tier), std::move(rows));
}

}  // namespace shardrec::embedding::tiered
