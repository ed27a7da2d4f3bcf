// Where a dynamic table's id lives: the documented, fixed hash that picks its row block
// (docs/dynamic-tables.md), shared by the routing and the tests' reference.
#pragma once

#include <cstdint>

namespace shardrec::embedding::dynamic {

// One splitmix64 step (Steele, Lea, Flood 2014: the golden-gamma increment, then the mixing
// function): a bijection of 64-bit values whose output
// bits each depend on every input bit, so consecutive ids spread evenly over the blocks. Part of
// the format: changing it moves every row of every row-wise dynamic table.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The row block (of `blocks`, >= 1) holding id `id`.
constexpr int32_t BlockOfId(int64_t id, int32_t blocks) {
  return static_cast<int32_t>(Mix64(static_cast<uint64_t>(id)) % static_cast<uint64_t>(blocks));
}

}  // namespace shardrec::embedding::dynamic
