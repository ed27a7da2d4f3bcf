// Stable LSD radix sort of packed (row, bag or position) keys, only over the bits the largest row
// needs and the digits the rows do not all share, then run-length encoding into unique rows and
// segments. All memory comes from the workspace.
#include "impl/embedding/kernels/row_group.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

namespace shardrec::embedding::kernels::detail {

namespace {

int BitWidth(uint64_t v) { return v == 0 ? 0 : 64 - std::countl_zero(v); }

// The contiguous parts the keys are split into: each part counts and scatters on its own thread;
// a stable sort has a unique result, so the part count (and thread count) cannot change the
// output.
int RadixParts(const ExecContext& ctx, int64_t n) {
  if (ctx.num_threads() > 1 && n >= 65536)
    return static_cast<int>(std::min<int64_t>(std::max(ctx.num_threads(), 1), n / 32768));
  return 1;
}

std::pair<int64_t, int64_t> PartBounds(int64_t n, int parts, int64_t p) {
  return {n * p / parts, n * (p + 1) / parts};
}

// hist[(d * parts + p) * kRadixBuckets + b] = the keys of part p whose digit d (kDigits of them,
// from bit `shift` on) is b: every digit counted in one pass over the keys, where counting digit
// by digit read them once per digit.
template <int kDigits>
void CountDigits(const ExecContext& ctx, const uint64_t* keys, int64_t n, int shift, int parts,
                 uint32_t* hist) {
  std::memset(hist, 0, sizeof(uint32_t) * kDigits * static_cast<size_t>(parts) * kRadixBuckets);
  ctx.ParallelFor(0, parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      uint32_t* h = hist + p * kRadixBuckets;
      const size_t digit_stride = static_cast<size_t>(parts) * kRadixBuckets;
      auto [b, e] = PartBounds(n, parts, p);
      for (int64_t i = b; i < e; ++i) {
        const uint64_t key = keys[i] >> shift;
        for (int d = 0; d < kDigits; ++d)
          ++h[d * digit_stride + ((key >> (d * kRadixBits)) & (kRadixBuckets - 1))];
      }
    }
  });
}

void CountDigits(const ExecContext& ctx, const uint64_t* keys, int64_t n, int shift, int digits,
                 int parts, uint32_t* hist) {
  switch (digits) {
    case 0:
      return;
    case 1:
      return CountDigits<1>(ctx, keys, n, shift, parts, hist);
    case 2:
      return CountDigits<2>(ctx, keys, n, shift, parts, hist);
    case 3:
      return CountDigits<3>(ctx, keys, n, shift, parts, hist);
    case 4:
      return CountDigits<4>(ctx, keys, n, shift, parts, hist);
    case 5:
      return CountDigits<5>(ctx, keys, n, shift, parts, hist);
    default:
      return CountDigits<kRadixDigits>(ctx, keys, n, shift, parts, hist);
  }
}

// Whether every key has the same digit (parts x buckets counts `hist`, `first` one of the keys):
// sorting on it would move nothing.
bool SharedDigit(const uint32_t* hist, int parts, int64_t n, uint64_t first, int shift) {
  const uint64_t b = (first >> shift) & (kRadixBuckets - 1);
  int64_t count = 0;
  for (int p = 0; p < parts; ++p) count += hist[static_cast<size_t>(p) * kRadixBuckets + b];
  return count == n;
}

// The scatter of one digit (at `shift`) from `src` to `dst`, given the digit's counts per part
// of `src` (`hist`, parts x buckets; turned into offsets here).
void ScatterDigit(const ExecContext& ctx, const uint64_t* src, uint64_t* dst, int64_t n, int shift,
                  int parts, uint32_t* hist) {
  // Exclusive prefix in (digit, part) order turns counts into scatter offsets.
  uint64_t sum = 0;
  for (int d = 0; d < kRadixBuckets; ++d) {
    for (int p = 0; p < parts; ++p) {
      uint32_t& c = hist[static_cast<size_t>(p) * kRadixBuckets + d];
      const uint32_t count = c;
      c = static_cast<uint32_t>(sum);
      sum += count;
    }
  }
  ctx.ParallelFor(0, parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      uint32_t* h = hist + p * kRadixBuckets;
      auto [b, e] = PartBounds(n, parts, p);
      for (int64_t i = b; i < e; ++i) dst[h[(src[i] >> shift) & (kRadixBuckets - 1)]++] = src[i];
    }
  });
}

// Stable LSD sort of keys[0, n) (tmp: as many keys of room) on the `bits` bits from `shift` on.
// Digits all keys share are skipped. One counting pass serves every digit when a single part
// scatters (a digit's counts do not depend on the order); with several parts, a digit after the
// first scattered one is recounted per part, as the parts then hold other keys.
void SortKeys(const ExecContext& ctx, uint64_t* keys, uint64_t* tmp, int64_t n, int shift, int bits,
              uint32_t* hist) {
  if (n < 2 || bits <= 0) return;
  const int digits = (bits + kRadixBits - 1) / kRadixBits;
  const int parts = RadixParts(ctx, n);
  const size_t digit_stride = static_cast<size_t>(parts) * kRadixBuckets;
  CountDigits(ctx, keys, n, shift, digits, parts, hist);
  uint64_t* src = keys;
  uint64_t* dst = tmp;
  bool scattered = false;
  for (int d = 0; d < digits; ++d) {
    uint32_t* h = hist + d * digit_stride;
    const int at = shift + d * kRadixBits;
    if (SharedDigit(h, parts, n, src[0], at)) continue;
    if (scattered && parts > 1) CountDigits<1>(ctx, src, n, at, parts, h);
    ScatterDigit(ctx, src, dst, n, at, parts, h);
    std::swap(src, dst);
    scattered = true;
  }
  if (src != keys) std::memcpy(keys, src, sizeof(uint64_t) * static_cast<size_t>(n));
}

// Calls fn(position, row) for every id of every run, positions counting from 0 in run order.
template <typename Fn>
void ForEachId(std::span<const BagRun> runs, Fn&& fn) {
  int64_t pos = 0;
  for (const BagRun& run : runs) {
    const int64_t base = run.offsets != nullptr ? run.offsets[0] : 0;
    const int64_t n = run.num_ids();
    for (int64_t i = 0; i < n; ++i) fn(pos + i, run.rows[base + i]);
    pos += n;
  }
}

// keys[p] = row << shift | bag for every id (in position order), bags numbered across the runs
// in order (a sequence run's ids are bags of one). Returns the OR of all rows.
uint64_t FillBagKeys(std::span<const BagRun> runs, int shift, uint64_t* keys) {
  uint64_t rows_or = 0;
  uint64_t bag = 0;
  for (const BagRun& run : runs) {
    const int64_t* rows = run.rows + (run.offsets != nullptr ? run.offsets[0] : 0);
    if (run.offsets == nullptr) {
      for (int64_t i = 0; i < run.num_bags; ++i, ++bag) {
        const auto row = static_cast<uint64_t>(rows[i]);
        rows_or |= row;
        *keys++ = (row << shift) | bag;
      }
      continue;
    }
    const int64_t base = run.offsets[0];
    for (int64_t b = 0; b < run.num_bags; ++b, ++bag) {
      const int64_t end = run.offsets[b + 1] - base;
      for (int64_t i = run.offsets[b] - base; i < end; ++i) {
        const auto row = static_cast<uint64_t>(rows[i]);
        rows_or |= row;
        *keys++ = (row << shift) | bag;
      }
    }
  }
  return rows_or;
}

}  // namespace

void BuildGroups(const ExecContext& ctx, std::span<const BagRun> runs, int64_t n,
                 const WorkspaceLayout& layout, void* workspace) {
  auto* g = static_cast<Grouping*>(workspace);
  uint64_t* keys = At<uint64_t>(workspace, layout.keys);
  uint64_t* tmp = At<uint64_t>(workspace, layout.keys_tmp);
  int64_t* segments = At<int64_t>(workspace, layout.segments);
  int64_t* unique = At<int64_t>(workspace, layout.unique_rows);
  bool weighted = false;
  int64_t num_bags = 0;
  for (const BagRun& run : runs) {
    weighted |= run.weights != nullptr;
    num_bags += run.num_bags;
  }
  // Unweighted ids are keyed by their bag (fewer bits, and step 2 finds the gradient row in a
  // per-bag table instead of a per-position one); weighted ones by their position.
  const bool by_bag = !weighted;
  const int index_bits =
      std::max(1, BitWidth(static_cast<uint64_t>(by_bag ? std::max<int64_t>(num_bags, 1) : n)));
  uint64_t rows_or = 0;
  if (by_bag) {
    rows_or = FillBagKeys(runs, index_bits, keys);
  } else {
    ForEachId(runs, [&](int64_t, int64_t row) { rows_or |= static_cast<uint64_t>(row); });
  }
  const int row_bits = BitWidth(rows_or);
  bool packed = row_bits + index_bits <= 64;
  if (packed) {
    // The index goes in the low bits and keys are written in position order, so sorting on the
    // row digits alone keeps equal rows in position order.
    if (!by_bag) {
      ForEachId(runs, [&](int64_t p, int64_t row) {
        keys[p] = (static_cast<uint64_t>(row) << index_bits) | static_cast<uint64_t>(p);
      });
    }
    SortKeys(ctx, keys, tmp, n, index_bits, row_bits, At<uint32_t>(workspace, layout.histograms));
    g->index_mask = index_bits == 64 ? ~uint64_t{0} : ((uint64_t{1} << index_bits) - 1);
    g->keyed_by_bag = by_bag ? 1 : 0;
  } else {
    // Rows too wide to pack beside an index (rows near 2^63): a stable sort of bare positions,
    // with the rows parked in the gradient-row array that step 2 overwrites.
    int64_t* rows = At<int64_t>(workspace, layout.grad_rows);
    ForEachId(runs, [&](int64_t p, int64_t row) { rows[p] = row; });
    std::iota(keys, keys + n, uint64_t{0});
    std::stable_sort(keys, keys + n, [&](uint64_t a, uint64_t b) { return rows[a] < rows[b]; });
    for (int64_t k = 0; k < n; ++k) tmp[k] = static_cast<uint64_t>(rows[keys[k]]);
    g->index_mask = ~uint64_t{0};
    g->keyed_by_bag = 0;
  }
  // Run-length encode the sorted rows.
  int64_t num_unique = 0;
  int64_t prev = -1;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t r =
        packed ? static_cast<int64_t>(keys[k] >> index_bits) : static_cast<int64_t>(tmp[k]);
    if (k == 0 || r != prev) {
      unique[num_unique] = r;
      segments[num_unique] = k;
      ++num_unique;
      prev = r;
    }
  }
  segments[num_unique] = n;
  g->num_ids = n;
  g->num_unique = num_unique;
  g->num_bags = num_bags;
  g->index_bits = index_bits;
}

RowGroups ReadGroups(void* workspace, const WorkspaceLayout& layout) {
  const auto* g = static_cast<const Grouping*>(workspace);
  RowGroups r;
  r.keys = At<uint64_t>(workspace, layout.keys);
  r.index_mask = g->index_mask;
  r.keyed_by_bag = g->keyed_by_bag != 0;
  r.segments = At<int64_t>(workspace, layout.segments);
  r.unique_rows = At<int64_t>(workspace, layout.unique_rows);
  r.num_unique = g->num_unique;
  r.num_keys = g->num_ids;
  return r;
}

}  // namespace shardrec::embedding::kernels::detail
