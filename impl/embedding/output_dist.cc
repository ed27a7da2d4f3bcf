// Output distribution: lookups into the return message, the combine on the sample side, and the
// gradient packing of backward.
#include "impl/embedding/output_dist.h"

#include <algorithm>
#include <cstring>

namespace shardrec::embedding {

Status LookupToSend(const ExecContext& ctx, const Layout& l, ParamStore& params,
                    const RoutedBatch& rb, std::vector<kernels::LookupJob>* jobs, float* send,
                    const WireRows& wire, RunSet which) {
  jobs->clear();
  for (size_t i = 0; i < l.local.size(); ++i) {
    const LocalShard& ls = l.local[i];
    const kernels::WeightsView w = params.View(ls);
    for (const kernels::BagRun& run : rb.shards[i].runs) {
      // A run's rows lie wholly in one source's block: before ret_self_offset they travel.
      const bool travels = static_cast<size_t>(run.io_offset) < rb.ret_self_offset;
      if ((which == RunSet::kTravelling && !travels) || (which == RunSet::kOwn && travels))
        continue;
      kernels::LookupJob job{w, run, send, ls.cols};
      if (wire.data != nullptr && travels) {
        job.out16 = wire.data;
        job.encode = wire.encode;
      }
      jobs->push_back(job);
    }
  }
  return kernels::Lookup(ctx, *jobs);
}

Status CombineOutput(const ExecContext& ctx, const Layout& l, ParamStore& params,
                     const RoutedBatch& rb, const float* recv, const float* self,
                     std::vector<kernels::LookupJob>* jobs, float* out, DataParallelLookup* device,
                     const WireRows& wire) {
  const int64_t D = l.output_dim;
  const int64_t rows = l.sequence ? rb.num_values : rb.batch_size;
  // In parallel over output rows. Each unit's returned rows target increasing output rows, so a
  // chunk finds its part of every unit by binary search; units are added in their fixed order,
  // so row-split partials sum in the same order for every thread count.
  ctx.ParallelFor(0, rows, 64, [&](int64_t r0, int64_t r1) {
    std::memset(out + r0 * D, 0, sizeof(float) * static_cast<size_t>((r1 - r0) * D));
    // Element offset of the next other rank's rows (recv, or the wire's 16-bit copy).
    int64_t others = 0;
    const int64_t* targets = rb.ret_target.data();
    for (int32_t d = 0; d < l.world; ++d) {
      const bool mine = d == l.rank;
      const bool encoded = !mine && wire.data != nullptr;
      int64_t at = mine ? 0 : others;
      for (int32_t u : l.units_to_rank[d]) {
        const Unit& unit = l.units[u];
        const int64_t count = rb.ret_count[u];
        const int64_t col = l.pairs[unit.pair].out_offset + unit.col_offset;
        const int64_t* lo = std::lower_bound(targets, targets + count, r0);
        const int64_t* hi = std::lower_bound(lo, targets + count, r1);
        for (const int64_t* t = lo; t < hi; ++t) {
          const int64_t from = at + (t - targets) * unit.cols;
          float* dst = out + *t * D + col;
          if (encoded) {
            wire.add(wire.data + from, static_cast<size_t>(unit.cols), dst);
            continue;
          }
          const float* s = (mine ? self : recv) + from;
          for (int32_t c = 0; c < unit.cols; ++c) dst[c] += s[c];
        }
        targets += count;
        at += count * unit.cols;
      }
      if (!mine) others = at;
    }
  });
  const int64_t B = rb.batch_size;
  jobs->clear();
  if (device != nullptr) SR_RETURN_IF_ERROR(device->LookupDataParallel(rb, out));
  for (size_t i = 0; device == nullptr && i < l.dp_pairs.size(); ++i) {
    const Pair& pair = l.pairs[l.dp_pairs[i]];
    const LocalShard& ls = l.local[l.tables[pair.table].shard_local[l.rank]];
    const int64_t* offsets = rb.dp_offsets.data() + rb.dp_offsets_begin[i];
    const float* bw = rb.dp_weights.empty() ? nullptr : rb.dp_weights.data();
    if (!l.sequence) {
      // Data-parallel bags are summed straight into their output columns.
      jobs->push_back(kernels::LookupJob{
          params.View(ls), {offsets, B, rb.dp_rows.data(), bw, pair.out_offset}, out, D});
      continue;
    }
    // Sequence ids of data-parallel tables go to scattered output rows: one row at a time.
    const int64_t first = offsets[0];
    const int64_t n = offsets[B] - first;
    for (int64_t j = 0; j < n; ++j) {
      float* dst = out + rb.dp_pos[first + j] * D;
      params.ReadRow(ls, rb.dp_rows[first + j], dst);
      if (bw == nullptr) continue;
      const float scale = bw[first + j];
      for (int32_t c = 0; c < ls.cols; ++c) dst[c] *= scale;
    }
  }
  SR_RETURN_IF_ERROR(kernels::Lookup(ctx, *jobs));
  DivideMeans(ctx, l, rb, out);
  return Status::Ok();
}

void DivideMeans(const ExecContext& ctx, const Layout& l, const RoutedBatch& rb, float* out) {
  if (l.sequence) return;
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  ctx.ParallelFor(0, B, 64, [&](int64_t b0, int64_t b1) {
    for (size_t p = 0; p < l.pairs.size(); ++p) {
      const Pair& pair = l.pairs[p];
      if (!pair.mean) continue;
      const int32_t dim = l.plan->tables[pair.table].dim;
      for (int64_t b = b0; b < b1; ++b) {
        const float div = rb.mean_div[p * B + b];
        float* dst = out + b * D + pair.out_offset;
        for (int32_t c = 0; c < dim; ++c) dst[c] = div != 0.0f ? dst[c] / div : 0.0f;
      }
    }
  });
}

void PackGradients(const ExecContext& ctx, const Layout& l, const RoutedBatch& rb,
                   const float* grad, float* send, float* self, const WireRows& wire) {
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  // Every unit's returned rows are one segment: where its rows start in ret_target and where
  // their gradients go. Segments are written in parallel over rows; each row has its own place.
  struct Segment {
    int64_t k_begin;
    int32_t unit;
    float* dst;       // fp32 rows, or
    uint16_t* dst16;  // encoded rows (another rank's, over an encoded exchange)
  };
  std::vector<Segment> segs;
  int64_t others = 0;  // element offset of the next other rank's rows in send / the wire
  int64_t k = 0;
  for (int32_t d = 0; d < l.world; ++d) {
    const bool mine = d == l.rank;
    int64_t at = mine ? 0 : others;
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t count = rb.ret_count[u];
      if (count == 0) continue;
      if (mine)
        segs.push_back(Segment{k, u, self + at, nullptr});
      else if (wire.data != nullptr)
        segs.push_back(Segment{k, u, nullptr, wire.data + at});
      else
        segs.push_back(Segment{k, u, send + at, nullptr});
      k += count;
      at += count * l.units[u].cols;
    }
    if (!mine) others = at;
  }
  const int64_t total = k;
  ctx.ParallelFor(0, total, 1024, [&](int64_t k0, int64_t k1) {
    size_t s = static_cast<size_t>(
        std::upper_bound(segs.begin(), segs.end(), k0,
                         [](int64_t v, const Segment& g) { return v < g.k_begin; }) -
        segs.begin() - 1);
    for (int64_t j = k0; j < k1; ++s) {
      const Segment& seg = segs[s];
      const Unit& unit = l.units[seg.unit];
      const Pair& pair = l.pairs[unit.pair];
      const int64_t col = pair.out_offset + unit.col_offset;
      const int64_t seg_end = std::min(k1, s + 1 < segs.size() ? segs[s + 1].k_begin : total);
      for (; j < seg_end; ++j) {
        const int64_t target = rb.ret_target[j];
        const float* g = grad + target * D + col;
        const int64_t at = (j - seg.k_begin) * unit.cols;
        // An encoded row is divided into a row of the thread's, then encoded from there.
        thread_local std::vector<float> row;
        float* dst = seg.dst != nullptr ? seg.dst + at : nullptr;
        if (dst == nullptr && pair.mean) {
          if (row.size() < static_cast<size_t>(unit.cols)) row.resize(unit.cols);
          dst = row.data();
        }
        if (pair.mean) {
          const float div = rb.mean_div[unit.pair * B + target];
          for (int32_t c = 0; c < unit.cols; ++c) dst[c] = div != 0.0f ? g[c] / div : 0.0f;
        } else if (dst != nullptr) {
          std::memcpy(dst, g, sizeof(float) * unit.cols);
        }
        if (seg.dst16 != nullptr)
          wire.encode(pair.mean ? dst : g, static_cast<size_t>(unit.cols), seg.dst16 + at);
      }
    }
  });
}

}  // namespace shardrec::embedding
