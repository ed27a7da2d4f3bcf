// The optimizer table: one rule struct per OptimizerType and the one dispatch over them. Every
// kernel that updates rows -- the scalar CPU twin (apply.cc), the SIMT row bodies the CUDA plugin
// and the fake plugins run (row_body.h) and the host's per-ISA fused backward
// (embedding/kernels/isa/fused_rows_body.h) -- and every question about an optimizer's shape
// (optimizer.cc: its name, states, row statistics) goes through DispatchOptimizer, so those files
// carry loops, never a per-optimizer switch.
//
// Adding an optimizer: its OptimizerType value (and SHARDREC_OPTIMIZER_* in the C API), its
// element formulas in update_rules.h, a rule struct below, and its name in AllRules. The callers
// then run it in every kernel with the bits of the scalar twin, because each runs exactly the
// rule's IEEE operations in its own value type.
//
// A rule's shape (all compile-time constants, so the callers' loops specialise without branches):
//   kNumStates  its fp32 state tensors, named "momentum1", "momentum2" in that order (<= 2);
//   kRowState   the index of the state that holds one value per row, or -1 (the others hold one
//               value per element);
//   kNumStats   the row statistics of phase 1, summed over the whole row between the phases (<= 2);
//   kStatsAdvanceStates  phase 1 reads and advances the element states (LAMB);
//   kUpdateWritesStates  phase 2 writes the element states (otherwise it only reads them).
// And its arithmetic, each a template over the value type (update_rules.h: float, or a SIMD
// kernel's vector / row-scalar type):
//   Terms(w, g, m1, m2, s)           phase 1: the element's terms of the row statistics;
//   RowState(old, stat0, dim, s)     phase 2, once per row: the row state's new value;
//   Coefs(row_state, st0, st1, s)    phase 2, once per row: what every element of the row takes;
//   Update(w, g, m1, m2, k, s)       phase 2: the element's new weight (advancing its states).
// m1 / m2 point at the element's state values, null for a state that is absent or row-wise.
#pragma once

#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/optim/optimizer.h"
#include "impl/optim/update_rules.h"

namespace shardrec::optim {

// An element's terms of the row statistics (t1 only when kNumStats == 2).
template <class F>
struct RowTerms {
  F t0;
  F t1;
};

// The per-row values every element of a row takes in phase 2 (their meaning is the rule's).
template <class S>
struct RowCoefs {
  S c0;
  S c1;
};

// The defaults of a rule without row statistics, row state or coefficients.
struct RuleBase {
  static constexpr int kNumStates = 0;
  static constexpr int kRowState = -1;
  static constexpr int kNumStats = 0;
  static constexpr bool kStatsAdvanceStates = false;
  static constexpr bool kUpdateWritesStates = false;

  template <class F>
  static SHARDREC_HD RowTerms<F> Terms(F w, F, F*, F*, const RuleScalars&) {
    return {w, w};  // never summed: kNumStats == 0
  }
  template <class S>
  static SHARDREC_HD S RowState(S old, S, int32_t, const RuleScalars&) {
    return old;
  }
  template <class S>
  static SHARDREC_HD RowCoefs<S> Coefs(S row_state, S, S, const RuleScalars&) {
    return {row_state, row_state};  // unread
  }
};

struct SgdRule : RuleBase {
  static constexpr OptimizerType kType = OptimizerType::kSgd;
  static constexpr const char* kName = "sgd";
  template <class F>
  static SHARDREC_HD F Update(F w, F g, F*, F*, const RowCoefs<F>&, const RuleScalars& s) {
    return SgdUpdate(w, g, s);
  }
};

struct AdagradRule : RuleBase {
  static constexpr OptimizerType kType = OptimizerType::kAdagrad;
  static constexpr const char* kName = "adagrad";
  static constexpr int kNumStates = 1;
  static constexpr bool kUpdateWritesStates = true;
  template <class F>
  static SHARDREC_HD F Update(F w, F g, F* m1, F*, const RowCoefs<F>&, const RuleScalars& s) {
    return AdagradUpdate(w, g, m1, s);
  }
};

// The row state is the mean-square accumulator; the coefficients are FBGEMM's (mult, corr).
struct RowWiseAdagradRule : RuleBase {
  static constexpr OptimizerType kType = OptimizerType::kRowWiseAdagrad;
  static constexpr const char* kName = "rowwise_adagrad";
  static constexpr int kNumStates = 1;
  static constexpr int kRowState = 0;
  static constexpr int kNumStats = 1;
  template <class F>
  static SHARDREC_HD RowTerms<F> Terms(F w, F g, F*, F*, const RuleScalars& s) {
    const F sq = RowWiseAdagradSquare(w, g, s);
    return {sq, sq};
  }
  template <class S>
  static SHARDREC_HD S RowState(S old, S stat0, int32_t full_dim, const RuleScalars&) {
    return RowWiseAdagradState(old, stat0, full_dim);
  }
  template <class S>
  static SHARDREC_HD RowCoefs<S> Coefs(S row_state, S, S, const RuleScalars& s) {
    const S mult = RowWiseAdagradMult(row_state, s);
    return {mult, RowWiseAdagradCorr(mult, s)};
  }
  template <class F>
  static SHARDREC_HD F Update(F w, F g, F*, F*, const RowCoefs<F>& k, const RuleScalars&) {
    return RowWiseAdagradUpdate(w, g, k.c0, k.c1);
  }
};

struct AdamRule : RuleBase {
  static constexpr OptimizerType kType = OptimizerType::kAdam;
  static constexpr const char* kName = "adam";
  static constexpr int kNumStates = 2;
  static constexpr bool kUpdateWritesStates = true;
  template <class F>
  static SHARDREC_HD F Update(F w, F g, F* m1, F* m2, const RowCoefs<F>&, const RuleScalars& s) {
    return AdamUpdate(w, g, m1, m2, s);
  }
};

// m element-wise, v one value per row (the row state, which is also c0).
struct PartialRowWiseAdamRule : RuleBase {
  static constexpr OptimizerType kType = OptimizerType::kPartialRowWiseAdam;
  static constexpr const char* kName = "partial_rowwise_adam";
  static constexpr int kNumStates = 2;
  static constexpr int kRowState = 1;
  static constexpr int kNumStats = 1;
  static constexpr bool kUpdateWritesStates = true;
  template <class F>
  static SHARDREC_HD RowTerms<F> Terms(F w, F g, F*, F*, const RuleScalars& s) {
    const F sq = RowWiseAdagradSquare(w, g, s);
    return {sq, sq};
  }
  template <class S>
  static SHARDREC_HD S RowState(S old, S stat0, int32_t full_dim, const RuleScalars& s) {
    return PartialRowWiseAdamState(old, stat0, full_dim, s);
  }
  template <class S>
  static SHARDREC_HD RowCoefs<S> Coefs(S row_state, S, S, const RuleScalars&) {
    return {row_state, row_state};
  }
  template <class F>
  static SHARDREC_HD F Update(F w, F g, F* m1, F*, const RowCoefs<F>& k, const RuleScalars& s) {
    return PartialRowWiseAdamUpdate(w, g, m1, k.c0, s);
  }
};

// Phase 1 advances m and v and sums w^2 and r^2; c0 is the trust ratio.
struct LambRule : RuleBase {
  static constexpr OptimizerType kType = OptimizerType::kLamb;
  static constexpr const char* kName = "lamb";
  static constexpr int kNumStates = 2;
  static constexpr int kNumStats = 2;
  static constexpr bool kStatsAdvanceStates = true;
  template <class F>
  static SHARDREC_HD RowTerms<F> Terms(F w, F g, F* m1, F* m2, const RuleScalars& s) {
    const F r = LambAdvance(w, g, m1, m2, s);
    return {w * w, r * r};
  }
  template <class S>
  static SHARDREC_HD RowCoefs<S> Coefs(S, S stat0, S stat1, const RuleScalars&) {
    const S ratio = LambRatio(stat0, stat1);
    return {ratio, ratio};
  }
  template <class F>
  static SHARDREC_HD F Update(F w, F, F* m1, F* m2, const RowCoefs<F>& k, const RuleScalars& s) {
    return LambUpdate(w, LambDirection(w, *m1, *m2, s), k.c0, s);
  }
};

template <class... Rules>
struct RuleList {
  static constexpr int kSize = static_cast<int>(sizeof...(Rules));
};

// Every optimizer, in OptimizerType order.
using AllRules =
    RuleList<SgdRule, AdagradRule, RowWiseAdagradRule, AdamRule, PartialRowWiseAdamRule, LambRule>;

namespace dispatch_detail {
template <class... Rules>
constexpr bool InOrder(RuleList<Rules...>) {
  int i = 0;
  return ((static_cast<int>(Rules::kType) == i++) && ...);
}
template <class Visitor, class... Rules>
SHARDREC_HD bool Visit(OptimizerType type, Visitor& visit, RuleList<Rules...>) {
  return ((type == Rules::kType ? (visit(Rules{}), true) : false) || ...);
}
template <class Visitor, class... Rules>
SHARDREC_HD bool VisitWithStats(OptimizerType type, Visitor& visit, RuleList<Rules...>) {
  return (((Rules::kNumStats > 0 && type == Rules::kType) ? (visit(Rules{}), true) : false) || ...);
}
}  // namespace dispatch_detail

static_assert(AllRules::kSize == kNumOptimizerTypes, "AllRules must list every OptimizerType");
static_assert(dispatch_detail::InOrder(AllRules{}), "AllRules must follow OptimizerType order");

struct NumRowStatsVisit {
  int* n;
  template <class R>
  SHARDREC_HD void operator()(R) const {
    *n = R::kNumStats;
  }
};

// Calls visit(Rule{}) with the rule of `type` and returns true; false (visit not called) for a
// value outside OptimizerType. The visitor -- a generic lambda, or in device code a struct with a
// template call operator (row_body.h says why) -- reads the rule's constants and calls its
// functions, so whatever it runs is instantiated once per optimizer.
template <class Visitor>
SHARDREC_HD bool DispatchOptimizer(OptimizerType type, Visitor&& visit) {
  return dispatch_detail::Visit(type, visit, AllRules{});
}

// As DispatchOptimizer, over the rules with row statistics only (false, visit not called, for the
// others): phase 1's per-element branches then cover only the rules that take one.
template <class Visitor>
SHARDREC_HD bool DispatchRuleWithStats(OptimizerType type, Visitor&& visit) {
  return dispatch_detail::VisitWithStats(type, visit, AllRules{});
}

// R::kNumStats of the rule of `type` (0 for a value outside OptimizerType), in host or device
// code (optim::NumRowStats is the host's).
SHARDREC_HD int NumRowStatsOf(OptimizerType type) {
  int n = 0;
  DispatchOptimizer(type, NumRowStatsVisit{&n});
  return n;
}

// Whether state `i` of rule R holds one value per element (present and not the row state).
template <class R, int i>
inline constexpr bool kElementState = i < R::kNumStates&& i != R::kRowState;

}  // namespace shardrec::optim
