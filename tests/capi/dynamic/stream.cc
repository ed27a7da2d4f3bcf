// The stream of the dynamic checkpoint and delta tests (stream.h).
#include "tests/capi/dynamic/stream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace shardrec::testing {

Stream MakeStream(const DynScenario& s, int64_t dim, int32_t steps) {
  Stream st;
  std::mt19937_64 gen(77);
  const int32_t table_of[3] = {0, 1, 1};
  for (int32_t step = 0; step < steps; ++step) {
    RefBatch b;
    b.batch_size = kGlobalBatch;
    for (int32_t f = 0; f < 3; ++f) {
      const auto& pool = s.pools[table_of[f]];
      for (int64_t i = 0; i < kGlobalBatch; ++i) {
        const int32_t len = static_cast<int32_t>(gen() % 4);
        b.lengths.push_back(len);
        for (int32_t k = 0; k < len; ++k) {
          const size_t a = gen() % pool.size(), c = gen() % pool.size();
          b.ids.push_back(pool[std::min(a, c)]);  // skewed: counts and recency differ
        }
      }
    }
    st.batches.push_back(std::move(b));
    std::vector<float> g(static_cast<size_t>(kGlobalBatch * dim));
    for (float& x : g) x = static_cast<float>(static_cast<int64_t>(gen() % 2001) - 1000) / 1000.0f;
    st.grads.push_back(std::move(g));
  }
  const int64_t n = static_cast<int64_t>(s.pools[0].size());
  st.probe.batch_size = n;
  for (int32_t f = 0; f < 3; ++f) {
    for (int64_t i = 0; i < n; ++i) {
      st.probe.lengths.push_back(f == 2 ? 0 : 1);
      if (f < 2) st.probe.ids.push_back(s.pools[f][static_cast<size_t>(i)]);
    }
  }
  return st;
}

RefBatch Slice(const RefBatch& b, int32_t world, int32_t r) {
  const int64_t lo = b.batch_size * r / world, hi = b.batch_size * (r + 1) / world;
  RefBatch out;
  out.batch_size = hi - lo;
  size_t at = 0;
  for (int32_t f = 0; f < 3; ++f) {
    for (int64_t i = 0; i < b.batch_size; ++i) {
      const int32_t len = b.lengths[static_cast<size_t>(f * b.batch_size + i)];
      if (i >= lo && i < hi) {
        out.lengths.push_back(len);
        out.ids.insert(out.ids.end(), b.ids.begin() + static_cast<int64_t>(at),
                       b.ids.begin() + static_cast<int64_t>(at) + len);
      }
      at += static_cast<size_t>(len);
    }
  }
  return out;
}

void MakeStreamCollection(const DynScenario& s, const shardrec_plan_t* plan, int32_t world,
                          int32_t r, CollPtr* out) {
  *out = CreateDynCollection(s, plan, world, r);
  ASSERT_NE(*out, nullptr) << "rank " << r;
}

void ForwardSlice(shardrec_embedding_t* c, const RefBatch& global, int32_t world, int32_t r,
                  int64_t dim, float* global_out) {
  const RefBatch b = Slice(global, world, r);
  KjtHolder kjt(b, 3, false);
  std::vector<float> out(static_cast<size_t>(b.batch_size * dim));
  ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), out.data(), out.size(), nullptr), SHARDREC_OK)
      << "rank " << r << ": " << shardrec_last_error();
  if (global_out != nullptr)
    std::copy(out.begin(), out.end(), global_out + global.batch_size * r / world * dim);
}

void BackwardSlice(shardrec_embedding_t* c, const std::vector<float>& grads, int32_t world,
                   int32_t r, int64_t dim, float scale) {
  const int64_t lo = kGlobalBatch * r / world, hi = kGlobalBatch * (r + 1) / world;
  std::vector<float> g(grads.begin() + lo * dim, grads.begin() + hi * dim);
  for (float& x : g) x *= scale;
  ASSERT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_OK)
      << "rank " << r << ": " << shardrec_last_error();
}

}  // namespace shardrec::testing
