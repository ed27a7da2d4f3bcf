// The first step of a data-parallel table's backward, shared by the host collection
// (SparseUpdater::ApplyDataParallel) and the tests of its device twin (kernels/simt/dp_body.h):
// every data-parallel table's dense gradient and touched flags, accumulated from this rank's
// output gradient into one block (the all-reduce's buffer). The block's layout: every table's
// gradient [rows, dim] in Layout::dp_tables order, then every table's flags [rows] in the same
// order (Layout::dp_grad_size floats).
#pragma once

#include <cstddef>
#include <vector>

#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/pair_rows.h"

namespace shardrec::embedding {

// Per table (indexed by table; 0 for the others): where its gradient and its flags start in the
// block, in floats.
struct DpBlockLayout {
  std::vector<size_t> grad_at;
  std::vector<size_t> touch_at;
};
DpBlockLayout MakeDpBlockLayout(const Layout& l);

// Adds every data-parallel id's term into `block` (dp_grad_size floats, cleared by the caller):
// for each pair in Layout::dp_pairs order, sample and id in order, row r of its table gets
// (mean ? g / div : g) * w in every column (g this sample's gradient slice, or the id's output
// row for sequence collections; w 1 when unweighted; nothing for a MEAN bag of divisor 0), and
// its flag becomes 1. A dynamic table's zero row (rows, after translation) adds nothing. With
// `places` (pooled) a pair's gradient rows are read where they say (pair_rows.h).
void AccumulateDataParallel(const Layout& l, const DpBlockLayout& at, const RoutedBatch& rb,
                            const float* grad, float* block, const PairRows* places = nullptr);

}  // namespace shardrec::embedding
