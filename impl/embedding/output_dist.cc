// Output distribution: lookups into the return message, the return exchange behind the lookups
// of this rank's own samples, and the combine on the sample side.
#include "impl/embedding/output_dist.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "impl/embedding/host_reduce.h"
#include "impl/embedding/step_state.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

namespace {

// Rows [r0, r1) of `cols` floats, `stride` apart from `first`, set to zero.
void ZeroRows(float* first, int64_t stride, int64_t cols, int64_t r0, int64_t r1) {
  if (r1 <= r0) return;
  if (stride == cols) {
    std::memset(first + r0 * stride, 0, sizeof(float) * static_cast<size_t>((r1 - r0) * cols));
    return;
  }
  for (int64_t r = r0; r < r1; ++r)
    std::memset(first + r * stride, 0, sizeof(float) * static_cast<size_t>(cols));
}

// A plain output as places: pair p's rows at its columns of the [rows, D] buffer, so that one rule
// (CombineInit) serves it and a VBE batch's places (PairRows) alike.
PairRows PlainPlaces(const Layout& l, int64_t rows) {
  PairRows places;
  places.pairs.reserve(l.pairs.size());
  for (const Pair& pair : l.pairs)
    places.pairs.push_back(
        {false, pair.out_offset, l.output_dim, rows, l.plan->tables[pair.table].dim});
  return places;
}

// How the combine initialises its places without zeroing what it then writes: a unit that is the
// first, in the combine's order, to reach its columns of its pair's place writes its rows there
// (0.0f + row, the bits of zero-then-add) and zeroes only the place's rows it does not return;
// later units add in the same order as before. The columns no first unit reaches are zeroed,
// except a data-parallel pair's when its lookup writes them whole (pooled, on the host).
// A unit is first only when no earlier unit reached any of its columns: a sequence output's pairs
// share its dim columns (each pair owns rows), so a table split into other column blocks than an
// earlier one's would otherwise be first for part of them and zero the earlier table's rows.
struct CombineInit {
  std::vector<uint8_t> first;         // per unit
  std::vector<PairRows::Place> zero;  // the pieces of places no first unit reaches, merged
};

void PlanCombineInit(const Layout& l, const PairRows& places, bool dp_writes_columns,
                     CombineInit* init) {
  // Pooled pairs own disjoint columns of the plain output and sequence pairs share its columns,
  // so both index one map of D columns: `reached` by any unit so far, `covered` by a first unit.
  std::vector<uint8_t> reached(static_cast<size_t>(l.output_dim), 0);
  std::vector<uint8_t> covered(static_cast<size_t>(l.output_dim), 0);
  init->first.assign(l.units.size(), 0);
  for (int32_t d = 0; d < l.world; ++d) {
    for (int32_t u : l.units_to_rank[d]) {
      const Unit& unit = l.units[u];
      const int64_t at = l.pairs[unit.pair].out_offset + unit.col_offset;
      uint8_t* r = reached.data() + at;
      const bool first = std::none_of(r, r + unit.cols, [](uint8_t v) { return v != 0; });
      std::fill(r, r + unit.cols, uint8_t{1});
      if (!first) continue;
      std::fill(covered.data() + at, covered.data() + at + unit.cols, uint8_t{1});
      init->first[u] = 1;
    }
  }
  if (dp_writes_columns && !l.sequence) {
    for (int32_t p : l.dp_pairs) {
      const Pair& pair = l.pairs[p];
      uint8_t* c = covered.data() + pair.out_offset;
      std::fill(c, c + l.plan->tables[pair.table].dim, uint8_t{1});
    }
  }
  init->zero.clear();
  for (size_t p = 0; p < l.pairs.size(); ++p) {
    const PairRows::Place& at = places.pairs[p];
    if (at.rows == 0) continue;
    const uint8_t* c = covered.data() + l.pairs[p].out_offset;
    for (int64_t k = 0; k < at.cols;) {
      if (c[k] != 0) {
        ++k;
        continue;
      }
      const int64_t begin = k;
      while (k < at.cols && c[k] == 0) ++k;
      PairRows::Place piece = at;
      piece.offset += begin;
      piece.cols = k - begin;
      // Adjacent pieces (same buffer, stride and rows, columns side by side) zero as one.
      if (!init->zero.empty()) {
        PairRows::Place& last = init->zero.back();
        if (last.aux == piece.aux && last.stride == piece.stride && last.rows == piece.rows &&
            last.offset + last.cols == piece.offset) {
          last.cols += piece.cols;
          continue;
        }
      }
      init->zero.push_back(piece);
    }
  }
}

}  // namespace

void OwnRowsDirect(const Layout& l, const RoutedBatch& rb, float* out, const PairRows* places,
                   DirectRows* direct) {
  direct->unit.assign(l.units.size(), 0);
  direct->runs.clear();
  const int64_t B = rb.batch_size;
  if (l.sequence || out == nullptr || B == 0) return;
  PairRows plain;
  if (places == nullptr) plain = PlainPlaces(l, B);
  const PairRows& at_rows = places != nullptr ? *places : plain;
  CombineInit init;
  PlanCombineInit(l, at_rows, /*dp_writes_columns=*/false, &init);
  // The own block holds this rank's units in order, ret_count rows each (UnpackInput). A place's
  // later bags are empty, so as many returned rows as its rows are each of its rows, in order.
  auto at = static_cast<int64_t>(rb.ret_self_offset);
  for (int32_t u : l.units_to_rank[l.rank]) {
    const Unit& unit = l.units[u];
    const int64_t count = rb.ret_count[u];
    const PairRows::Place& place = at_rows.pairs[static_cast<size_t>(unit.pair)];
    if (init.first[u] != 0 && count > 0 && count == place.rows) {
      direct->unit[u] = 1;
      direct->runs.push_back(
          {at, place.aux ? at_rows.aux : out, place.offset + unit.col_offset, place.stride});
    }
    at += count * unit.cols;
  }
}

Status LookupToSend(const ExecContext& ctx, const Layout& l, ParamStore& params,
                    const RoutedBatch& rb, std::vector<kernels::LookupJob>* jobs, float* send,
                    const WireRows& wire, RunSet which, const DirectRows* direct) {
  const bool any_direct = direct != nullptr && !direct->runs.empty();
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
      if (any_direct && !travels) {
        const auto it =
            std::lower_bound(direct->runs.begin(), direct->runs.end(), run.io_offset,
                             [](const DirectRows::Run& r, int64_t io) { return r.io < io; });
        if (it != direct->runs.end() && it->io == run.io_offset) {
          job.out = it->out;
          job.run.io_offset = it->offset;
          job.out_stride = it->stride;
        }
      }
      jobs->push_back(job);
    }
  }
  return kernels::Lookup(ctx, *jobs);
}

Status CombineOutput(const ExecContext& ctx, const Layout& l, ParamStore& params,
                     const RoutedBatch& rb, const float* recv, const float* self,
                     std::vector<kernels::LookupJob>* jobs, float* out, DataParallelLookup* device,
                     const WireRows& wire, const PairRows* places, const uint8_t* written) {
  const int64_t D = l.output_dim;
  const int64_t rows = l.sequence ? rb.num_values : rb.batch_size;
  // A plain output is its pairs' places with row stride D; the first units write their places
  // rather than zeroing them to add into (CombineInit).
  PairRows plain;
  if (places == nullptr) plain = PlainPlaces(l, rows);
  const PairRows& at_rows = places != nullptr ? *places : plain;
  CombineInit init;
  PlanCombineInit(l, at_rows, device == nullptr, &init);
  // In parallel over output rows. Each unit's returned rows target increasing output rows, so a
  // chunk finds its part of every unit by binary search; units are added in their fixed order,
  // so row-split partials sum in the same order for every thread count.
  ctx.ParallelFor(0, rows, 64, [&](int64_t r0, int64_t r1) {
    for (const PairRows::Place& z : init.zero)
      ZeroRows((z.aux ? at_rows.aux : out) + z.offset, z.stride, z.cols, r0, std::min(r1, z.rows));
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
        if (written != nullptr && written[u] != 0) {
          targets += count;
          at += count * unit.cols;
          continue;
        }
        const PairRows::Place& place = at_rows.pairs[static_cast<size_t>(unit.pair)];
        float* base = at_rows.Row(out, unit.pair, 0) + unit.col_offset;
        const int64_t* lo = std::lower_bound(targets, targets + count, r0);
        const int64_t* hi = std::lower_bound(lo, targets + count, r1);
        const bool first = init.first[u] != 0;
        // A first unit's columns are set on rows [r0, next): the rows it skips are zeroed.
        int64_t next = r0;
        for (const int64_t* t = lo; t < hi; ++t) {
          const int64_t from = at + (t - targets) * unit.cols;
          float* dst = base + *t * place.stride;
          const bool write = first && *t >= next;
          if (write) {
            ZeroRows(base, place.stride, unit.cols, next, *t);
            next = *t + 1;
          }
          if (encoded) {
            if (write) std::memset(dst, 0, sizeof(float) * static_cast<size_t>(unit.cols));
            wire.add(wire.data + from, static_cast<size_t>(unit.cols), dst);
            continue;
          }
          const float* s = (mine ? self : recv) + from;
          if (write) {
            // 0.0f + s[c], not s[c]: a -0.0f row reads +0.0f as zero-then-add gave.
            for (int32_t c = 0; c < unit.cols; ++c) dst[c] = 0.0f + s[c];
          } else {
            for (int32_t c = 0; c < unit.cols; ++c) dst[c] += s[c];
          }
        }
        if (first) ZeroRows(base, place.stride, unit.cols, next, std::min(r1, place.rows));
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
    if (!l.sequence && places != nullptr) {
      // Only the bags that have a place: the later ones are empty.
      const PairRows::Place& at = places->pairs[static_cast<size_t>(l.dp_pairs[i])];
      jobs->push_back(kernels::LookupJob{params.View(ls),
                                         {offsets, at.rows, rb.dp_rows.data(), bw, at.offset},
                                         at.aux ? places->aux : out,
                                         at.stride});
      continue;
    }
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
  DivideMeans(ctx, l, rb, out, places);
  return Status::Ok();
}

void DivideMeans(const ExecContext& ctx, const Layout& l, const RoutedBatch& rb, float* out,
                 const PairRows* places) {
  if (l.sequence) return;
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  const BagIndex bags = BagIndex::Plain(B);
  ctx.ParallelFor(0, B, 64, [&](int64_t b0, int64_t b1) {
    for (size_t p = 0; p < l.pairs.size(); ++p) {
      const Pair& pair = l.pairs[p];
      if (!pair.mean) continue;
      const int32_t dim = l.plan->tables[pair.table].dim;
      const int64_t end = places == nullptr ? b1 : std::min(b1, places->pairs[p].rows);
      for (int64_t b = b0; b < end; ++b) {
        const float div = rb.mean_div[bags.bag(static_cast<int64_t>(p), b)];
        float* dst = places == nullptr ? out + b * D + pair.out_offset
                                       : places->Row(out, static_cast<int32_t>(p), b);
        for (int32_t c = 0; c < dim; ++c) dst[c] = div != 0.0f ? dst[c] / div : 0.0f;
      }
    }
  });
}

size_t SizeReturnBuffers(StepState& s, const RoutedBatch& rb) {
  // Backward writes the gradient message into these (PackGradients), so they keep their sizes.
  s.ret_send.resize(rb.ret_floats_total);
  size_t recv_total = 0;
  for (size_t v : ReturnRecvCounts(rb)) recv_total += v;
  s.ret_recv.resize(recv_total);
  return recv_total;
}

namespace {

// The lookups and the return exchange: the travelling rows first, sent by the communication
// worker while this thread looks up the rows of its own samples.
Status LookupAndReturn(StepState& s, RoutedBatch& rb, HostReduce* reduce, DirectRows* direct) {
  const size_t recv_total = SizeReturnBuffers(s, rb);
  const comm::Encoding enc = s.options.forward_encoding;
  const bool in_kernels = WireInKernels(s.layout, enc);
  if (in_kernels) {
    // The travelling rows are encoded by the lookups and decoded by the combine (WireRows).
    if (s.wire.send.size() < rb.ret_self_offset) s.wire.send.resize(rb.ret_self_offset);
    if (s.wire.recv.size() < recv_total) s.wire.recv.resize(recv_total);
  }
  if (s.layout.world == 1) {
    // A single rank looks up only its own samples, which never travel (SelfRows); those that can
    // go straight to the output do (no exchange can fail after them).
    ScopedTimer phase(&s.timings.lookup_seconds);
    return LookupToSend(s.exec, s.layout, s.params, rb, &s.jobs, s.ret_send.data(), {},
                        RunSet::kAll, direct);
  }
  auto exchange = [&s, &rb, in_kernels, enc, reduce] {
    if (enc == comm::Encoding::kFp32 && reduce != nullptr && reduce->active())
      return reduce->Forward(*s.comm, rb, s.ret_send.data(), s.ret_recv.data());
    if (in_kernels)
      return s.comm->AllToAllV(s.wire.send.data(), ReturnSendCounts(rb), s.wire.recv.data(),
                               ReturnRecvCounts(rb), comm::WireType(enc));
    return comm::EncodedAllToAllV(*s.comm, enc, s.ret_send.data(), ReturnSendCounts(rb),
                                  s.ret_recv.data(), ReturnRecvCounts(rb), &s.wire);
  };
  // The rows that travel are looked up first and sent by the background worker while this thread
  // looks up the rows of its own samples, which stay here: the exchange (and the wait for the
  // slowest rank) hides behind that lookup.
  WireRows wire;
  if (in_kernels) {
    wire.data = s.wire.send.data();
    wire.encode = comm::EncoderFor(enc);
  }
  {
    ScopedTimer phase(&s.timings.lookup_seconds);
    SR_RETURN_IF_ERROR(LookupToSend(s.exec, s.layout, s.params, rb, &s.jobs, s.ret_send.data(),
                                    wire, RunSet::kTravelling));
  }
  double worker_seconds = 0;
  std::shared_ptr<comm::Work> sent = s.worker->Submit([&exchange, &worker_seconds] {
    ScopedTimer t(&worker_seconds);
    return exchange();
  });
  Status own;
  try {
    ScopedTimer phase(&s.timings.lookup_seconds);
    own = LookupToSend(s.exec, s.layout, s.params, rb, &s.jobs, s.ret_send.data(), wire,
                       RunSet::kOwn);
  } catch (...) {
    (void)sent->Wait();  // the worker reads this frame's buffers: it finishes first
    throw;
  }
  Status exchanged;
  double waited = 0;
  {
    ScopedTimer phase(&s.timings.output_dist_seconds);
    ScopedTimer t(&waited);
    exchanged = sent->Wait();
  }
  // The exchange's time is the worker's (the wait lies within it): collective time is the union
  // of the two, and the output distribution phase only what this thread waited.
  s.timings.comm_seconds += std::max(worker_seconds, waited);
  s.timings.embedding_comm_seconds += worker_seconds;
  return own.ok() ? exchanged : own;
}

}  // namespace

Status LookupReturnAndCombine(StepState& s, RoutedBatch& rb, float* out, const Status& local,
                              HostReduce* reduce) {
  // At world 1 the own rows that can go straight to an accepted output (or its places) do
  // (DirectRows).
  DirectRows direct;
  if (s.layout.world == 1 && local.ok()) OwnRowsDirect(s.layout, rb, out, s.pair_rows, &direct);
  Status st = LookupAndReturn(s, rb, reduce, &direct);
  if (!st.ok() || !local.ok()) return st;
  ScopedTimer phase(&s.timings.output_dist_seconds);
  WireRows wire;
  if (WireInKernels(s.layout, s.options.forward_encoding)) {
    wire.data = s.wire.recv.data();
    wire.add = comm::DecodeAdderFor(s.options.forward_encoding);
  }
  return CombineOutput(s.exec, s.layout, s.params, rb, s.ret_recv.data(), s.SelfRows(rb), &s.jobs,
                       out, nullptr, wire, s.pair_rows,
                       direct.runs.empty() ? nullptr : direct.unit.data());
}

}  // namespace shardrec::embedding
