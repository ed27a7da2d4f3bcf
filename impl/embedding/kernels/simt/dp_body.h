// The backward of data-parallel tables on the device, written once for host and device: the
// dense gradient of every data-parallel table accumulated from the output gradient with the
// host's bits (SparseUpdater::ApplyDataParallel's loop), and, after its all-reduce, the touched
// rows compacted with their gradients scaled (the host's `tg * scale`), ready for the optimizer's
// row update with the counts left in device memory. The CUDA executor (cuda/dp.cu) runs these
// steps on the device, the CPU tests run them on the host executor against the host loop, and
// the fake plugin runs them for the collection tests.
//
// Order of the sums: the host adds, per element of a table's dense gradient, one term per id of
// the table in increasing id position (the ids are pair-major in Layout::dp_pairs order, then
// sample-major), starting from +0. Here every id gets a key (its table's first key + its row),
// a stable sort by key keeps the ids of one row in position order, and one warp per unique row
// walks them in that order, lane l summing columns l, l + 32, ... from +0: the same additions in
// the same order, so the same bits. Each term is the host's: (mean ? g / div : g) * w, with w = 1
// for unweighted ids; a MEAN bag with divisor 0 adds nothing (its rows are still touched).
//
// Not shared (the executor's): launch configuration, the sort, run-length encoding and scans
// (CUB on the device, standard algorithms here), clearing memory, carving the workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/host_device.h"
#include "impl/core/simt.h"
#include "impl/embedding/kernels/simt/pipeline.h"
#include "impl/embedding/kernels/simt/route_body.h"

namespace shardrec::embedding::kernels::simt_body {

// One data-parallel (feature, table) pair of the batch (a device table, written by
// libshardrec and read by the steps: one layout on both sides of the plugin boundary).
struct DpPair {
  const int64_t* offsets = nullptr;  // batch_size + 1 positions of its ids (absolute, ascending)
  const float* div = nullptr;        // MEAN: per sample divisor (0: empty bag); else null
  int64_t col = 0;                   // its first output column
  int32_t table = 0;                 // index of its table among the data-parallel tables
  int32_t pad = 0;
};

// One data-parallel table: where its dense gradient ([rows, dim]) and touched flags ([rows])
// are in the dense block (floats), and its width. Its keys are key_first[t] .. key_first[t + 1].
struct DpTable {
  int64_t grad_at = 0;
  int64_t touch_at = 0;
  int32_t dim = 0;
  int32_t pad = 0;
};

// The scratch of the steps (carved from one workspace: CarveDp).
struct DpScratch {
  uint64_t* keys = nullptr;         // [ids] table key of each id, by position
  uint64_t* keys_sorted = nullptr;  // [ids]
  uint32_t* pos = nullptr;          // [ids] positions 0..ids-1
  uint32_t* pos_sorted = nullptr;   // [ids] grouped by key, in position order per key
  int64_t* grad_off = nullptr;      // [ids] element offset of each id's gradient row slice
  float* div = nullptr;             // [ids] its divisor (1: not MEAN; 0: adds nothing)
  uint64_t* unique = nullptr;       // [ids] unique keys, ascending
  int64_t* counts = nullptr;        // [ids + 1] ids per unique key (0 past the last)
  int64_t* seg = nullptr;           // [ids + 1] first sorted index of each unique key
  int64_t* num_unique = nullptr;    // [1]
  int64_t* flags = nullptr;         // [keys + 1] compaction: touched flag per key
  int64_t* scan = nullptr;          // [keys + 1] compaction: touched keys before each key
};

// Everything the steps read and write (device memory where they run on a device). Field for
// field the plugin's shardrec_plugin_dp_t, the scratch excepted (the executor carves it).
struct DpParams {
  // Accumulation: the output gradient [rows, stride] and the batch's data-parallel ids.
  const float* grad = nullptr;
  int64_t stride = 0;
  int64_t batch_size = 0;  // samples: every pair has batch_size + 1 offsets
  int64_t num_pairs = 0;
  const DpPair* pairs = nullptr;        // num_pairs
  const int64_t* pair_first = nullptr;  // num_pairs + 1: first id position of each pair
  int64_t num_ids = 0;                  // pair_first[num_pairs]
  const int64_t* rows = nullptr;        // [num_ids] row of each id in its table
  const float* weights = nullptr;       // [num_ids], or null (unweighted)
  const int64_t* pos = nullptr;         // sequence: output row of each id; null when pooled
  // The tables and the dense block (every table's gradient and touched flags; the all-reduce's
  // buffer, in SparseUpdater's layout).
  int64_t num_tables = 0;
  const DpTable* tables = nullptr;     // num_tables
  const int64_t* key_first = nullptr;  // num_tables + 1: first key of each table (rows before it)
  int64_t num_keys = 0;                // key_first[num_tables]: rows of every table (host-known)
  float* dense = nullptr;
  int64_t dense_floats = 0;
  // Compaction (after the all-reduce): per table t, its touched rows from rows_out + key_first[t]
  // on, ascending, and their gradients times `scale` from grads_out + tables[t].grad_at on
  // ([touched, dim]); counts[t] touched rows, or 0 for every table when *gate is not 0.
  float scale = 1.0f;
  int64_t* rows_out = nullptr;
  float* grads_out = nullptr;
  int64_t* counts_out = nullptr;  // [num_tables]
  const int64_t* gate = nullptr;  // or null
};

// The table holding key k.
SHARDREC_HD int64_t DpTableOf(const DpParams& p, int64_t k) {
  return LastAtOrBefore(p.key_first, 0, p.num_tables, k);
}

// Step A1 (a lane per id): the id's key, position, gradient offset and divisor.
struct DpKeysOp {
  DpParams p;
  DpScratch s;
  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t item) const {
    w.ForEachTeam(1, [&](auto& t) {
      const int64_t j = item * simt::kWarpSize + t.index();
      if (j >= p.num_ids) return;
      const DpPair& pair = p.pairs[LastAtOrBefore(p.pair_first, 0, p.num_pairs, j)];
      // The sample whose bag holds position j: the last b with offsets[b] <= j (empty bags share
      // their offset with the next one, and offsets[batch_size] > j).
      const int64_t b = LastAtOrBefore(pair.offsets, 0, p.batch_size, j);
      const int64_t target = p.pos != nullptr ? p.pos[j] : b;
      s.keys[j] = static_cast<uint64_t>(p.key_first[pair.table] + p.rows[j]);
      s.pos[j] = static_cast<uint32_t>(j);
      s.grad_off[j] = target * p.stride + pair.col;
      s.div[j] = pair.div != nullptr ? pair.div[b] : 1.0f;
    });
  }
};

// Step A2 (a warp per unique key, its lanes over the columns): the row's gradient summed in
// position order, and its touched flag.
struct DpSumOp {
  DpParams p;
  DpScratch s;
  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t u) const {
    w.ForEachTeam(simt::kWarpSize, [&](auto& t) {
      if (u >= *s.num_unique) return;
      const auto key = static_cast<int64_t>(s.unique[u]);
      const int64_t tb = DpTableOf(p, key);
      const DpTable& tab = p.tables[tb];
      const int64_t row = key - p.key_first[tb];
      const int64_t k0 = s.seg[u], k1 = s.seg[u + 1];
      float* dst = p.dense + tab.grad_at + row * tab.dim;
      t.ForEachLane([&](int l) {
        for (int64_t c = l; c < tab.dim; c += simt::kWarpSize) {
          float acc = 0.0f;
          for (int64_t k = k0; k < k1; ++k) {
            const uint32_t j = s.pos_sorted[k];
            const float div = s.div[j];
            if (div == 0.0f) continue;
            const float g = p.grad[s.grad_off[j] + c];
            // The host's term: a MEAN pair's gradient over its divisor (else as is), times the
            // weight (1 for unweighted ids).
            const float x = div == 1.0f ? g : g / div;
            const float wt = p.weights != nullptr ? p.weights[j] : 1.0f;
            acc = acc + x * wt;
          }
          dst[c] = acc;
        }
        if (l == 0) p.dense[tab.touch_at + row] = 1.0f;
      });
    });
  }
};

// Step C1 (a lane per key, and one past the last): whether the key's row was touched on any rank.
struct DpFlagOp {
  DpParams p;
  DpScratch s;
  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t item) const {
    w.ForEachTeam(1, [&](auto& t) {
      const int64_t k = item * simt::kWarpSize + t.index();
      if (k > p.num_keys) return;
      if (k == p.num_keys) {
        s.flags[k] = 0;
        return;
      }
      const int64_t tb = DpTableOf(p, k);
      s.flags[k] = p.dense[p.tables[tb].touch_at + (k - p.key_first[tb])] != 0.0f ? 1 : 0;
    });
  }
};

// Step C2 (a warp per key): a touched row and its scaled gradient to their compacted places.
struct DpScatterOp {
  DpParams p;
  DpScratch s;
  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t k) const {
    w.ForEachTeam(simt::kWarpSize, [&](auto& t) {
      if (k >= p.num_keys || s.flags[k] == 0) return;
      const int64_t tb = DpTableOf(p, k);
      const DpTable& tab = p.tables[tb];
      const int64_t first = p.key_first[tb];
      const int64_t idx = s.scan[k] - s.scan[first];
      const int64_t row = k - first;
      const float* src = p.dense + tab.grad_at + row * tab.dim;
      float* dst = p.grads_out + tab.grad_at + idx * tab.dim;
      t.ForEachLane([&](int l) {
        if (l == 0) p.rows_out[first + idx] = row;
        for (int64_t c = l; c < tab.dim; c += simt::kWarpSize) dst[c] = src[c] * p.scale;
      });
    });
  }
};

// Step C3 (a lane per table): its touched rows, or 0 when the gate is shut.
struct DpCountOp {
  DpParams p;
  DpScratch s;
  template <class Warp>
  SHARDREC_HD void operator()(Warp& w, int64_t item) const {
    w.ForEachTeam(1, [&](auto& t) {
      const int64_t tb = item * simt::kWarpSize + t.index();
      if (tb >= p.num_tables) return;
      const bool shut = p.gate != nullptr && *p.gate != 0;
      p.counts_out[tb] = shut ? 0 : s.scan[p.key_first[tb + 1]] - s.scan[p.key_first[tb]];
    });
  }
};

// The steps' phases (the plugin's emb_dp_step `phase`).
inline constexpr int32_t kDpAccumulate = 0;
inline constexpr int32_t kDpCompact = 1;

// Phase kDpAccumulate: the dense block cleared, then every id's term added into its row. The
// executor provides Warps(count, op), SortPairs, RunLengthEncode, ExclusiveSum and Zero
// (simt/pipeline.h), all in stream order.
template <class Exec>
void DpAccumulateSteps(Exec& ex, const DpParams& p, const DpScratch& s) {
  ex.Zero(p.dense, sizeof(float) * static_cast<size_t>(p.dense_floats));
  const int64_t n = p.num_ids;
  if (n == 0) return;
  const int64_t num_keys = p.num_keys;
  ex.Zero(s.counts, sizeof(int64_t) * static_cast<size_t>(n + 1));
  ex.Zero(s.num_unique, sizeof(int64_t));
  ex.Warps((n + simt::kWarpSize - 1) / simt::kWarpSize, DpKeysOp{p, s});
  const int end_bit = BitWidth(static_cast<uint64_t>(num_keys > 0 ? num_keys - 1 : 0));
  ex.SortPairs(s.keys, s.keys_sorted, s.pos, s.pos_sorted, n, end_bit < 1 ? 1 : end_bit);
  ex.RunLengthEncode(s.keys_sorted, s.unique, s.counts, s.num_unique, n);
  ex.ExclusiveSum(s.counts, s.seg, n + 1);
  // At most n unique keys; the warps past the device's count return at once.
  ex.Warps(n, DpSumOp{p, s});
}

// Phase kDpCompact: the touched rows of every table and their scaled gradients, and the counts.
template <class Exec>
void DpCompactSteps(Exec& ex, const DpParams& p, const DpScratch& s) {
  if (p.num_tables <= 0) return;
  const int64_t num_keys = p.num_keys;
  if (num_keys > 0) {
    ex.Warps((num_keys + 1 + simt::kWarpSize - 1) / simt::kWarpSize, DpFlagOp{p, s});
    ex.ExclusiveSum(s.flags, s.scan, num_keys + 1);
    ex.Warps(num_keys, DpScatterOp{p, s});
  } else {
    ex.Zero(s.scan, sizeof(int64_t));
  }
  ex.Warps((p.num_tables + simt::kWarpSize - 1) / simt::kWarpSize, DpCountOp{p, s});
}

// The workspace's layout for at most `max_ids` ids and `num_keys` keys, with `temp_bytes` of the
// executor's scratch (device-wide steps) at its end: with `base` null only the size is computed.
// Returns the bytes it takes; *temp receives the scratch's address.
inline size_t CarveDp(uint8_t* base, int64_t max_ids, int64_t num_keys, size_t temp_bytes,
                      DpScratch* s, void** temp) {
  size_t off = 0;
  const auto take = [&](size_t bytes) -> uint8_t* {
    uint8_t* q = base != nullptr ? base + off : nullptr;
    off = (off + bytes + 255) & ~size_t{255};
    return q;
  };
  const auto n = static_cast<size_t>(max_ids < 0 ? 0 : max_ids);
  const auto k = static_cast<size_t>(num_keys < 0 ? 0 : num_keys);
  s->keys = reinterpret_cast<uint64_t*>(take(8 * n));
  s->keys_sorted = reinterpret_cast<uint64_t*>(take(8 * n));
  s->pos = reinterpret_cast<uint32_t*>(take(4 * n));
  s->pos_sorted = reinterpret_cast<uint32_t*>(take(4 * n));
  s->grad_off = reinterpret_cast<int64_t*>(take(8 * n));
  s->div = reinterpret_cast<float*>(take(4 * n));
  s->unique = reinterpret_cast<uint64_t*>(take(8 * n));
  s->counts = reinterpret_cast<int64_t*>(take(8 * (n + 1)));
  s->seg = reinterpret_cast<int64_t*>(take(8 * (n + 1)));
  s->num_unique = reinterpret_cast<int64_t*>(take(8));
  s->flags = reinterpret_cast<int64_t*>(take(8 * (k + 1)));
  s->scan = reinterpret_cast<int64_t*>(take(8 * (k + 1)));
  *temp = take(temp_bytes);
  return off;
}

}  // namespace shardrec::embedding::kernels::simt_body
