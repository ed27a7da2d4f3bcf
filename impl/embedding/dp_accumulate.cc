// The host accumulation of data-parallel gradients (dp_accumulate.h). Its order of additions is
// the one the device twin (kernels/simt/dp_body.h) reproduces: per element, one term per id in
// increasing id position, from +0.
#include "impl/embedding/dp_accumulate.h"

namespace shardrec::embedding {

DpBlockLayout MakeDpBlockLayout(const Layout& l) {
  const auto& plan = *l.plan;
  DpBlockLayout at;
  at.grad_at.assign(plan.tables.size(), 0);
  at.touch_at.assign(plan.tables.size(), 0);
  size_t off = 0;
  for (int32_t t : l.dp_tables) {
    at.grad_at[t] = off;
    off += static_cast<size_t>(plan.tables[t].rows) * plan.tables[t].dim;
  }
  for (int32_t t : l.dp_tables) {
    at.touch_at[t] = off;
    off += static_cast<size_t>(plan.tables[t].rows);
  }
  return at;
}

void AccumulateDataParallel(const Layout& l, const DpBlockLayout& at, const RoutedBatch& rb,
                            const float* grad, float* block, const PairRows* places) {
  const auto& plan = *l.plan;
  const int64_t D = l.output_dim;
  const int64_t B = rb.batch_size;
  for (size_t i = 0; i < l.dp_pairs.size(); ++i) {
    const int32_t p = l.dp_pairs[i];
    const Pair& pair = l.pairs[p];
    const int32_t dim = plan.tables[pair.table].dim;
    const int64_t rows = plan.tables[pair.table].rows;
    float* tg = block + at.grad_at[pair.table];
    float* touched = block + at.touch_at[pair.table];
    const int64_t* offsets = rb.dp_offsets.data() + rb.dp_offsets_begin[i];
    const bool weighted = !rb.dp_weights.empty();
    for (int64_t b = 0; b < B; ++b) {
      const float div =
          pair.mean ? rb.mean_div[BagIndex::Plain(B).bag(static_cast<int64_t>(p), b)] : 1.0f;
      for (int64_t j = offsets[b]; j < offsets[b + 1]; ++j) {
        const int64_t row = rb.dp_rows[j];
        // A dynamic table's zero row (row == rows: an id without a row) has no place in the
        // block: its gradient is dropped, as the sharded tables drop it.
        if (row >= rows) continue;
        const int64_t target = l.sequence ? rb.dp_pos[j] : b;
        const float* g =
            places == nullptr ? grad + target * D + pair.out_offset : places->Row(grad, p, b);
        const float w = weighted ? rb.dp_weights[j] : 1.0f;
        float* dst = tg + row * dim;
        touched[row] = 1.0f;
        if (div == 0.0f) continue;
        for (int32_t c = 0; c < dim; ++c) dst[c] += (pair.mean ? g[c] / div : g[c]) * w;
      }
    }
  }
}

}  // namespace shardrec::embedding
