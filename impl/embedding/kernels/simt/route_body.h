// Input distribution's routing of a KJT by destination rank, written once for host and device:
// the device route (impl/embedding/gpu/route.h) runs these steps on the CUDA executor
// (cuda/route.cu) for a batch in device memory, the CPU tests run them on the host executor
// against RouteBatch (input_dist.cc), whose bytes they reproduce exactly.
//
// The order of everything is "slot" order: one slot per unit, destinations in rank order and each
// destination's units in Layout::units_to_rank order (the order of RouteBatch's messages and
// return targets), then one slot per data-parallel pair (Layout::dp_pairs order). Per (slot,
// sample) counters [slot * B + b] go through one exclusive scan, which gives every id its place
// among all ids in that order: its message, rows and return target follow from it.
//
// Steps (RouteCountSteps, then the host sizes the messages, then RouteFillSteps):
//   1. every bag's length checked (first negative one kept) and scanned into value offsets;
//   2. if the lengths are sound, every weight checked (first non-finite position kept) and every
//      (pair, sample) item walks its ids: bounds policy, first out-of-range (pair, position) kept,
//      counts per slot, the MEAN divisor in id order;
//   3. scans of the counts and of the non-empty flags, their values at slot starts gathered for
//      the host (the one read-back that sizes everything);
//   4. one item explains the first error (sample, id, weight) for the host's message;
//   5. (fill) lengths copied into the messages, pooled return targets, DP offsets, then every id
//      written once into its message (or the DP arrays).
// Items own their outputs ((pair, sample) owns its slots' counters), so no atomics are needed
// except the three "first error" minima, which are order-free (min over a linear index). A bag is
// walked by one thread in id order: the MEAN divisor is RouteBatch's sequential sum, and its bits
// depend on that order (a bag of thousands of ids is therefore one long thread; not measured).
//
// Not shared (the executor's): launch configuration, the scans (CUB on the device, a loop here),
// clearing memory.
#pragma once

#include <cstdint>
#include <cstring>

#include "impl/core/host_device.h"

namespace shardrec::embedding::kernels::simt_body {

// The first errors of a route. Minima are kept as bitwise complements (largest complement wins)
// so that all-zero bytes are the clear state; the explained fields are written by ExplainOp.
struct RouteStatus {
  unsigned long long inv_neg = 0;     // ~(first bag with a negative length)
  unsigned long long inv_weight = 0;  // ~(first value position with a non-finite weight)
  unsigned long long inv_id = 0;      // ~(pair * num_values + position), first out-of-range id
  int64_t total = 0;                  // sum of the lengths
  int64_t neg_len = 0;                // the negative length
  int64_t weight_bag = 0;             // the bag holding the non-finite weight
  int64_t id_sample = 0;              // the sample of the out-of-range id
  int64_t id_value = 0;               // the out-of-range id
  float weight = 0.0f;                // the non-finite weight
  int32_t pad = 0;
};

SHARDREC_HD bool HasMin(unsigned long long inv) { return inv != 0; }
SHARDREC_HD int64_t MinOf(unsigned long long inv) { return static_cast<int64_t>(~inv); }

SHARDREC_HD void ReportMin(unsigned long long* inv_min, int64_t where) {
  const unsigned long long inv = ~static_cast<unsigned long long>(where);
#if defined(__CUDA_ARCH__)
  atomicMax(inv_min, inv);
#else
  if (inv > *inv_min) *inv_min = inv;
#endif
}

inline constexpr int32_t kRouteBoundsError = 0;  // BoundsPolicy values
inline constexpr int32_t kRouteBoundsClamp = 1;
inline constexpr int32_t kRouteBoundsSkip = 2;

inline constexpr int32_t kRoutePairMean = 1;  // pair_flags bits
inline constexpr int32_t kRoutePairDp = 2;

// Everything the steps read and write; pointers live where the steps run. The host fills the
// batch, the tables and the count work arrays before RouteCountSteps and the fill fields before
// RouteFillSteps.
struct RouteParams {
  // The batch (feature-major KJT).
  int64_t batch_size = 0;
  int64_t num_lengths = 0;
  int64_t num_values = 0;
  const int32_t* lengths = nullptr;
  const void* values = nullptr;
  const float* weights = nullptr;  // null: unweighted
  int32_t ids64 = 1;               // values are int64 (else int32)
  int32_t bounds = kRouteBoundsError;
  int32_t check_non_finite = 1;
  int32_t sequence = 0;

  // The plan, flattened. Pair p reads feature pair_feature[p] of a table of pair_rows[p] rows;
  // its row blocks are [pair_block_begin[p], pair_block_begin[p + 1]), block k starting at row
  // block_first[k] and sending its ids to slots block_slots[block_slot_begin[k] ..
  // block_slot_begin[k + 1]). A data-parallel pair has one block at row 0 and its DP slot.
  int32_t num_pairs = 0;
  int32_t num_slots = 0;       // real slots, then one per DP pair
  int32_t num_real_slots = 0;  // slots of units (destinations' messages)
  const int32_t* pair_feature = nullptr;
  const int64_t* pair_rows = nullptr;
  const int32_t* pair_flags = nullptr;
  const int32_t* pair_block_begin = nullptr;  // num_pairs + 1
  const int64_t* block_first = nullptr;
  const int32_t* block_slot_begin = nullptr;  // blocks + 1
  const int32_t* block_slots = nullptr;
  const int32_t* slot_dest = nullptr;     // real slots: destination rank
  const int32_t* slot_in_dest = nullptr;  // real slots: index among the destination's units

  // Count work.
  int64_t* bag_offsets = nullptr;   // num_lengths + 1
  int64_t* wide = nullptr;          // scan input: max(num_lengths, num_slots * B) + 1
  int32_t* slot_lengths = nullptr;  // num_slots * B
  int64_t* id_scan = nullptr;       // num_slots * B + 1 (advanced in place by the fill)
  int64_t* ne_scan = nullptr;       // num_real_slots * B + 1
  float* mean_div = nullptr;        // num_pairs * B (pooled), else null
  int64_t* slot_ids_at = nullptr;   // num_slots + 1: id_scan at each slot's start
  int64_t* slot_ne_at = nullptr;    // num_real_slots + 1: ne_scan at each slot's start
  RouteStatus* status = nullptr;

  // Fill (sized by the host from slot_ids_at / slot_ne_at).
  uint8_t* send = nullptr;
  int64_t send_bytes = 0;
  int64_t* ret_target = nullptr;
  int64_t* dp_rows = nullptr;
  float* dp_weights = nullptr;             // weighted only
  int64_t* dp_pos = nullptr;               // sequence only
  int64_t* dp_offsets = nullptr;           // per DP pair: B + 1
  const int64_t* dest_base = nullptr;      // per rank: byte offset of its message in send
  const int64_t* dest_rows = nullptr;      // per rank: byte offset of its rows in the message
  const int64_t* dest_weights = nullptr;   // per rank: byte offset of its weights
  const int64_t* dest_first_id = nullptr;  // per rank: slot-order index of its first id
};

SHARDREC_HD int64_t RouteIdAt(const RouteParams& p, int64_t i) {
  return p.ids64 != 0 ? static_cast<const int64_t*>(p.values)[i]
                      : static_cast<const int32_t*>(p.values)[i];
}

SHARDREC_HD bool RouteFinite(float w) {
  uint32_t u;
  memcpy(&u, &w, sizeof(u));
  return (u & 0x7f800000u) != 0x7f800000u;
}

// The lengths can be walked: none negative, and they sum to num_values. Read by the items after
// the first steps; until then the offsets may point anywhere and nothing is read through them.
SHARDREC_HD bool LengthsSound(const RouteParams& p) {
  return !HasMin(p.status->inv_neg) && p.bag_offsets[p.num_lengths] == p.num_values;
}

// The last index k in [lo, hi) with off[k] <= x (off ascending, off[lo] <= x).
SHARDREC_HD int64_t LastAtOrBefore(const int64_t* off, int64_t lo, int64_t hi, int64_t x) {
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (off[mid] <= x) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Step 1 (num_lengths + 1 items): widened lengths for the scan, negative lengths reported.
struct WidenLengthsOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t k) const {
    if (k == p.num_lengths) {
      p.wide[k] = 0;
      return;
    }
    const int32_t len = p.lengths[k];
    if (len < 0) ReportMin(&p.status->inv_neg, k);
    p.wide[k] = len;
  }
};

// Step 2a (num_lengths items): the bag's weights; the first non-finite one of the bag reported.
struct CheckWeightsOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t k) const {
    if (!LengthsSound(p)) return;
    for (int64_t i = p.bag_offsets[k]; i < p.bag_offsets[k + 1]; ++i) {
      if (!RouteFinite(p.weights[i])) {
        ReportMin(&p.status->inv_weight, i);
        return;
      }
    }
  }
};

// The block of pair `pr` holding row x: the last one starting at or before it.
SHARDREC_HD int32_t RouteBlockOf(const RouteParams& p, int32_t pr, int64_t x) {
  const int32_t lo = p.pair_block_begin[pr], hi = p.pair_block_begin[pr + 1];
  return static_cast<int32_t>(LastAtOrBefore(p.block_first, lo, hi, x));
}

// Walks the ids of (pair, sample) in order and hands every accepted one to fn(position, row,
// weight, block); false (after reporting it) for an id the bounds policy rejects.
template <class Fn>
SHARDREC_HD bool WalkPairSample(const RouteParams& p, int32_t pr, int64_t b, Fn&& fn) {
  const int64_t k = static_cast<int64_t>(p.pair_feature[pr]) * p.batch_size + b;
  const int64_t rows = p.pair_rows[pr];
  for (int64_t i = p.bag_offsets[k]; i < p.bag_offsets[k + 1]; ++i) {
    int64_t x = RouteIdAt(p, i);
    if (x < 0 || x >= rows) {
      if (p.bounds == kRouteBoundsSkip) continue;
      if (p.bounds != kRouteBoundsClamp) {
        ReportMin(&p.status->inv_id, static_cast<int64_t>(pr) * p.num_values + i);
        return false;
      }
      x = 0;
    }
    fn(i, x, p.weights != nullptr ? p.weights[i] : 1.0f, RouteBlockOf(p, pr, x));
  }
  return true;
}

// Step 2b (num_pairs * B items, item = pair * B + sample): counts per slot and the MEAN divisor.
struct CountOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t item) const {
    if (!LengthsSound(p)) return;
    const int64_t B = p.batch_size;
    const int32_t pr = static_cast<int32_t>(item / B);
    const int64_t b = item - static_cast<int64_t>(pr) * B;
    int64_t total = 0;
    float sum = 0.0f;
    const bool ok = WalkPairSample(p, pr, b, [&](int64_t, int64_t, float w, int32_t blk) {
      for (int32_t j = p.block_slot_begin[blk]; j < p.block_slot_begin[blk + 1]; ++j)
        ++p.slot_lengths[static_cast<int64_t>(p.block_slots[j]) * B + b];
      ++total;
      sum += w;
    });
    if (ok && total != 0 && p.mean_div != nullptr && (p.pair_flags[pr] & kRoutePairMean) != 0)
      p.mean_div[item] = sum;
  }
};

// Step 3 (num_slots * B + 1 items): the counts widened for the scan.
struct WidenCountsOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t j) const {
    p.wide[j] = j < static_cast<int64_t>(p.num_slots) * p.batch_size ? p.slot_lengths[j] : 0;
  }
};

// Step 3 (num_real_slots * B + 1 items): the non-empty flags (pooled return rows) widened.
struct WidenNonEmptyOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t j) const {
    p.wide[j] =
        j < static_cast<int64_t>(p.num_real_slots) * p.batch_size && p.slot_lengths[j] > 0 ? 1 : 0;
  }
};

// Step 3 (num_slots + 1 items): the scans at every slot's start, for the host.
struct GatherOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t s) const {
    p.slot_ids_at[s] = p.id_scan[s * p.batch_size];
    if (s <= p.num_real_slots) p.slot_ne_at[s] = p.ne_scan[s * p.batch_size];
  }
};

// Step 4 (one item, after every check): the first errors' details.
struct ExplainOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t) const {
    RouteStatus& st = *p.status;
    st.total = p.bag_offsets[p.num_lengths];
    if (HasMin(st.inv_neg)) st.neg_len = p.lengths[MinOf(st.inv_neg)];
    if (HasMin(st.inv_weight)) {
      const int64_t i = MinOf(st.inv_weight);
      st.weight = p.weights[i];
      st.weight_bag = LastAtOrBefore(p.bag_offsets, 0, p.num_lengths, i);
    }
    if (HasMin(st.inv_id)) {
      const int64_t key = MinOf(st.inv_id);
      const int64_t pr = key / p.num_values, i = key % p.num_values;
      const int64_t f0 = static_cast<int64_t>(p.pair_feature[pr]) * p.batch_size;
      st.id_value = RouteIdAt(p, i);
      st.id_sample = LastAtOrBefore(p.bag_offsets, f0, f0 + p.batch_size, i) - f0;
    }
  }
};

// Step 5a (num_real_slots * B items): the slot's length in its message; pooled return targets.
struct LengthsOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t j) const {
    const int64_t B = p.batch_size;
    const int64_t s = j / B, b = j - s * B;
    const int32_t d = p.slot_dest[s];
    const int32_t len = p.slot_lengths[j];
    int32_t* lens = reinterpret_cast<int32_t*>(p.send + p.dest_base[d]);
    lens[static_cast<int64_t>(p.slot_in_dest[s]) * B + b] = len;
    if (p.sequence == 0 && len > 0) p.ret_target[p.ne_scan[j]] = b;
  }
};

// Step 5a ((num_slots - num_real_slots) * (B + 1) items): the DP pairs' offsets.
struct DpOffsetsOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t j) const {
    const int64_t B = p.batch_size;
    const int64_t k = j / (B + 1), b = j - k * (B + 1);
    const int64_t s = p.num_real_slots + k;
    p.dp_offsets[j] = p.id_scan[s * B + b] - p.slot_ids_at[p.num_real_slots];
  }
};

// Step 5b (num_pairs * B items): every accepted id written once, at its slot's cursor.
struct FillOp {
  RouteParams p;
  SHARDREC_HD void operator()(int64_t item) const {
    const int64_t B = p.batch_size;
    const int32_t pr = static_cast<int32_t>(item / B);
    const int64_t b = item - static_cast<int64_t>(pr) * B;
    const int64_t dp_base = p.slot_ids_at[p.num_real_slots];
    WalkPairSample(p, pr, b, [&](int64_t i, int64_t x, float w, int32_t blk) {
      const int64_t row = x - p.block_first[blk];
      for (int32_t j = p.block_slot_begin[blk]; j < p.block_slot_begin[blk + 1]; ++j) {
        const int32_t s = p.block_slots[j];
        const int64_t g = p.id_scan[static_cast<int64_t>(s) * B + b]++;
        if (s >= p.num_real_slots) {
          const int64_t at = g - dp_base;
          p.dp_rows[at] = row;
          if (p.dp_weights != nullptr) p.dp_weights[at] = w;
          if (p.dp_pos != nullptr) p.dp_pos[at] = i;
          continue;
        }
        const int32_t d = p.slot_dest[s];
        const int64_t at = g - p.dest_first_id[d];
        uint8_t* msg = p.send + p.dest_base[d];
        reinterpret_cast<int64_t*>(msg + p.dest_rows[d])[at] = row;
        if (p.weights != nullptr) reinterpret_cast<float*>(msg + p.dest_weights[d])[at] = w;
        if (p.sequence != 0) p.ret_target[g] = i;
      }
    });
  }
};

// The executor provides Threads(count, op) (op(item) for item in [0, count)),
// ExclusiveSum(in, out, n) over int64 and Zero(ptr, bytes), all in stream order.
template <class Exec>
void RouteCountSteps(Exec& ex, const RouteParams& p) {
  const int64_t B = p.batch_size;
  const int64_t cells = static_cast<int64_t>(p.num_slots) * B;
  ex.Zero(p.status, sizeof(RouteStatus));
  ex.Zero(p.slot_lengths, sizeof(int32_t) * static_cast<size_t>(cells));
  if (p.mean_div != nullptr)
    ex.Zero(p.mean_div, sizeof(float) * static_cast<size_t>(p.num_pairs * B));
  ex.Threads(p.num_lengths + 1, WidenLengthsOp{p});
  ex.ExclusiveSum(p.wide, p.bag_offsets, p.num_lengths + 1);
  if (p.weights != nullptr && p.check_non_finite != 0) ex.Threads(p.num_lengths, CheckWeightsOp{p});
  ex.Threads(static_cast<int64_t>(p.num_pairs) * B, CountOp{p});
  ex.Threads(cells + 1, WidenCountsOp{p});
  ex.ExclusiveSum(p.wide, p.id_scan, cells + 1);
  const int64_t real = static_cast<int64_t>(p.num_real_slots) * B;
  ex.Threads(real + 1, WidenNonEmptyOp{p});
  ex.ExclusiveSum(p.wide, p.ne_scan, real + 1);
  ex.Threads(static_cast<int64_t>(p.num_slots) + 1, GatherOp{p});
  ex.Threads(1, ExplainOp{p});
}

template <class Exec>
void RouteFillSteps(Exec& ex, const RouteParams& p) {
  const int64_t B = p.batch_size;
  ex.Zero(p.send, static_cast<size_t>(p.send_bytes));
  ex.Threads(static_cast<int64_t>(p.num_real_slots) * B, LengthsOp{p});
  ex.Threads(static_cast<int64_t>(p.num_slots - p.num_real_slots) * (B + 1), DpOffsetsOp{p});
  ex.Threads(static_cast<int64_t>(p.num_pairs) * B, FillOp{p});
}

}  // namespace shardrec::embedding::kernels::simt_body
