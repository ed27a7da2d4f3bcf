// The per-feature kernels of the serving lookups: per (feature, table) pair the ids resolved,
// then the pooled kernel shared with the training forward (impl/core/kernels/pooled.h) decodes
// each row inside the accumulation and stores each bag once. Sequence lookups decode each row
// with the table's decoder (decode.h; fp32 rows are read in place) and accumulate it into its
// output row.
#include "impl/serving/bag_lookup.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "impl/core/check.h"
#include "impl/core/finite.h"
#include "impl/core/kernels/pooled.h"
#include "impl/core/prefetch.h"
#include "impl/core/row_format.h"
#include "impl/serving/decode.h"

namespace shardrec::serving {
namespace {

// Ids ahead whose rows are prefetched: enough to cover DRAM latency at a few ns per row.
constexpr size_t kPrefetchAhead = 8;

// acc[c] += w * x[c] (kWeighted) or acc[c] += x[c]: one fp32 multiply and add per element, in id
// order, as the training kernels (x * 1 would give the same bits but cost a multiply).
template <bool kWeighted>
inline void Accumulate(const float* __restrict x, int32_t dim, float w, float* __restrict acc) {
  for (int32_t c = 0; c < dim; ++c) acc[c] += kWeighted ? w * x[c] : x[c];
}

// A table's rows as fp32: in place for fp32, else decoded into `buf`.
struct RowReader {
  const Table& t;
  DecodeFn decode;
  float* buf;
  uint8_t* scratch;

  const uint8_t* Address(int64_t row) const {
    return t.data + static_cast<uint64_t>(row) * t.row_bytes;
  }
  void Prefetch(int64_t id) const {
    if (t.dynamic) {
      t.dynamic->index->Prefetch(id);  // the row's address is known only after the probe
      return;
    }
    if (id >= 0 && id < t.rows) core::PrefetchLines(Address(id), static_cast<int64_t>(t.row_bytes));
  }
  const float* Read(int64_t row) const {
    if (decode == nullptr) return reinterpret_cast<const float*>(Address(row));
    decode(Address(row), t.dim, buf, scratch);
    return buf;
  }
};

Status OutOfRange(const Model& m, const Table& t, int32_t f, int64_t b, size_t i, int64_t id) {
  // Worded as the training forward words it (input_dist.cc), so one parser reads both.
  return Status::InvalidArgument("batch: feature '", m.features[f], "' sample ", b,
                                 " (value position ", i, "): id ", id, " is out of range [0, ",
                                 t.rows, ") of table '", t.name, "'");
}

// Resolves an id against the bounds policy (a dynamic table: against its index): the row to read,
// or -1 to skip it.
inline Status Resolve(const Model& m, const Table& t, int32_t f, int64_t b, size_t i, int64_t id,
                      int64_t* row) {
  if (t.dynamic) {
    // Every id is valid; one without a row reads the zero row after the live ones.
    const int64_t found = t.dynamic->index->Find(id);
    *row = found >= 0 ? found : t.rows;
    return Status::Ok();
  }
  if (id >= 0 && id < t.rows) {
    *row = id;
    return Status::Ok();
  }
  switch (m.bounds) {
    case Bounds::kClamp:
      *row = 0;
      return Status::Ok();
    case Bounds::kSkip:
      *row = -1;
      return Status::Ok();
    case Bounds::kError:
      break;
  }
  return OutOfRange(m, t, f, b, i, id);
}

// Whether every id of [begin, end) names a row of a fixed table of `rows` rows: then no bounds
// policy applies and the ids are the rows. An id x is in range when neither x nor rows - 1 - x is
// negative: or-ing their sign bits takes integer subtractions and ors only, which the compiler
// vectorises at every x86-64 level (an unsigned 64-bit comparison it does not before SSE4.2).
template <class Id>
bool AllInRange(const Id* ids, size_t begin, size_t end, int64_t rows) {
  const auto last = static_cast<uint64_t>(rows - 1);
  uint64_t signs = 0;
  for (size_t i = begin; i < end; ++i) {
    const auto x = static_cast<uint64_t>(static_cast<int64_t>(ids[i]));
    signs |= x | (last - x);
  }
  return (signs >> 63) == 0;
}

// One pooled pair over all bags of its feature: bag b sums into out[b * stride + offset].
// A fixed table's ids are its rows as they are (int64 ids read in place, int32 ids widened); in
// memory the kernel checks each bag's ids to be in range just before summing it (where it reads
// them first: a separate pass read each id from memory once more, a fifth of a cache-resident
// lookup at batch 2048), and at the first id out of range the whole pair starts over on the
// resolving path (the bags already written are written again); a tiered table's ids are all
// checked first, as its rows are gathered for the whole pair at once (adding to what the
// request's earlier pairs of the table gathered). The resolving path
// resolves each id (a dynamic table's index probes prefetched a few ids ahead) and leaves skipped
// ids out. Either way the shared pooled kernel (impl/core/kernels/pooled.h) gathers, decodes and
// sums every bag in registers, prefetching rows by the table's row size.
template <bool kWeighted>
Status PooledPair(const Model& m, size_t table, const FeatureBags& fb, const Ids& ids,
                  const float* id_weights, BagScratch* bag, float* out, int64_t stride,
                  int64_t offset) {
  const Table& t = m.tables[table];
  const int64_t B = fb.count;
  const size_t begin = fb.begin, end = fb.end;
  const bool mean = t.pooling == Pooling::kMean;
  const int32_t* lengths = fb.lengths;
  bag->offsets.resize(static_cast<size_t>(B) + 1);
  bag->divisors.resize(static_cast<size_t>(B));
  bag->offsets[0] = 0;
  core::kernels::PooledArgs a;
  a.weights = t.data;
  a.type = t.storage == Storage::kAsTrained ? RowFormat::kFp32 : FormatOf(t.storage);
  a.row_bytes = static_cast<int64_t>(t.row_bytes);
  a.cols = t.dim;
  a.offsets = bag->offsets.data();
  a.id_weights = kWeighted ? id_weights + begin : nullptr;
  a.out = out;
  a.io_offset = offset;
  a.out_stride = stride;
  a.prefetch_distance = core::kernels::PrefetchDistanceFor(t.row_bytes);
  // int8 and int4 rows: code x (weight x scale) per value, weight x bias once per row, within
  // docs/serving.md's bound of the exact sum (serving promises their bound, not their bits).
  a.fold_dequant = true;
  a.prefetch_to_l2 = bag->rows_to_l2 && t.tiered == nullptr;
  static const core::kernels::PooledFn sum = core::kernels::HostPooled();
  bool in_range = !t.dynamic;
  bool summed = false;
  if (in_range) {
    for (int64_t b = 0; b < B; ++b) bag->offsets[b + 1] = bag->offsets[b] + lengths[b];
    if (ids.v64 != nullptr) {
      a.rows = ids.v64 + begin;
    } else {
      bag->rows.resize(end - begin);
      for (size_t i = begin; i < end; ++i) bag->rows[i - begin] = ids.v32[i];
      a.rows = bag->rows.data();
    }
    if (t.tiered) {
      in_range = AllInRange(a.rows, 0, end - begin, t.rows);
    } else {
      int64_t stopped = 0;
      a.stopped_at = &stopped;
      a.check_rows = t.rows;
      a.bag_begin = 0;
      a.bag_end = B;
      sum(a);
      a.stopped_at = nullptr;
      in_range = stopped == B;
      summed = in_range;
    }
    if (in_range && mean) {
      // Added one by one in id order, as the resolving path below adds them.
      for (int64_t b = 0; b < B; ++b) {
        float div = 0.0f;
        for (int64_t i = bag->offsets[b]; i < bag->offsets[b + 1]; ++i)
          div += kWeighted ? a.id_weights[i] : 1.0f;
        bag->divisors[b] = div;
      }
    }
  }
  if (!in_range) {
    bag->rows.resize(end - begin);
    if (kWeighted) bag->weights.resize(end - begin);
    int64_t n = 0;
    size_t pos = begin;
    for (int64_t b = 0; b < B; ++b) {
      const auto len = static_cast<size_t>(lengths[b]);
      float div = 0.0f;
      for (size_t i = pos; i < pos + len; ++i) {
        if (t.dynamic && i + kPrefetchAhead < end)
          t.dynamic->index->Prefetch(ids[i + kPrefetchAhead]);
        int64_t row = 0;
        SR_RETURN_IF_ERROR(Resolve(m, t, fb.feature, b, i, ids[i], &row));
        if (row < 0) continue;
        const float w = kWeighted ? id_weights[i] : 1.0f;
        bag->rows[n] = row;
        if (kWeighted) bag->weights[n] = w;
        ++n;
        div += w;
      }
      bag->offsets[b + 1] = n;
      bag->divisors[b] = div;
      pos += len;
    }
    a.rows = bag->rows.data();
    if (kWeighted) a.id_weights = bag->weights.data();
  }
  if (!summed) {
    if (t.tiered) {  // the request's rows from the row cache or the files, renumbered
      TieredRows::Scratch& gathered = bag->tiered[table];
      SR_RETURN_IF_ERROR(t.tiered->Gather(a.rows, static_cast<size_t>(bag->offsets[B]), &gathered));
      a.weights = gathered.rows.data();
      a.rows = gathered.local.data();
    }
    a.bag_begin = 0;
    a.bag_end = B;
    sum(a);
  }
  if (mean) {
    for (int64_t b = 0; b < B; ++b) {
      float* acc = out + b * stride + offset;
      const float div = bag->divisors[b];
      for (int32_t c = 0; c < t.dim; ++c) acc[c] = div != 0.0f ? acc[c] / div : 0.0f;
    }
  }
  return Status::Ok();
}

// The values of one feature, one output row each; `rows` null: a feature no table reads.
template <bool kWeighted>
Status SequenceFeature(const Model& m, const FeatureBags& fb, const Ids& ids, const float* weights,
                       const RowReader* rows, float* out) {
  const int32_t dim = static_cast<int32_t>(m.output_dim);
  const int64_t B = fb.count;
  int64_t b = 0;
  size_t bag_end = fb.begin;
  for (size_t i = fb.begin; i < fb.end; ++i) {
    float* acc = out + i * static_cast<size_t>(dim);
    std::memset(acc, 0, sizeof(float) * dim);
    if (rows == nullptr) continue;
    if (i + kPrefetchAhead < fb.end) rows->Prefetch(ids[i + kPrefetchAhead]);
    while (i >= bag_end && b < B) bag_end += fb.lengths[b++];
    int64_t row = 0;
    SR_RETURN_IF_ERROR(Resolve(m, rows->t, fb.feature, b - 1, i, ids[i], &row));
    if (row < 0) continue;
    Accumulate<kWeighted>(rows->Read(row), dim, kWeighted ? weights[i] : 1.0f, acc);
  }
  return Status::Ok();
}

template <class Id>
Status FirstOutOfRange(const Model& m, const Table& t, const FeatureBags& fb, const Id* ids) {
  if (AllInRange(ids, fb.begin, fb.end, t.rows)) return Status::Ok();
  size_t pos = fb.begin;
  for (int64_t b = 0; b < fb.count; ++b) {
    for (size_t i = pos; i < pos + static_cast<size_t>(fb.lengths[b]); ++i) {
      const auto id = static_cast<int64_t>(ids[i]);
      if (id < 0 || id >= t.rows) return OutOfRange(m, t, fb.feature, b, i, id);
    }
    pos += static_cast<size_t>(fb.lengths[b]);
  }
  return Status::Ok();
}

}  // namespace

bool RowsComeFromMemory(const Model& m) {
  static const uint64_t llc = [] {
    long bytes = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return bytes > 0 ? static_cast<uint64_t>(bytes) : uint64_t{32} << 20;
  }();
  uint64_t total = 0;
  for (const Table& t : m.tables)
    if (t.tiered == nullptr) total += static_cast<uint64_t>(t.rows) * t.row_bytes;
  return total > llc;
}

DecodeBuffers::DecodeBuffers(const Model& m) {
  int32_t widest = 0;
  for (const Table& t : m.tables) widest = std::max(widest, t.dim);
  buf.resize(static_cast<size_t>(widest));
  scratch.resize(static_cast<size_t>(widest) + 1);
}

Status PooledBags(const Model& m, int32_t table, const FeatureBags& bags, const Ids& ids,
                  const float* weights, BagScratch* scratch, float* out, int64_t stride,
                  int64_t offset) {
  const auto ti = static_cast<size_t>(table);
  if (m.tables[ti].tiered && scratch->tiered.size() < m.tables.size())
    scratch->tiered.resize(m.tables.size());
  return weights != nullptr
             ? PooledPair<true>(m, ti, bags, ids, weights, scratch, out, stride, offset)
             : PooledPair<false>(m, ti, bags, ids, weights, scratch, out, stride, offset);
}

Status SequenceBags(const Model& m, const FeatureBags& bags, const Ids& ids, const float* weights,
                    DecodeBuffers* buffers, float* out) {
  const int32_t ti = m.feature_table[bags.feature];
  if (ti < 0) return SequenceFeature<false>(m, bags, ids, nullptr, nullptr, out);
  const Table& t = m.tables[ti];
  const RowReader rows{t, DecoderFor(t.storage), buffers->buf.data(), buffers->scratch.data()};
  return weights != nullptr ? SequenceFeature<true>(m, bags, ids, weights, &rows, out)
                            : SequenceFeature<false>(m, bags, ids, nullptr, &rows, out);
}

Status CheckIdsInRange(const Model& m, int32_t table, const FeatureBags& bags, const Ids& ids) {
  const Table& t = m.tables[table];
  if (t.dynamic) return Status::Ok();
  return ids.v64 != nullptr ? FirstOutOfRange(m, t, bags, ids.v64)
                            : FirstOutOfRange(m, t, bags, ids.v32);
}

Status CheckValuesAndWeights(const Request& r) {
  if (r.num_values > 0 && r.values == nullptr)
    return Status::InvalidArgument("batch values must not be NULL");
  if ((r.weights == nullptr && r.num_weights != 0) ||
      (r.weights != nullptr && r.num_weights != r.num_values))
    return Status::InvalidArgument("batch has ", r.num_weights, " weights",
                                   r.weights == nullptr ? " and NULL weights" : "", " for ",
                                   r.num_values, " values");
  if (r.weights != nullptr) {
    // A NaN or infinite weight would be served as NaN or infinite outputs; training refuses them
    // by default (the non-finite policy), and so does a lookup.
    const size_t i = FirstNonFinite(r.weights, r.num_weights);
    if (i < r.num_weights)
      return Status::InvalidArgument("batch weight at position ", i, " is ", r.weights[i],
                                     ": per-id weights must be finite");
  }
  return Status::Ok();
}

}  // namespace shardrec::serving
