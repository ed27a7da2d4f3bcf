#include "tests/capi/inference/vbe_util.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace shardrec::testing::vbe {

void SaveModel(const std::string& dir, bool sequence, uint32_t seed) {
  shardrec_comm_t* comm = nullptr;
  ASSERT_EQ(shardrec_comm_create_local_group(&comm, 1, nullptr), SHARDREC_OK);
  const char* names[kFeatures] = {"u0", "u1", "i0", "i1"};
  shardrec_feature_config_t features[kFeatures];
  for (int f = 0; f < kFeatures; ++f) {
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = names[f];
  }
  const int32_t user[] = {0, 1}, item[] = {2, 3}, cross[] = {1, 2};
  struct Spec {
    const char* name;
    int64_t rows;
    int32_t dim, pooling;
    const int32_t* features;
  };
  const Spec pooled[] = {{"user", 40, 4, SHARDREC_POOLING_SUM, user},
                         {"item", 60, 8, SHARDREC_POOLING_MEAN, item},
                         {"cross", 30, 3, SHARDREC_POOLING_SUM, cross}};
  const Spec seq[] = {{"s0", 40, 4, SHARDREC_POOLING_NONE, user},
                      {"s1", 60, 4, SHARDREC_POOLING_NONE, item}};
  const Spec* specs = sequence ? seq : pooled;
  const size_t n = sequence ? 2 : 3;
  std::vector<shardrec_table_config_t> tables(n);
  for (size_t t = 0; t < n; ++t) {
    shardrec_table_config_init(&tables[t], SHARDREC_TABLE_CONFIG_VERSION);
    tables[t].name = specs[t].name;
    tables[t].rows = specs[t].rows;
    tables[t].dim = specs[t].dim;
    tables[t].pooling = specs[t].pooling;
    tables[t].features = specs[t].features;
    tables[t].num_features = 2;
  }
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = 1;
  shardrec_plan_t* plan = nullptr;
  ASSERT_EQ(shardrec_plan_create(&plan, tables.data(), n, features, kFeatures, &topo, nullptr, 0),
            SHARDREC_OK)
      << shardrec_last_error();
  shardrec_embedding_t* coll = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t t = 0; t < n; ++t) {
    std::vector<float> w(static_cast<size_t>(specs[t].rows) * specs[t].dim);
    for (float& x : w) x = u(rng);
    ASSERT_EQ(shardrec_embedding_set_weights(coll, specs[t].name, w.data(), w.size()), SHARDREC_OK)
        << shardrec_last_error();
  }
  ASSERT_EQ(shardrec_checkpoint_save(coll, dir.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  shardrec_embedding_destroy(coll);
  shardrec_plan_destroy(plan);
  shardrec_comm_destroy(comm);
}

shardrec_kjt_view_t Plain::View(bool int32_ids) const {
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = B;
  v.num_features = kFeatures;
  v.lengths = lengths.data();
  v.num_lengths = lengths.size();
  v.values_dtype = int32_ids ? SHARDREC_DTYPE_INT32 : SHARDREC_DTYPE_INT64;
  v.values = int32_ids ? static_cast<const void*>(ids32.data()) : ids.data();
  v.num_values = ids.size();
  if (!weights.empty()) {
    v.weights = weights.data();
    v.num_weights = weights.size();
  }
  return v;
}

shardrec_kjt_vbe_view_t Vbe::View(bool int32_ids) const {
  shardrec_kjt_vbe_view_t v = SHARDREC_KJT_VBE_VIEW_INIT;
  v.kjt.batch_size = B;
  v.kjt.num_features = kFeatures;
  v.kjt.lengths = lengths.data();
  v.kjt.num_lengths = lengths.size();
  v.kjt.values_dtype = int32_ids ? SHARDREC_DTYPE_INT32 : SHARDREC_DTYPE_INT64;
  v.kjt.values = int32_ids ? static_cast<const void*>(ids32.data()) : ids.data();
  v.kjt.num_values = ids.size();
  if (!weights.empty()) {
    v.kjt.weights = weights.data();
    v.kjt.num_weights = weights.size();
  }
  v.feature_batch_sizes = batch_sizes.data();
  v.num_feature_batch_sizes = batch_sizes.size();
  if (!inverse.empty()) {
    v.inverse_indices = inverse.data();
    v.num_inverse_indices = inverse.size();
  }
  return v;
}

Vbe RandomVbe(std::mt19937* rng, const Options& o) {
  auto below = [&](int64_t n) { return static_cast<int64_t>((*rng)() % static_cast<uint64_t>(n)); };
  Vbe v;
  v.B = o.inverse ? o.samples : 0;
  for (int f = 0; f < kFeatures; ++f) {
    // User features (0, 1) have one bag or a few; item features up to one per sample.
    const int64_t most = std::max<int64_t>(1, o.samples);
    int64_t bf = f < 2 ? 1 + below(2) : 1 + below(most);
    if (o.samples == 0) bf = o.inverse ? 0 : below(3);
    if (o.request) bf = f < 2 ? 1 : o.samples;
    v.batch_sizes.push_back(bf);
    if (!o.inverse) v.B = std::max(v.B, bf);
    for (int64_t b = 0; b < bf; ++b) {
      const auto len = static_cast<int32_t>(below(o.max_bag + 1));
      v.lengths.push_back(len);
      for (int32_t i = 0; i < len; ++i) {
        int64_t id = below(kRows[f]);
        if (o.out_of_range > 0 && (*rng)() % 1000 < o.out_of_range * 1000)
          id = below(2) ? -1 - below(3) : kRows[f] + 40 + below(5);
        v.ids.push_back(id);
        v.ids32.push_back(static_cast<int32_t>(id));
        if (o.weighted) v.weights.push_back(static_cast<float>(below(33) - 16) / 8.0f);
      }
    }
  }
  if (o.inverse)
    for (int f = 0; f < kFeatures; ++f)
      for (int64_t b = 0; b < v.B; ++b)
        v.inverse.push_back(o.request && f >= 2 ? b : below(v.batch_sizes[f]));
  return v;
}

Plain Expand(const Vbe& v) {
  Plain p;
  p.B = v.B;
  std::vector<size_t> bag_start;  // per bag of the view: its first value
  size_t pos = 0;
  for (int32_t len : v.lengths) {
    bag_start.push_back(pos);
    pos += static_cast<size_t>(len);
  }
  size_t first_bag = 0;
  for (int f = 0; f < kFeatures; ++f) {
    const int64_t bf = v.batch_sizes[f];
    for (int64_t b = 0; b < v.B; ++b) {
      int64_t k = b;
      if (!v.inverse.empty()) k = v.inverse[f * v.B + b];
      if (k >= bf) {
        p.lengths.push_back(0);
        continue;
      }
      const size_t bag = first_bag + static_cast<size_t>(k);
      p.lengths.push_back(v.lengths[bag]);
      for (size_t i = bag_start[bag]; i < bag_start[bag] + v.lengths[bag]; ++i) {
        p.ids.push_back(v.ids[i]);
        p.ids32.push_back(v.ids32[i]);
        if (!v.weights.empty()) p.weights.push_back(v.weights[i]);
      }
    }
    first_bag += static_cast<size_t>(bf);
  }
  return p;
}

std::vector<float> LookupPlain(shardrec_inference_t* inf, const Plain& p, bool int32_ids) {
  const shardrec_kjt_view_t v = p.View(int32_ids);
  int64_t dim = 0;
  int32_t seq = 0;
  EXPECT_EQ(shardrec_inference_output_dim(inf, &dim), SHARDREC_OK);
  EXPECT_EQ(shardrec_inference_is_sequence(inf, &seq), SHARDREC_OK);
  std::vector<float> out((seq ? p.ids.size() : static_cast<size_t>(p.B)) * dim);
  EXPECT_EQ(shardrec_inference_lookup(inf, &v, out.data(), out.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  return out;
}

std::vector<float> LookupVbe(shardrec_inference_t* inf, const Vbe& v, bool int32_ids,
                             uint64_t* version) {
  const shardrec_kjt_vbe_view_t view = v.View(int32_ids);
  size_t n = 0;
  EXPECT_EQ(shardrec_inference_vbe_output_len(inf, &view, &n), SHARDREC_OK)
      << shardrec_last_error();
  std::vector<float> out(n);
  EXPECT_EQ(shardrec_inference_lookup_vbe(inf, &view, out.data(), n, version), SHARDREC_OK)
      << shardrec_last_error();
  return out;
}

}  // namespace shardrec::testing::vbe
