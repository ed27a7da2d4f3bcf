// Serving lookups: per (feature, table) pair a gather of whole rows accumulated in fp32 straight
// into the output row, with the row decoding chosen once per pair (a template per storage type),
// so the inner loop over columns is a plain vectorisable loop.
#include "impl/serving/lookup.h"

#include <cstring>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/half.h"

namespace shardrec::serving {
namespace {

// acc[c] += w * value(c) for one stored row. kWeighted false adds the value itself (what the
// training kernels do for an unweighted batch; x * 1 would give the same bits, but costs a
// multiply).
template <Storage S, bool kWeighted>
inline void Accumulate(const uint8_t* row, int32_t dim, float w, float* acc) {
  if constexpr (S == Storage::kFp32) {
    const auto* x = reinterpret_cast<const float*>(row);
    for (int32_t c = 0; c < dim; ++c) acc[c] += kWeighted ? w * x[c] : x[c];
  } else if constexpr (S == Storage::kFp16 || S == Storage::kBf16) {
    const auto* x = reinterpret_cast<const uint16_t*>(row);
    for (int32_t c = 0; c < dim; ++c) {
      const float v = S == Storage::kFp16 ? HalfToFloat(x[c]) : BFloat16ToFloat(x[c]);
      acc[c] += kWeighted ? w * v : v;
    }
  } else {
    float scale, bias;
    std::memcpy(&scale, row, 4);
    std::memcpy(&bias, row + 4, 4);
    const uint8_t* q = row + kQuantHeaderBytes;
    for (int32_t c = 0; c < dim; ++c) {
      const uint8_t code = S == Storage::kInt8 ? q[c] : ((q[c / 2] >> (4 * (c % 2))) & 0xF);
      const float v = static_cast<float>(code) * scale + bias;
      acc[c] += kWeighted ? w * v : v;
    }
  }
}

struct Ids {
  const int64_t* v64;
  const int32_t* v32;
  int64_t operator[](size_t i) const { return v64 != nullptr ? v64[i] : v32[i]; }
};

// Resolves an id against the bounds policy: the row to read, or -1 to skip it.
inline Status Resolve(const Model& m, const Table& t, int32_t f, int64_t b, size_t i, int64_t id,
                      int64_t* row) {
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
  return Status::InvalidArgument("feature ", m.features[f], " sample ", b, " value position ", i,
                                 ": id ", id, " is outside table ", t.name, "'s rows [0, ", t.rows,
                                 ")");
}

// One pooled pair over all samples: bag b of feature f sums into out[b * D + pair.out_offset].
template <Storage S, bool kWeighted>
Status PooledPair(const Model& m, const Request& r, const Pair& p, size_t begin, const Ids& ids,
                  float* out) {
  const Table& t = m.tables[p.table];
  const bool mean = t.pooling == Pooling::kMean;
  const int64_t B = r.batch_size;
  size_t pos = begin;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t len = r.lengths[static_cast<size_t>(p.feature) * B + b];
    float* acc = out + b * m.output_dim + p.out_offset;
    std::memset(acc, 0, sizeof(float) * t.dim);
    float div = 0.0f;
    for (size_t i = pos; i < pos + static_cast<size_t>(len); ++i) {
      int64_t row = 0;
      SR_RETURN_IF_ERROR(Resolve(m, t, p.feature, b, i, ids[i], &row));
      if (row < 0) continue;
      const float w = kWeighted ? r.weights[i] : 1.0f;
      Accumulate<S, kWeighted>(t.data + static_cast<uint64_t>(row) * t.row_bytes, t.dim, w, acc);
      div += w;
    }
    if (mean)
      for (int32_t c = 0; c < t.dim; ++c) acc[c] = div != 0.0f ? acc[c] / div : 0.0f;
    pos += static_cast<size_t>(len);
  }
  return Status::Ok();
}

// The values [begin, end) of feature f, one output row each.
template <Storage S, bool kWeighted>
Status SequenceFeature(const Model& m, const Request& r, int32_t f, size_t begin, size_t end,
                       const Ids& ids, float* out) {
  const int32_t ti = m.feature_table[f];
  const int32_t dim = static_cast<int32_t>(m.output_dim);
  const int64_t B = r.batch_size;
  int64_t b = 0;
  size_t bag_end = begin;
  for (size_t i = begin; i < end; ++i) {
    float* acc = out + i * static_cast<size_t>(dim);
    std::memset(acc, 0, sizeof(float) * dim);
    if (ti < 0) continue;
    while (i >= bag_end && b < B) bag_end += r.lengths[static_cast<size_t>(f) * B + b++];
    const Table& t = m.tables[ti];
    int64_t row = 0;
    SR_RETURN_IF_ERROR(Resolve(m, t, f, b - 1, i, ids[i], &row));
    if (row < 0) continue;
    Accumulate<S, kWeighted>(t.data + static_cast<uint64_t>(row) * t.row_bytes, dim,
                             kWeighted ? r.weights[i] : 1.0f, acc);
  }
  return Status::Ok();
}

template <bool kWeighted, typename Fn>
Status Dispatch(Storage s, Fn&& fn) {
  switch (s) {
    case Storage::kFp32:
      return fn.template operator()<Storage::kFp32, kWeighted>();
    case Storage::kFp16:
      return fn.template operator()<Storage::kFp16, kWeighted>();
    case Storage::kBf16:
      return fn.template operator()<Storage::kBf16, kWeighted>();
    case Storage::kInt8:
      return fn.template operator()<Storage::kInt8, kWeighted>();
    case Storage::kInt4:
      return fn.template operator()<Storage::kInt4, kWeighted>();
    case Storage::kAsTrained:
      break;
  }
  return Status::Internal("lookup on an unresolved storage");
}

Status CheckRequest(const Model& m, const Request& r, size_t out_len, const float* out) {
  if (r.num_features != m.features.size())
    return Status::InvalidArgument("batch has ", r.num_features, " features, the model ",
                                   m.features.size());
  if (r.batch_size < 0)
    return Status::InvalidArgument("batch_size ", r.batch_size, " must not be negative");
  const auto B = static_cast<uint64_t>(r.batch_size);
  if (B > (uint64_t{1} << 40) || r.num_lengths != B * r.num_features)
    return Status::InvalidArgument("batch has ", r.num_lengths, " lengths, expected ",
                                   r.num_features, " x ", B);
  if (r.num_lengths > 0 && r.lengths == nullptr)
    return Status::InvalidArgument("batch lengths must not be NULL");
  uint64_t total = 0;
  for (size_t k = 0; k < r.num_lengths; ++k) {
    if (r.lengths[k] < 0)
      return Status::InvalidArgument("feature ", m.features[k / B], " sample ", k % B, ": length ",
                                     r.lengths[k], " is negative");
    total += static_cast<uint64_t>(r.lengths[k]);
  }
  if (total != r.num_values)
    return Status::InvalidArgument("batch lengths sum to ", total, " but num_values is ",
                                   r.num_values);
  if (r.num_values > 0 && r.values == nullptr)
    return Status::InvalidArgument("batch values must not be NULL");
  if ((r.weights == nullptr && r.num_weights != 0) ||
      (r.weights != nullptr && r.num_weights != r.num_values))
    return Status::InvalidArgument("batch has ", r.num_weights, " weights",
                                   r.weights == nullptr ? " and NULL weights" : "", " for ",
                                   r.num_values, " values");
  const size_t need = OutputSize(m, r);
  if (out_len != need)
    return Status::InvalidArgument("out_len is ", out_len, ", the batch's output takes ", need,
                                   " floats");
  if (need > 0 && out == nullptr) return Status::InvalidArgument("out must not be NULL");
  return Status::Ok();
}

}  // namespace

size_t OutputSize(const Model& m, const Request& r) {
  const size_t rows = m.sequence ? r.num_values : static_cast<size_t>(r.batch_size);
  return rows * static_cast<size_t>(m.output_dim);
}

Status Lookup(const Model& m, const Request& r, float* out, size_t out_len) {
  SR_RETURN_IF_ERROR(CheckRequest(m, r, out_len, out));
  const auto B = static_cast<size_t>(r.batch_size);
  std::vector<size_t> begin(m.features.size() + 1, 0);
  for (size_t f = 0; f < m.features.size(); ++f) {
    size_t n = 0;
    for (size_t b = 0; b < B; ++b) n += static_cast<size_t>(r.lengths[f * B + b]);
    begin[f + 1] = begin[f] + n;
  }
  const Ids ids{r.values_int64 ? static_cast<const int64_t*>(r.values) : nullptr,
                r.values_int64 ? nullptr : static_cast<const int32_t*>(r.values)};
  const bool weighted = r.weights != nullptr;
  if (m.sequence) {
    for (size_t f = 0; f < m.features.size(); ++f) {
      const int32_t ti = m.feature_table[f];
      const Storage s = ti >= 0 ? m.tables[ti].storage : Storage::kFp32;
      auto run = [&]<Storage S, bool W>() {
        return SequenceFeature<S, W>(m, r, static_cast<int32_t>(f), begin[f], begin[f + 1], ids,
                                     out);
      };
      SR_RETURN_IF_ERROR(weighted ? Dispatch<true>(s, run) : Dispatch<false>(s, run));
    }
    return Status::Ok();
  }
  for (const Pair& p : m.pairs) {
    auto run = [&]<Storage S, bool W>() {
      return PooledPair<S, W>(m, r, p, begin[p.feature], ids, out);
    };
    const Storage s = m.tables[p.table].storage;
    SR_RETURN_IF_ERROR(weighted ? Dispatch<true>(s, run) : Dispatch<false>(s, run));
  }
  return Status::Ok();
}

}  // namespace shardrec::serving
