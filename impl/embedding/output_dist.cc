// Output distribution: lookups into the return message, the combine on the sample side, and the
// gradient packing of backward.
#include "impl/embedding/output_dist.h"

#include <cstring>

namespace shardrec::embedding {

Status LookupToSend(const ExecContext& ctx, const Layout& l, ParamStore& params,
                    const RoutedBatch& rb, std::vector<kernels::LookupJob>* jobs, float* send) {
  jobs->clear();
  for (size_t i = 0; i < l.local.size(); ++i) {
    const LocalShard& ls = l.local[i];
    const kernels::WeightsView w = params.View(ls);
    for (const kernels::BagRun& run : rb.shards[i].runs)
      jobs->push_back(kernels::LookupJob{w, run, send, ls.cols});
  }
  return kernels::Lookup(ctx, *jobs);
}

Status CombineOutput(const ExecContext& ctx, const Layout& l, ParamStore& params,
                     const RoutedBatch& rb, const float* recv,
                     std::vector<kernels::LookupJob>* jobs, float* out) {
  const int64_t D = l.output_dim;
  const size_t rows = static_cast<size_t>(l.sequence ? rb.num_values : rb.batch_size);
  if (rows > 0) std::memset(out, 0, sizeof(float) * rows * static_cast<size_t>(D));
  const float* src = recv;
  size_t k = 0;
  for (int32_t d = 0; d < l.world; ++d) {
    for (int32_t u : l.units_to_rank[d]) {
      const Unit& unit = l.units[u];
      const int64_t col = l.pairs[unit.pair].out_offset + unit.col_offset;
      for (int64_t j = 0; j < rb.ret_count[u]; ++j, ++k) {
        float* dst = out + rb.ret_target[k] * D + col;
        for (int32_t c = 0; c < unit.cols; ++c) dst[c] += src[c];
        src += unit.cols;
      }
    }
  }
  const int64_t B = rb.batch_size;
  jobs->clear();
  for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
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
  if (l.sequence) return Status::Ok();
  for (size_t p = 0; p < l.pairs.size(); ++p) {
    const Pair& pair = l.pairs[p];
    if (!pair.mean) continue;
    const int32_t dim = l.plan->tables[pair.table].dim;
    for (int64_t b = 0; b < B; ++b) {
      const float div = rb.mean_div[p * B + b];
      float* dst = out + b * D + pair.out_offset;
      for (int32_t c = 0; c < dim; ++c) dst[c] = div != 0.0f ? dst[c] / div : 0.0f;
    }
  }
  return Status::Ok();
}

void PackGradients(const Layout& l, const RoutedBatch& rb, const float* grad, float* send) {
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  float* dst = send;
  size_t k = 0;
  for (int32_t d = 0; d < l.world; ++d) {
    for (int32_t u : l.units_to_rank[d]) {
      const Unit& unit = l.units[u];
      const Pair& pair = l.pairs[unit.pair];
      const int64_t col = pair.out_offset + unit.col_offset;
      for (int64_t j = 0; j < rb.ret_count[u]; ++j, ++k) {
        const int64_t target = rb.ret_target[k];
        const float* g = grad + target * D + col;
        if (pair.mean) {
          const float div = rb.mean_div[unit.pair * B + target];
          for (int32_t c = 0; c < unit.cols; ++c) dst[c] = div != 0.0f ? g[c] / div : 0.0f;
        } else {
          std::memcpy(dst, g, sizeof(float) * unit.cols);
        }
        dst += unit.cols;
      }
    }
  }
}

}  // namespace shardrec::embedding
