// Inputs shared by the single-source kernel tests: tables of any dtype and bags with empty, short
// and long members and frequent duplicate ids.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "impl/core/dtype.h"
#include "impl/core/half.h"
#include "impl/embedding/kernels/kernels.h"

namespace shardrec::embedding::kernels {

struct Table {
  std::vector<float> f32;
  std::vector<uint16_t> u16;
  DType dtype;
  int64_t rows, stride;
  int32_t cols;

  Table(int64_t rows_, int32_t cols_, int64_t stride_, DType dt, uint32_t seed)
      : dtype(dt), rows(rows_), stride(stride_), cols(cols_) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(rows * stride));
    for (float& x : v) x = u(rng);
    if (dt == DType::kFloat32) {
      f32 = v;
    } else {
      u16.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        u16[i] = dt == DType::kFloat16 ? FloatToHalf(v[i]) : FloatToBFloat16(v[i]);
    }
  }
  WeightsView View() const {
    const void* p = dtype == DType::kFloat32 ? static_cast<const void*>(f32.data()) : u16.data();
    return WeightsView{p, dtype, rows, cols, stride};
  }
  float At(int64_t r, int64_t c) const {
    const int64_t i = r * stride + c;
    if (dtype == DType::kFloat32) return f32[i];
    return dtype == DType::kFloat16 ? HalfToFloat(u16[i]) : BFloat16ToFloat(u16[i]);
  }
};

struct Bags {
  std::vector<int64_t> offsets{0};
  std::vector<int64_t> rows;
  std::vector<float> weights;
  int64_t num_bags() const { return static_cast<int64_t>(offsets.size()) - 1; }
  BagRun Run(bool weighted) const {
    return BagRun{offsets.data(), num_bags(), rows.data(), weighted ? weights.data() : nullptr, 0};
  }
};

// Bag lengths 0..max_len (every 7th empty), every `long_every`-th bag `long_len` ids long (0:
// none).
inline Bags MakeBags(int64_t num_bags, int max_len, int64_t num_rows, uint32_t seed, int long_every,
                     int long_len) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  Bags b;
  for (int64_t i = 0; i < num_bags; ++i) {
    int len = static_cast<int>(rng() % (max_len + 1));
    if (i % 7 == 3) len = 0;
    if (long_every > 0 && i % long_every == long_every - 1) len = long_len;
    for (int k = 0; k < len; ++k) {
      b.rows.push_back(static_cast<int64_t>(rng() % num_rows));
      b.weights.push_back(u(rng));
    }
    b.offsets.push_back(static_cast<int64_t>(b.rows.size()));
  }
  return b;
}

}  // namespace shardrec::embedding::kernels
