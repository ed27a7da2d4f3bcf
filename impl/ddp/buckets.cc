#include "impl/ddp/buckets.h"

namespace shardrec::ddp {

std::vector<std::vector<size_t>> AssignBuckets(std::span<const int64_t> counts,
                                               std::span<const size_t> order,
                                               int64_t bytes_per_element, int64_t first_cap_bytes,
                                               int64_t cap_bytes) {
  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> open;
  int64_t bytes = 0;
  for (size_t i : order) {
    open.push_back(i);
    bytes += counts[i] * bytes_per_element;
    const int64_t cap = buckets.empty() ? first_cap_bytes : cap_bytes;
    if (bytes >= cap) {
      buckets.push_back(std::move(open));
      open.clear();
      bytes = 0;
    }
  }
  if (!open.empty()) buckets.push_back(std::move(open));
  return buckets;
}

std::vector<size_t> SplitCounts(size_t n, int parts) {
  std::vector<size_t> out(static_cast<size_t>(parts), 0);
  const size_t block = parts > 0 ? (n + parts - 1) / parts : 0;
  size_t left = n;
  for (auto& c : out) {
    c = left < block ? left : block;
    left -= c;
  }
  return out;
}

}  // namespace shardrec::ddp
