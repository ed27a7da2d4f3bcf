// Where each pair's pooled rows lie when the combine, the gradient's packing and the
// data-parallel accumulation do not use the plain [rows, output_dim] buffer: a VBE batch
// (vbe.h) places a feature's B_f rows feature-major, in the caller's buffer or in the step's
// scratch, so that no padded P-row output or gradient is written, copied or read.
#pragma once

#include <cstdint>
#include <vector>

namespace shardrec::embedding {

struct PairRows {
  struct Place {
    bool aux = false;    // in `aux` (the step's scratch), else in the caller's buffer
    int64_t offset = 0;  // floats from the buffer's start to row 0's first column of the pair
    int64_t stride = 0;  // floats from one row to the next
    int64_t rows = 0;    // rows with a place (the feature's B_f): later bags are empty
    int64_t cols = 0;    // the pair's columns (a span's: its pairs' together)
  };
  std::vector<Place> pairs;  // per pair of the layout
  // The places of adjacent pairs (same buffer, stride and rows, columns side by side) merged,
  // in pair order: what the finiteness check of the gradient read in place walks, one span per
  // row instead of one per pair.
  std::vector<Place> spans;
  // The scratch the `aux` places are in: owned by the collection, set for the call that uses it.
  float* aux = nullptr;

  float* Row(float* main, int32_t p, int64_t b) const {
    const Place& at = pairs[static_cast<size_t>(p)];
    return (at.aux ? aux : main) + at.offset + b * at.stride;
  }
  const float* Row(const float* main, int32_t p, int64_t b) const {
    const Place& at = pairs[static_cast<size_t>(p)];
    return (at.aux ? aux : main) + at.offset + b * at.stride;
  }
};

}  // namespace shardrec::embedding
