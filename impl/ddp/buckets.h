// Assignment of gradient tensors to buckets: a pure function, so every rank computes the same
// buckets from the same registration and the rule is tested on its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace shardrec::ddp {

// Walks `order` (tensor indices; each index once) and fills buckets in that order: a tensor joins
// the open bucket, which closes once it holds at least its cap in bytes (first_cap_bytes for the
// first bucket, cap_bytes afterwards). A tensor larger than a cap therefore sits alone or closes
// its bucket; zero-size tensors ride along. Bytes are counts * bytes_per_element.
std::vector<std::vector<size_t>> AssignBuckets(std::span<const int64_t> counts,
                                               std::span<const size_t> order,
                                               int64_t bytes_per_element, int64_t first_cap_bytes,
                                               int64_t cap_bytes);

// Even split of n elements over `parts` ranks for a rank-ordered reduce-scatter: ceil blocks,
// the last ones shorter (or empty).
std::vector<size_t> SplitCounts(size_t n, int parts);

}  // namespace shardrec::ddp
