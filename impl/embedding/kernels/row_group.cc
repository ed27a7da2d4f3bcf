// Stable LSD radix sort of packed (row, position) keys, only over the bits the largest row needs,
// then run-length encoding into unique rows and segments.
#include "impl/embedding/kernels/row_group.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "impl/core/thread_pool.h"

namespace shardrec::embedding::kernels::detail {

namespace {

constexpr int kDigitBits = 11;
constexpr int kBuckets = 1 << kDigitBits;

int BitWidth(uint64_t v) { return v == 0 ? 0 : 64 - std::countl_zero(v); }

// One counting pass on digit `shift` from `src` to `dst`. Keys are split into `parts` contiguous
// parts that histogram and scatter independently; a stable sort has a unique result, so the
// part count (and thread count) cannot change the output.
void RadixPass(const uint64_t* src, uint64_t* dst, int64_t n, int shift, ThreadPool* pool) {
  int parts = 1;
  if (pool != nullptr && n >= 65536) parts = std::min<int64_t>(pool->num_threads(), n / 32768);
  std::vector<uint32_t> hist(static_cast<size_t>(parts) * kBuckets, 0);
  auto bounds = [&](int p) {
    return std::pair<int64_t, int64_t>(n * p / parts, n * (p + 1) / parts);
  };
  auto count = [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      uint32_t* h = hist.data() + p * kBuckets;
      auto [b, e] = bounds(static_cast<int>(p));
      for (int64_t i = b; i < e; ++i) ++h[(src[i] >> shift) & (kBuckets - 1)];
    }
  };
  if (parts > 1)
    pool->ParallelFor(0, parts, 1, count);
  else
    count(0, 1);
  // Exclusive prefix in (digit, part) order turns counts into scatter offsets.
  uint64_t sum = 0;
  for (int d = 0; d < kBuckets; ++d) {
    for (int p = 0; p < parts; ++p) {
      uint32_t c = hist[static_cast<size_t>(p) * kBuckets + d];
      hist[static_cast<size_t>(p) * kBuckets + d] = static_cast<uint32_t>(sum);
      sum += c;
    }
  }
  auto scatter = [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      uint32_t* h = hist.data() + p * kBuckets;
      auto [b, e] = bounds(static_cast<int>(p));
      for (int64_t i = b; i < e; ++i) dst[h[(src[i] >> shift) & (kBuckets - 1)]++] = src[i];
    }
  };
  if (parts > 1)
    pool->ParallelFor(0, parts, 1, scatter);
  else
    scatter(0, 1);
}

}  // namespace

RowGroups GroupByRow(const int64_t* rows, int64_t n, Workspace* ws, ThreadPool* pool) {
  uint64_t max_row = 0;
  for (int64_t i = 0; i < n; ++i) max_row = std::max(max_row, static_cast<uint64_t>(rows[i]));
  const int row_bits = BitWidth(max_row);
  const int pos_bits = std::max(1, BitWidth(static_cast<uint64_t>(n)));
  ws->keys.resize(n);
  RowGroups g;
  if (row_bits + pos_bits <= 64) {
    // Positions go in the low bits and the input is in position order, so sorting on the row
    // digits alone keeps equal rows in position order.
    for (int64_t i = 0; i < n; ++i)
      ws->keys[i] = (static_cast<uint64_t>(rows[i]) << pos_bits) | uint64_t(i);
    ws->keys_tmp.resize(n);
    uint64_t* src = ws->keys.data();
    uint64_t* dst = ws->keys_tmp.data();
    for (int shift = pos_bits; shift < pos_bits + row_bits; shift += kDigitBits) {
      RadixPass(src, dst, n, shift, pool);
      std::swap(src, dst);
    }
    if (src != ws->keys.data()) ws->keys.swap(ws->keys_tmp);
    g.pos_mask = (pos_bits == 64) ? ~uint64_t{0} : ((uint64_t{1} << pos_bits) - 1);
  } else {
    // Rows too wide to pack beside positions (rows near 2^63): plain stable sort of positions.
    std::iota(ws->keys.begin(), ws->keys.end(), uint64_t{0});
    std::stable_sort(ws->keys.begin(), ws->keys.end(),
                     [&](uint64_t a, uint64_t b) { return rows[a] < rows[b]; });
    g.pos_mask = ~uint64_t{0};
  }
  // Run-length encode the sorted rows.
  ws->unique_rows.clear();
  ws->segments.clear();
  const bool packed = g.pos_mask != ~uint64_t{0};
  int64_t prev = -1;
  for (int64_t k = 0; k < n; ++k) {
    int64_t r = packed ? static_cast<int64_t>(ws->keys[k] >> pos_bits) : rows[ws->keys[k]];
    if (k == 0 || r != prev) {
      ws->unique_rows.push_back(r);
      ws->segments.push_back(k);
      prev = r;
    }
  }
  ws->segments.push_back(n);
  g.keys = ws->keys.data();
  g.segments = ws->segments.data();
  g.unique_rows = ws->unique_rows.data();
  g.num_unique = static_cast<int64_t>(ws->unique_rows.size());
  return g;
}

}  // namespace shardrec::embedding::kernels::detail
