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
#include "impl/optim/optimizer.h"

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

// Runs with hot rows: row 5 in every bag of the first run (a row of hundreds of ids), row 9 in
// 40 bags (two chunks), plus the usual duplicates; the last run is a sequence run.
struct BackwardCase {
  std::vector<Bags> bags;
  std::vector<BagRun> runs;
  std::vector<float> grads;
  int64_t stride = 0;

  BackwardCase(int32_t cols, bool weighted, uint32_t seed) {
    stride = cols + 2;
    bags.push_back(MakeBags(300, 6, 40, seed, 7, 50));
    bags.push_back(MakeBags(80, 4, 40, seed + 1, 0, 0));
    bags.push_back(MakeBags(1, 50, 40, seed + 2, 0, 0));
    for (int64_t b = 0; b < 300; ++b)
      if (bags[0].offsets[b + 1] > bags[0].offsets[b]) bags[0].rows[bags[0].offsets[b + 1] - 1] = 5;
    for (int64_t b = 0; b < 40; ++b)
      if (bags[1].offsets[b + 1] > bags[1].offsets[b]) bags[1].rows[bags[1].offsets[b]] = 9;
    int64_t at = 0;
    for (size_t r = 0; r < bags.size(); ++r) {
      BagRun run =
          r < 2 ? bags[r].Run(weighted)
                : BagRun{nullptr, static_cast<int64_t>(bags[r].rows.size()), bags[r].rows.data(),
                         weighted ? bags[r].weights.data() : nullptr, 0};
      run.io_offset = at * stride;
      at += run.num_bags + 3;
      runs.push_back(run);
    }
    grads.resize(at * stride);
    std::mt19937 rng(seed * 7 + 1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& g : grads) g = u(rng);
  }
  int64_t num_ids() const {
    int64_t n = 0;
    for (const BagRun& r : runs) n += r.num_ids();
    return n;
  }
};

struct Shard {
  std::vector<float> w32;
  std::vector<uint16_t> w16;
  std::vector<std::vector<float>> states;
  optim::ShardParams p;

  Shard(const Shard& o) : w32(o.w32), w16(o.w16), states(o.states), p(o.p) { Rebind(); }
  void Rebind() {
    p.weights = p.dtype == DType::kFloat32 ? static_cast<void*>(w32.data()) : w16.data();
    for (size_t i = 0; i < states.size(); ++i) p.states[i] = states[i].data();
  }
  Shard(const optim::OptimizerConfig& cfg, DType dt, int64_t rows, int32_t cols, uint32_t seed) {
    Table t(rows, cols, cols, dt, seed);
    w32 = t.f32;
    w16 = t.u16;
    p.dtype = dt;
    p.weights = dt == DType::kFloat32 ? static_cast<void*>(w32.data()) : w16.data();
    p.rows = rows;
    p.cols = cols;
    p.stride = cols;
    p.table_key = 0xabcdef;
    p.row_offset = 1000;
    p.col_offset = 64;
    for (auto& s : optim::StateSpecs(cfg.type))
      states.emplace_back(s.row_wise ? rows : rows * cols);
    for (auto& s : states) {
      for (size_t i = 0; i < s.size(); ++i) s[i] = 0.01f * static_cast<float>(i % 13);
      p.states.push_back(s.data());
    }
  }
  // Weights and states, bit for bit (fp32 vectors compare as floats: the tests never hold NaN).
  bool operator==(const Shard& o) const {
    return w32 == o.w32 && w16 == o.w16 && states == o.states;
  }
};

}  // namespace shardrec::embedding::kernels
