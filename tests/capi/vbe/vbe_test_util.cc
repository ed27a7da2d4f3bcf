#include "tests/capi/vbe/vbe_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {

const char* VbeModeName(VbeMode m) {
  switch (m) {
    case VbeMode::kNoInverse:
      return "NoInverse";
    case VbeMode::kInverse:
      return "Inverse";
    case VbeMode::kOnce:
      return "Once";
  }
  return "?";
}

shardrec_kjt_vbe_view_t VbeBatchData::View() const {
  shardrec_kjt_vbe_view_t v = SHARDREC_KJT_VBE_VIEW_INIT;
  v.kjt.batch_size = batch_size;
  v.kjt.num_features = sizes.size();
  v.kjt.lengths = lengths.data();
  v.kjt.num_lengths = lengths.size();
  v.kjt.values = ids.data();
  v.kjt.values_dtype = SHARDREC_DTYPE_INT64;
  v.kjt.num_values = ids.size();
  v.kjt.weights = weights.empty() ? nullptr : weights.data();
  v.kjt.num_weights = weights.size();
  v.feature_batch_sizes = sizes.data();
  v.num_feature_batch_sizes = sizes.size();
  // An inverse array of no entries (batch_size 0) is still given: a pointer, not NULL.
  static const int64_t kNone = 0;
  v.inverse_indices = !has_inverse ? nullptr : inverse.empty() ? &kNone : inverse.data();
  v.num_inverse_indices = inverse.size();
  return v;
}

VbeBatchData MakeVbeBatch(uint64_t seed, const std::vector<int64_t>& id_range, VbeMode mode,
                          bool weighted, int32_t max_bag) {
  std::mt19937_64 gen(seed);
  const size_t F = id_range.size();
  VbeBatchData v;
  v.sizes.resize(F);
  if (mode == VbeMode::kNoInverse) {
    for (auto& b : v.sizes) b = static_cast<int64_t>(gen() % 7);
    v.batch_size = F == 0 ? 0 : *std::max_element(v.sizes.begin(), v.sizes.end());
  } else if (mode == VbeMode::kInverse) {
    v.has_inverse = true;
    v.batch_size = 1 + static_cast<int64_t>(gen() % 6);
    for (auto& b : v.sizes) b = 1 + static_cast<int64_t>(gen() % (v.batch_size + 2));
    for (size_t f = 0; f < F; ++f)
      for (int64_t b = 0; b < v.batch_size; ++b)
        v.inverse.push_back(static_cast<int64_t>(gen() % static_cast<uint64_t>(v.sizes[f])));
  } else {
    v.has_inverse = true;
    v.batch_size = static_cast<int64_t>(gen() % 6);
    for (auto& b : v.sizes) b = v.batch_size + static_cast<int64_t>(gen() % 3);
    for (size_t f = 0; f < F; ++f) {
      std::vector<int64_t> bags(static_cast<size_t>(v.sizes[f]));
      std::iota(bags.begin(), bags.end(), 0);
      std::shuffle(bags.begin(), bags.end(), gen);
      bags.resize(static_cast<size_t>(v.batch_size));
      std::sort(bags.begin(), bags.end());
      v.inverse.insert(v.inverse.end(), bags.begin(), bags.end());
    }
  }
  for (size_t f = 0; f < F; ++f)
    for (int64_t b = 0; b < v.sizes[f]; ++b) {
      const auto len = static_cast<int32_t>(gen() % static_cast<uint64_t>(max_bag + 1));
      v.lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) {
        const bool dup = k > 0 && gen() % 3 == 0;
        v.ids.push_back(dup ? v.ids.back()
                            : static_cast<int64_t>(gen() % static_cast<uint64_t>(id_range[f])));
        if (weighted)
          v.weights.push_back(0.25f + 1.5f * static_cast<float>(gen() % 1000) / 1000.0f);
      }
    }
  return v;
}

RefBatch Expand(const VbeBatchData& v) {
  const size_t F = v.sizes.size();
  std::vector<size_t> bag_begin(F + 1, 0);
  for (size_t f = 0; f < F; ++f) bag_begin[f + 1] = bag_begin[f] + static_cast<size_t>(v.sizes[f]);
  std::vector<size_t> value_begin(v.lengths.size() + 1, 0);
  for (size_t k = 0; k < v.lengths.size(); ++k)
    value_begin[k + 1] = value_begin[k] + static_cast<size_t>(v.lengths[k]);
  RefBatch r;
  r.batch_size = v.batch_size;
  const auto B = static_cast<size_t>(v.batch_size);
  for (size_t f = 0; f < F; ++f)
    for (size_t b = 0; b < B; ++b) {
      int64_t j = -1;
      if (v.has_inverse)
        j = v.inverse[f * B + b];
      else if (static_cast<int64_t>(b) < v.sizes[f])
        j = static_cast<int64_t>(b);
      if (j < 0) {
        r.lengths.push_back(0);
        continue;
      }
      const size_t k = bag_begin[f] + static_cast<size_t>(j);
      r.lengths.push_back(v.lengths[k]);
      for (size_t i = value_begin[k]; i < value_begin[k + 1]; ++i) {
        r.ids.push_back(v.ids[i]);
        if (!v.weights.empty()) r.weights.push_back(v.weights[i]);
      }
    }
  return r;
}

std::vector<float> PlainToVbe(const VbeBatchData& v, const std::vector<float>& plain,
                              const std::vector<int64_t>& widths, int64_t output_dim,
                              bool sequence) {
  if (sequence || v.has_inverse) return plain;
  std::vector<float> out;
  int64_t offset = 0;
  for (size_t f = 0; f < v.sizes.size(); ++f) {
    for (int64_t b = 0; b < v.sizes[f]; ++b) {
      const float* row = plain.data() + b * output_dim + offset;
      out.insert(out.end(), row, row + widths[f]);
    }
    offset += widths[f];
  }
  return out;
}

std::vector<float> VbeGradToPlain(const VbeBatchData& v, const std::vector<float>& grad,
                                  const std::vector<int64_t>& widths, int64_t output_dim,
                                  bool sequence) {
  if (sequence || v.has_inverse) return grad;
  std::vector<float> plain(static_cast<size_t>(v.batch_size * output_dim), 0.0f);
  size_t at = 0;
  int64_t offset = 0;
  for (size_t f = 0; f < v.sizes.size(); ++f) {
    for (int64_t b = 0; b < v.sizes[f]; ++b) {
      std::copy_n(grad.data() + at, widths[f], plain.data() + b * output_dim + offset);
      at += static_cast<size_t>(widths[f]);
    }
    offset += widths[f];
  }
  return plain;
}

std::vector<int64_t> FeatureWidths(const Scenario& s) {
  std::vector<int64_t> w(static_cast<size_t>(s.num_features), 0);
  for (const RefTable& t : s.tables)
    for (int32_t f : t.features) w[f] += t.dim;
  return w;
}

std::vector<int64_t> IdRanges(const Scenario& s) {
  std::vector<int64_t> rows(static_cast<size_t>(s.num_features), 0);
  for (const RefTable& t : s.tables)
    for (int32_t f : t.features) rows[f] = rows[f] == 0 || t.rows < rows[f] ? t.rows : rows[f];
  for (auto& r : rows) r = std::max<int64_t>(r, 1);
  return rows;
}

namespace {

std::vector<float> RandomGrad(uint64_t seed, size_t n) {
  std::mt19937_64 gen(seed);
  std::vector<float> g(n);
  for (float& x : g) x = static_cast<float>(gen() % 2001) / 1000.0f - 1.0f;
  return g;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

void RunVbeEquivalence(const Scenario& s, shardrec_plan_t* plan, const VbeRunOptions& opts) {
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const int64_t D = ref.output_dim();
  const bool seq = ref.sequence();
  const std::vector<int64_t> widths = FeatureWidths(s);
  const std::vector<int64_t> ranges = opts.id_range.empty() ? IdRanges(s) : opts.id_range;
  const auto W = static_cast<size_t>(s.world);
  const auto steps = static_cast<size_t>(opts.steps);
  std::vector<std::vector<VbeBatchData>> vbe(steps, std::vector<VbeBatchData>(W));
  std::vector<std::vector<RefBatch>> expanded(steps, std::vector<RefBatch>(W));
  std::vector<std::vector<std::vector<float>>> grads(steps, std::vector<std::vector<float>>(W));
  std::vector<std::vector<std::vector<float>>> plain_grads = grads;
  std::vector<std::vector<std::vector<float>>> ref_out = grads;
  auto plain_rank = [&](size_t step, size_t r) {
    return opts.mix_plain && W >= 2 && step == 1 && r == W - 1;
  };
  for (size_t step = 0; step < steps; ++step) {
    for (size_t r = 0; r < W; ++r) {
      vbe[step][r] = opts.batch ? opts.batch(step, r)
                                : MakeVbeBatch(s.data_seed * 1000003 + step * 101 + r, ranges,
                                               opts.mode, s.weighted, s.max_bag);
      if (!opts.pools.empty()) {
        // The ids keep their bags (feature-major): map each through its feature's pool.
        size_t at = 0, bag = 0;
        VbeBatchData& v = vbe[step][r];
        for (size_t f = 0; f < v.sizes.size(); ++f)
          for (int64_t b = 0; b < v.sizes[f]; ++b, ++bag)
            for (int32_t k = 0; k < v.lengths[bag]; ++k, ++at)
              v.ids[at] = opts.pools[f][static_cast<size_t>(v.ids[at])];
      }
      expanded[step][r] = Expand(vbe[step][r]);
      const RefBatch& e = expanded[step][r];
      size_t n = 0;
      if (seq)
        n = e.ids.size() * static_cast<size_t>(D);
      else if (plain_rank(step, r) || vbe[step][r].has_inverse)
        n = static_cast<size_t>(e.batch_size * D);
      else
        for (size_t f = 0; f < widths.size(); ++f)
          n += static_cast<size_t>(vbe[step][r].sizes[f] * widths[f]);
      grads[step][r] = RandomGrad(s.data_seed * 7919 + step * 13 + r, n);
      plain_grads[step][r] = plain_rank(step, r)
                                 ? grads[step][r]
                                 : VbeGradToPlain(vbe[step][r], grads[step][r], widths, D, seq);
      if (opts.check_reference)
        ref_out[step][r] = ref.Forward(e);
      else
        ref_out[step][r].resize(seq ? e.ids.size() * static_cast<size_t>(D)
                                    : static_cast<size_t>(e.batch_size * D));
    }
    if (opts.check_reference) ref.Backward(expanded[step], plain_grads[step]);
  }
  const bool exact = opts.mode != VbeMode::kInverse;
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(s.world, [&](int rank) {
    const auto r = static_cast<size_t>(rank);
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    o.num_threads = s.num_threads;
    if (opts.options) opts.options(&o);
    shardrec_embedding_t* cv = nullptr;
    shardrec_embedding_t* cp = nullptr;
    CollPtr vc, pc;
    if (opts.create) {
      opts.create(rank, 0, &cv);
      vc.reset(cv);
      ASSERT_NE(cv, nullptr);
      opts.create(rank, 1, &cp);
      pc.reset(cp);
      ASSERT_NE(cp, nullptr);
    } else {
      ASSERT_EQ(shardrec_embedding_create(&cv, plan, GroupComm(s.world, rank), &opt, &o),
                SHARDREC_OK)
          << shardrec_last_error();
      vc.reset(cv);
      ASSERT_EQ(shardrec_embedding_create(&cp, plan, GroupComm(s.world, rank), &opt, &o),
                SHARDREC_OK)
          << shardrec_last_error();
      pc.reset(cp);
    }
    for (size_t step = 0; step < steps; ++step) {
      const VbeBatchData& v = vbe[step][r];
      const shardrec_kjt_vbe_view_t view = v.View();
      KjtHolder kjt(expanded[step][r], s.num_features, false);
      const bool as_plain = plain_rank(step, r);
      std::vector<float> out(grads[step][r].size());
      if (!as_plain) {
        size_t len = 0;
        ASSERT_EQ(shardrec_embedding_vbe_output_len(cv, &view, &len), SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_EQ(len, out.size());
      }
      shardrec_status_t rc;
      if (opts.pipelined) {
        rc = as_plain ? shardrec_embedding_input_dist_start(cv, kjt.view(), nullptr)
                      : shardrec_embedding_input_dist_start_vbe(cv, &view, nullptr);
        ASSERT_EQ(rc, SHARDREC_OK) << "rank " << r << ": " << shardrec_last_error();
        ASSERT_EQ(shardrec_embedding_input_dist_wait(cv, nullptr), SHARDREC_OK)
            << shardrec_last_error();
        rc = shardrec_embedding_forward_distributed(cv, out.data(), out.size(), nullptr);
      } else {
        rc = as_plain ? shardrec_embedding_forward(cv, kjt.view(), out.data(), out.size(), nullptr)
                      : shardrec_embedding_forward_vbe(cv, &view, out.data(), out.size(), nullptr);
      }
      ASSERT_EQ(rc, SHARDREC_OK) << "rank " << r << " step " << step << ": "
                                 << shardrec_last_error();
      std::vector<float> plain_out(ref_out[step][r].size());
      ASSERT_EQ(
          shardrec_embedding_forward(cp, kjt.view(), plain_out.data(), plain_out.size(), nullptr),
          SHARDREC_OK)
          << shardrec_last_error();
      const std::vector<float> want =
          as_plain ? plain_out : PlainToVbe(v, plain_out, widths, D, seq);
      // Bit for bit while both collections have the same weights: every step where no bag is
      // read twice, else the first (the backward's sums then round apart, within the bound).
      if (exact || step == 0) {
        EXPECT_TRUE(SameBits(out, want))
            << "rank " << r << " step " << step << ": the VBE output differs from the expanded "
            << "batch's";
      } else {
        std::string first;
        EXPECT_EQ(CountMismatches(out, want, 1e-5f, 1e-6f, &first), 0u)
            << "rank " << r << " step " << step << ": " << first;
      }
      if (opts.check_reference) {
        std::string first;
        const std::vector<float> ref_want =
            as_plain ? ref_out[step][r] : PlainToVbe(v, ref_out[step][r], widths, D, seq);
        EXPECT_EQ(CountMismatches(out, ref_want, 1e-5f, 1e-6f, &first), 0u)
            << "rank " << r << " step " << step << " vs reference: " << first;
      }
      ASSERT_EQ(
          shardrec_embedding_backward(cv, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << "rank " << r << " step " << step << ": " << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(cp, plain_grads[step][r].data(),
                                            plain_grads[step][r].size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      if (opts.after_step) {
        opts.after_step(rank, 0, cv);
        opts.after_step(rank, 1, cp);
      }
    }
    if (opts.finish) opts.finish(rank, cv, cp);
    if (!opts.check_weights) return;
    const auto sv = Snapshot(cv, s);
    const auto sp = Snapshot(cp, s);
    ASSERT_EQ(sv.size(), sp.size());
    for (size_t i = 0; i < sv.size(); ++i) {
      if (exact) {
        EXPECT_TRUE(SameBits(sv[i], sp[i]))
            << "rank " << r << " snapshot tensor " << i << " differs from the expanded run's";
      } else {
        std::string first;
        EXPECT_EQ(CountMismatches(sv[i], sp[i], 1e-5f, 1e-6f, &first), 0u)
            << "rank " << r << " snapshot tensor " << i << ": " << first;
      }
    }
    if (!opts.check_reference) return;
    for (size_t t = 0; t < s.tables.size(); ++t) {
      std::vector<float> w(static_cast<size_t>(s.tables[t].rows) * s.tables[t].dim);
      ASSERT_EQ(shardrec_embedding_get_weights(cv, s.tables[t].name.c_str(), w.data(), w.size()),
                SHARDREC_OK);
      std::string first;
      EXPECT_EQ(CountMismatches(w, ref.weights(t), 1e-5f, 1e-6f, &first), 0u)
          << "rank " << r << " table " << s.tables[t].name << " vs reference: " << first;
    }
  });
}

}  // namespace shardrec::testing
