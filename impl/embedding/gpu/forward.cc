// The device step's forward phase (forward.h): the combine's column groups and the bags of
// the returned rows each output row adds up.
#include "impl/embedding/gpu/forward.h"

#include <algorithm>
#include <climits>

namespace shardrec::embedding {

void DeviceForward::Init(const Layout& l) {
  layout_ = &l;
  groups_.clear();
  unit_group_.assign(l.units.size(), -1);
  for (size_t u = 0; u < l.units.size(); ++u) {
    const Unit& unit = l.units[u];
    const int64_t col = l.pairs[unit.pair].out_offset + unit.col_offset;
    // Keyed by pair too: a sequence collection's pairs share their columns (rows tell them apart).
    for (size_t g = 0; g < groups_.size() && unit_group_[u] < 0; ++g)
      if (groups_[g].col == col && groups_[g].pair == unit.pair)
        unit_group_[u] = static_cast<int32_t>(g);
    if (unit_group_[u] >= 0) continue;
    unit_group_[u] = static_cast<int32_t>(groups_.size());
    groups_.push_back(CombineGroup{col, unit.cols, unit.pair});
  }
}

void DeviceForward::BuildCombine(const RoutedBatch& rb) {
  const Layout& l = *layout_;
  const size_t G = groups_.size();
  // Each group's output rows [lo, hi): those its returned rows aim at (a unit's targets
  // increase). A sequence group's rows are positions of its one feature, so bags never cover
  // another feature's rows (nor the data-parallel columns written in the same launch).
  group_lo_.assign(G, INT64_MAX);
  group_hi_.assign(G, 0);
  const int64_t* targets = rb.ret_target.data();
  for (int32_t d = 0; d < l.world; ++d)
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count > 0) {
        const auto g = static_cast<size_t>(unit_group_[u]);
        group_lo_[g] = std::min(group_lo_[g], targets[0]);
        group_hi_[g] = std::max(group_hi_[g], targets[count - 1] + 1);
      }
      targets += count;
    }
  group_begin_.assign(G + 1, 0);
  for (size_t g = 0; g < G; ++g) {
    const int64_t rows = group_hi_[g] > group_lo_[g] ? group_hi_[g] - group_lo_[g] : 0;
    group_begin_[g + 1] = group_begin_[g] + (rows > 0 ? rows + 1 : 0);
  }
  // Bag sizes first (row r of group g counted at begin + (r - lo) + 1), then offsets, then every
  // returned row appended to its bag in (rank, unit) order: CombineOutput's order of addition.
  comb_offsets_.assign(static_cast<size_t>(group_begin_[G]), 0);
  targets = rb.ret_target.data();
  for (int32_t d = 0; d < l.world; ++d)
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;  // its group may have no bags: no offset into empty storage
      const auto g = static_cast<size_t>(unit_group_[u]);
      int64_t* bags = comb_offsets_.data() + group_begin_[g] + 1 - group_lo_[g];
      for (int64_t k = 0; k < count; ++k) ++bags[targets[k]];
      targets += count;
    }
  int64_t total = 0;
  comb_cursor_.resize(comb_offsets_.size());
  for (size_t g = 0; g < G; ++g) {
    const int64_t n = group_begin_[g + 1] - group_begin_[g];
    if (n == 0) continue;
    int64_t* o = comb_offsets_.data() + group_begin_[g];
    o[0] = total;
    for (int64_t b = 0; b + 1 < n; ++b) {
      o[b + 1] += o[b];
      comb_cursor_[static_cast<size_t>(group_begin_[g] + b)] = o[b];
    }
    total = o[n - 1];
  }
  comb_ids_.resize(static_cast<size_t>(total));
  targets = rb.ret_target.data();
  auto others = static_cast<int64_t>(rb.ret_floats_total);
  auto self = static_cast<int64_t>(rb.ret_self_offset);
  for (int32_t d = 0; d < l.world; ++d) {
    int64_t& at = d == l.rank ? self : others;
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;
      const int32_t cols = l.units[u].cols;
      const auto g = static_cast<size_t>(unit_group_[u]);
      int64_t* cursor = comb_cursor_.data() + group_begin_[g] - group_lo_[g];
      for (int64_t k = 0; k < count; ++k) comb_ids_[cursor[targets[k]]++] = at + k * cols;
      targets += count;
      at += count * cols;
    }
  }
}

void DeviceForward::AppendCombineJobs(const float* io, size_t rows_floats,
                                      const int64_t* comb_offsets, const int64_t* comb_ids,
                                      int64_t D, float* out,
                                      std::vector<kernels::LookupJob>* jobs) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t n = group_begin_[g + 1] - group_begin_[g];
    const int32_t cols = groups_[g].cols;
    if (n == 0 || rows_floats < static_cast<size_t>(cols)) continue;
    // The returned rows as a table of stride 1: row id = float offset in io_; bag r is output
    // row lo + r.
    const kernels::WeightsView rows{io, DType::kFloat32,
                                    static_cast<int64_t>(rows_floats) - cols + 1, cols, 1};
    jobs->push_back(kernels::LookupJob{rows,
                                       {comb_offsets + group_begin_[g], n - 1, comb_ids, nullptr,
                                        group_lo_[g] * D + groups_[g].col},
                                       out,
                                       D});
  }
}

}  // namespace shardrec::embedding
