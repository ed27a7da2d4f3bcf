// Misuse of the bucketer and of the sharded parameters through the C API: a clear status and
// message, the ranks stay in step, and the next correct step gives the exact average.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>

#include "tests/capi/dense/dense_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

const std::vector<int64_t> kCounts = {100, 30, 7, 250};

float Value(int rank, size_t tensor, int64_t e, int step) {
  return std::sin(0.37f * static_cast<float>(rank + 1) + 0.11f * static_cast<float>(tensor) +
                  0.013f * static_cast<float>(e) + 0.5f * static_cast<float>(step));
}

DdpPtr MakeDdp(shardrec_comm_t* comm) {
  shardrec_ddp_options_t o = SHARDREC_DDP_OPTIONS_INIT;
  o.first_bucket_bytes = 64;  // several buckets
  o.bucket_cap_bytes = 512;
  shardrec_ddp_t* raw = nullptr;
  EXPECT_EQ(shardrec_ddp_create(&raw, comm, kCounts.data(), kCounts.size(), &o), SHARDREC_OK)
      << LastError();
  return DdpPtr(raw);
}

void Fill(shardrec_ddp_t* ddp, int rank, int step) {
  ASSERT_EQ(shardrec_ddp_zero_grad(ddp), SHARDREC_OK);
  for (size_t i = 0; i < kCounts.size(); ++i) {
    float* g = nullptr;
    ASSERT_EQ(shardrec_ddp_grad(ddp, i, &g), SHARDREC_OK);
    for (int64_t e = 0; e < kCounts[i]; ++e) g[e] = Value(rank, i, e, step);
  }
}

// Every gradient holds the rank-ordered mean of the world's values for `step`.
void ExpectAverage(shardrec_ddp_t* ddp, int world, int step) {
  for (size_t i = 0; i < kCounts.size(); ++i) {
    float* g = nullptr;
    ASSERT_EQ(shardrec_ddp_grad(ddp, i, &g), SHARDREC_OK);
    for (int64_t e = 0; e < kCounts[i]; ++e) {
      float sum = 0;
      for (int k = 0; k < world; ++k) sum += Value(k, i, e, step);
      ASSERT_EQ(g[e], sum / static_cast<float>(world)) << "tensor " << i << " element " << e;
    }
  }
}

// The communicator is still good after a refused creation: a matching registration works and
// its first step averages exactly.
void ExpectANewBucketerAverages(shardrec_comm_t* comm, int rank, int world) {
  DdpPtr ddp = MakeDdp(comm);
  ASSERT_NE(ddp, nullptr);
  Fill(ddp.get(), rank, 0);
  for (size_t i = 0; i < kCounts.size(); ++i) {
    ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), i), SHARDREC_OK);
  }
  ASSERT_EQ(shardrec_ddp_finish(ddp.get()), SHARDREC_OK) << LastError();
  ExpectAverage(ddp.get(), world, 0);
}

TEST(CapiDdpMisuse, MarkedTwiceIsRefusedAndTheStepStillAverages) {
  const int world = 2;
  auto comms = LocalGroup(world);
  SpawnRanks(world, [&](int r) {
    DdpPtr ddp = MakeDdp(comms[r].get());
    Fill(ddp.get(), r, 0);
    ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), 3), SHARDREC_OK);
    EXPECT_EQ(shardrec_ddp_mark_ready(ddp.get(), 3), SHARDREC_EUSAGE);
    EXPECT_NE(LastError().find("marked ready twice"), std::string::npos) << LastError();
    EXPECT_EQ(shardrec_ddp_mark_ready(ddp.get(), kCounts.size()), SHARDREC_EINVAL);
    EXPECT_NE(LastError().find("out of range"), std::string::npos) << LastError();
    // The refused calls counted nothing: the remaining marks complete the buckets normally.
    for (size_t i : {2u, 1u, 0u}) ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), i), SHARDREC_OK);
    ASSERT_EQ(shardrec_ddp_finish(ddp.get()), SHARDREC_OK) << LastError();
    ExpectAverage(ddp.get(), world, 0);
  });
}

TEST(CapiDdpMisuse, FinishWithAGradientMissingNamesItAndTheNextStepWorks) {
  const int world = 3;
  auto comms = LocalGroup(world);
  SpawnRanks(world, [&](int r) {
    DdpPtr ddp = MakeDdp(comms[r].get());
    // Step 0: every rank forgets tensor 1 (each names it: its own miss comes first).
    Fill(ddp.get(), r, 0);
    for (size_t i : {3u, 2u, 0u}) ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), i), SHARDREC_OK);
    EXPECT_EQ(shardrec_ddp_finish(ddp.get()), SHARDREC_EUSAGE);
    EXPECT_NE(LastError().find("never marked ready: 1"), std::string::npos) << LastError();
    // Step 1: only rank 1 forgets tensor 0. Nobody hangs, and every rank fails: the average
    // holds rank 1's unmarked buffer, so no replica may apply it (or the replicas would part).
    Fill(ddp.get(), r, 1);
    for (size_t i : {3u, 2u, 1u}) ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), i), SHARDREC_OK);
    if (r != 1) {
      ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), 0), SHARDREC_OK);
    }
    EXPECT_EQ(shardrec_ddp_finish(ddp.get()), SHARDREC_EUSAGE);
    if (r == 1) {
      EXPECT_NE(LastError().find("never marked ready: 0"), std::string::npos) << LastError();
    } else {
      EXPECT_NE(LastError().find("rank 1 finished the step"), std::string::npos) << LastError();
    }
    // Step 2: correct on every rank, exact average.
    Fill(ddp.get(), r, 2);
    for (size_t i : {0u, 3u, 1u, 2u}) ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), i), SHARDREC_OK);
    ASSERT_EQ(shardrec_ddp_finish(ddp.get()), SHARDREC_OK) << LastError();
    ExpectAverage(ddp.get(), world, 2);
    shardrec_ddp_stats_t st;
    ASSERT_EQ(shardrec_ddp_stats(ddp.get(), &st), SHARDREC_OK);
    EXPECT_EQ(st.steps, 3);
  });
}

TEST(CapiDdpMisuse, RegistrationsThatDifferAcrossRanksAreRefusedOnEveryRank) {
  const int world = 3;
  auto comms = LocalGroup(world);
  SpawnRanks(world, [&](int r) {
    std::vector<int64_t> counts = kCounts;
    if (r == 2) counts[1] = 31;  // same number of tensors, one size differs
    // A non-NULL sentinel: a failed create must set *out to NULL (never dereferenced).
    shardrec_ddp_t* raw = reinterpret_cast<shardrec_ddp_t*>(&counts);
    EXPECT_EQ(shardrec_ddp_create(&raw, comms[r].get(), counts.data(), counts.size(), nullptr),
              SHARDREC_EINVAL);
    EXPECT_EQ(raw, nullptr);
    const std::string msg = LastError();
    EXPECT_NE(msg.find("differ across ranks"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 2"), std::string::npos) << msg;
    // A different number of tensors on rank 0 is caught the same way.
    std::vector<int64_t> more = kCounts;
    if (r == 0) more.push_back(5);
    EXPECT_EQ(shardrec_ddp_create(&raw, comms[r].get(), more.data(), more.size(), nullptr),
              SHARDREC_EINVAL);
    EXPECT_EQ(raw, nullptr);
    // The same tensors with other options on rank 1 (each valid): the buckets, or the messages'
    // encoding, differed and the first finish ended the process. Refused on every rank.
    for (int k = 0; k < 3; ++k) {
      shardrec_ddp_options_t o;
      ASSERT_EQ(shardrec_ddp_options_init(&o, SHARDREC_DDP_OPTIONS_VERSION), SHARDREC_OK);
      if (r == 1 && k == 0) o.first_bucket_bytes = 64;
      if (r == 1 && k == 1) o.bucket_cap_bytes = 64;
      if (r == 1 && k == 2) o.compression = SHARDREC_DDP_COMPRESSION_BF16;
      EXPECT_EQ(shardrec_ddp_create(&raw, comms[r].get(), kCounts.data(), kCounts.size(), &o),
                SHARDREC_EINVAL)
          << "option " << k;
      EXPECT_EQ(raw, nullptr);
      EXPECT_NE(LastError().find("the same DDP options"), std::string::npos) << LastError();
    }
    ExpectANewBucketerAverages(comms[r].get(), r, world);
  });
}

// Creation is collective: a rank refusing its own arguments (here a NULL `out`, NULL counts, bad
// options) meets its peers in the creation's agreement, so every rank fails at once (the
// communicators' timeout is 60 s) naming it, and the next creation pairs up on every rank.
TEST(CapiDdpMisuse, ARefusalOnOneRankFailsEveryRankAtOnce) {
  const int world = 3;
  auto comms = LocalGroup(world);
  SpawnRanks(world, [&](int r) {
    shardrec_ddp_options_t bad = SHARDREC_DDP_OPTIONS_INIT;
    bad.compression = 7;
    for (int round = 0; round < 3; ++round) {
      const auto start = std::chrono::steady_clock::now();
      shardrec_ddp_t* raw = nullptr;
      const bool refuses = r == round;
      shardrec_status_t s = SHARDREC_OK;
      if (!refuses) {
        s = shardrec_ddp_create(&raw, comms[r].get(), kCounts.data(), kCounts.size(), nullptr);
      } else if (round == 0) {
        s = shardrec_ddp_create(nullptr, comms[r].get(), kCounts.data(), kCounts.size(), nullptr);
      } else if (round == 1) {
        s = shardrec_ddp_create(&raw, comms[r].get(), nullptr, kCounts.size(), nullptr);
      } else {
        s = shardrec_ddp_create(&raw, comms[r].get(), kCounts.data(), kCounts.size(), &bad);
      }
      EXPECT_EQ(s, SHARDREC_EINVAL) << "rank " << r << " round " << round;
      EXPECT_EQ(raw, nullptr);
      const std::string msg = LastError();
      if (!refuses) {
        EXPECT_NE(msg.find("rank " + std::to_string(round) + " refused"), std::string::npos) << msg;
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << round;
    }
    ExpectANewBucketerAverages(comms[r].get(), r, world);
  });
}

TEST(CapiDdpMisuse, BadArgumentsAreRefusedBeforeAnyCollective) {
  auto comms = LocalGroup(1);
  shardrec_comm_t* comm = comms[0].get();
  shardrec_ddp_t* raw = nullptr;
  shardrec_ddp_options_t o = SHARDREC_DDP_OPTIONS_INIT;
  o.bucket_cap_bytes = -1;
  EXPECT_EQ(shardrec_ddp_create(&raw, comm, kCounts.data(), kCounts.size(), &o), SHARDREC_EINVAL);
  EXPECT_NE(LastError().find("bucket caps"), std::string::npos) << LastError();
  o = SHARDREC_DDP_OPTIONS_INIT;
  o.compression = 7;
  EXPECT_EQ(shardrec_ddp_create(&raw, comm, kCounts.data(), kCounts.size(), &o), SHARDREC_EINVAL);
  EXPECT_NE(LastError().find("compression"), std::string::npos) << LastError();
  o = SHARDREC_DDP_OPTIONS_INIT;
  o.version = 99;
  EXPECT_EQ(shardrec_ddp_create(&raw, comm, kCounts.data(), kCounts.size(), &o), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_ddp_create(&raw, nullptr, kCounts.data(), kCounts.size(), nullptr),
            SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_ddp_create(&raw, comm, nullptr, 3, nullptr), SHARDREC_EINVAL);
  const int64_t negative[] = {4, -1};
  EXPECT_EQ(shardrec_ddp_create(&raw, comm, negative, 2, nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(raw, nullptr);
  // NULL handles.
  float* g = nullptr;
  EXPECT_EQ(shardrec_ddp_grad(nullptr, 0, &g), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_ddp_mark_ready(nullptr, 0), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_ddp_finish(nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_ddp_zero_grad(nullptr), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_ddp_set_sync(nullptr, 1), SHARDREC_EINVAL);
  shardrec_ddp_destroy(nullptr);
  // Index and capacity checks on a live bucketer; a refused call changes nothing.
  DdpPtr ddp = MakeDdp(comm);
  EXPECT_EQ(shardrec_ddp_grad(ddp.get(), kCounts.size(), &g), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_ddp_set_external(ddp.get(), kCounts.size(), nullptr), SHARDREC_EINVAL);
  size_t members[1], size = 0;
  shardrec_ddp_stats_t st;
  ASSERT_EQ(shardrec_ddp_stats(ddp.get(), &st), SHARDREC_OK);
  EXPECT_EQ(shardrec_ddp_bucket(ddp.get(), static_cast<size_t>(st.buckets), nullptr, 0, &size),
            SHARDREC_EINVAL);
  ASSERT_EQ(shardrec_ddp_bucket(ddp.get(), 1, nullptr, 0, &size), SHARDREC_OK);
  ASSERT_GT(size, 1u);
  EXPECT_EQ(shardrec_ddp_bucket(ddp.get(), 1, members, 1, &size), SHARDREC_EINVAL);
  EXPECT_NE(LastError().find("capacity"), std::string::npos) << LastError();
  // A buffer cannot change, nor the gradients be zeroed, in the middle of a step: the marked
  // tensor's bucket may already be in flight on the worker thread.
  std::vector<float> mine(kCounts[0]);
  Fill(ddp.get(), 0, 4);
  ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), 3), SHARDREC_OK);
  EXPECT_EQ(shardrec_ddp_set_external(ddp.get(), 0, mine.data()), SHARDREC_EUSAGE);
  EXPECT_EQ(shardrec_ddp_zero_grad(ddp.get()), SHARDREC_EUSAGE);
  EXPECT_NE(LastError().find("middle of a step"), std::string::npos) << LastError();
  ASSERT_EQ(shardrec_ddp_grad(ddp.get(), 0, &g), SHARDREC_OK);
  EXPECT_NE(g, mine.data());
  for (size_t i : {2u, 1u, 0u}) ASSERT_EQ(shardrec_ddp_mark_ready(ddp.get(), i), SHARDREC_OK);
  ASSERT_EQ(shardrec_ddp_finish(ddp.get()), SHARDREC_OK);
  ExpectAverage(ddp.get(), 1, 4);
}

TEST(CapiFsdpMisuse, ReducedTwiceOrMissingIsReportedAndTheRanksStayInStep) {
  const int world = 2;
  const std::vector<int64_t> units = {10, 7};
  std::vector<float> init0(10), init1(7);
  for (int e = 0; e < 10; ++e) init0[e] = 0.5f * static_cast<float>(e);
  for (int e = 0; e < 7; ++e) init1[e] = -0.25f * static_cast<float>(e);
  const float* init[] = {init0.data(), init1.data()};
  const shardrec_optimizer_config_t sgd = SgdConfig(1.0f);
  auto comms = LocalGroup(world);
  std::vector<std::vector<float>> after(world);
  SpawnRanks(world, [&](int r) {
    shardrec_fsdp_t* raw = nullptr;
    ASSERT_EQ(shardrec_fsdp_create(&raw, comms[r].get(), units.data(), init, 2, &sgd), SHARDREC_OK)
        << LastError();
    FsdpPtr fsdp(raw);
    float* g = nullptr;
    // Step 0: unit 0 reduced twice (refused), unit 1 never reduced.
    ASSERT_EQ(shardrec_fsdp_grad(fsdp.get(), 0, &g), SHARDREC_OK);
    for (int e = 0; e < 10; ++e) g[e] = static_cast<float>(r + 1);
    ASSERT_EQ(shardrec_fsdp_reduce_grad(fsdp.get(), 0), SHARDREC_OK);
    EXPECT_EQ(shardrec_fsdp_reduce_grad(fsdp.get(), 0), SHARDREC_EUSAGE);
    EXPECT_NE(LastError().find("twice"), std::string::npos) << LastError();
    EXPECT_EQ(shardrec_fsdp_grad(fsdp.get(), 0, &g), SHARDREC_EUSAGE);
    // Unit 1's gradient is written but never reduced: the step reduces zeros from this rank,
    // not what it wrote (which it used to average in).
    ASSERT_EQ(shardrec_fsdp_grad(fsdp.get(), 1, &g), SHARDREC_OK);
    for (int e = 0; e < 7; ++e) g[e] = 7.0f * static_cast<float>(r + 1);
    EXPECT_EQ(shardrec_fsdp_step(fsdp.get()), SHARDREC_EUSAGE);
    EXPECT_NE(LastError().find("unit 1"), std::string::npos) << LastError();
    float* full = nullptr;
    ASSERT_EQ(shardrec_fsdp_gather(fsdp.get(), 0, 1, &full), SHARDREC_OK);
    after[r].assign(full, full + 10);
    ASSERT_EQ(shardrec_fsdp_release(fsdp.get(), 0), SHARDREC_OK);
    ASSERT_EQ(shardrec_fsdp_gather(fsdp.get(), 1, -1, &full), SHARDREC_OK);
    after[r].insert(after[r].end(), full, full + 7);
    ASSERT_EQ(shardrec_fsdp_release(fsdp.get(), 1), SHARDREC_OK);
    // Out of range.
    EXPECT_EQ(shardrec_fsdp_gather(fsdp.get(), 2, -1, &full), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_fsdp_gather(fsdp.get(), 0, 5, &full), SHARDREC_EINVAL);
    EXPECT_EQ(shardrec_fsdp_reduce_grad(fsdp.get(), 9), SHARDREC_EINVAL);
    // Step 1, correct: SGD with lr 1 subtracts the mean gradient (1 + 2) / 2 from unit 0 and
    // (2 + 4) / 2 from unit 1.
    const std::vector<float> before = after[r];
    for (size_t u = 0; u < 2; ++u) {
      ASSERT_EQ(shardrec_fsdp_grad(fsdp.get(), u, &g), SHARDREC_OK);
      for (int64_t e = 0; e < units[u]; ++e) g[e] = static_cast<float>((r + 1) * (u + 1));
      ASSERT_EQ(shardrec_fsdp_reduce_grad(fsdp.get(), u), SHARDREC_OK);
    }
    ASSERT_EQ(shardrec_fsdp_step(fsdp.get()), SHARDREC_OK) << LastError();
    for (size_t u = 0; u < 2; ++u) {
      ASSERT_EQ(shardrec_fsdp_gather(fsdp.get(), u, -1, &full), SHARDREC_OK);
      const size_t base = u == 0 ? 0 : 10;
      for (int64_t e = 0; e < units[u]; ++e) {
        EXPECT_EQ(full[e], before[base + e] - 1.5f * static_cast<float>(u + 1));
      }
      ASSERT_EQ(shardrec_fsdp_release(fsdp.get(), u), SHARDREC_OK);
    }
  });
  // After the refused step both ranks hold the same parameters: unit 0 took the mean gradient
  // 1.5 and unit 1, reduced with zeros, is unchanged under SGD.
  EXPECT_EQ(after[0], after[1]);
  for (int e = 0; e < 10; ++e) EXPECT_EQ(after[0][e], init0[e] - 1.5f) << e;
  for (int e = 0; e < 7; ++e) EXPECT_EQ(after[0][10 + e], init1[e]) << e;
}

// Only rank 1 misses unit 1: rank 1 is told (EUSAGE), rank 0 is not, and both apply the same
// update, in which rank 1 contributed zeros to unit 1's average.
TEST(CapiFsdpMisuse, APartialMissKeepsEveryRankIdentical) {
  const int world = 2;
  const std::vector<int64_t> units = {6, 5};
  std::vector<float> init0(6, 1.0f), init1(5, 2.0f);
  const float* init[] = {init0.data(), init1.data()};
  const shardrec_optimizer_config_t sgd = SgdConfig(1.0f);
  auto comms = LocalGroup(world);
  std::vector<std::vector<float>> after(world);
  std::vector<shardrec_status_t> step(world);
  SpawnRanks(world, [&](int r) {
    shardrec_fsdp_t* raw = nullptr;
    ASSERT_EQ(shardrec_fsdp_create(&raw, comms[r].get(), units.data(), init, 2, &sgd), SHARDREC_OK)
        << LastError();
    FsdpPtr fsdp(raw);
    for (size_t u = 0; u < 2; ++u) {
      if (r == 1 && u == 1) continue;
      float* g = nullptr;
      ASSERT_EQ(shardrec_fsdp_grad(fsdp.get(), u, &g), SHARDREC_OK);
      for (int64_t e = 0; e < units[u]; ++e) g[e] = static_cast<float>(4 * (r + 1));
      ASSERT_EQ(shardrec_fsdp_reduce_grad(fsdp.get(), u), SHARDREC_OK);
    }
    step[r] = shardrec_fsdp_step(fsdp.get());
    if (r == 1) {
      EXPECT_NE(LastError().find("unit 1"), std::string::npos) << LastError();
    }
    for (size_t u = 0; u < 2; ++u) {
      float* full = nullptr;
      ASSERT_EQ(shardrec_fsdp_gather(fsdp.get(), u, -1, &full), SHARDREC_OK);
      after[r].insert(after[r].end(), full, full + units[u]);
      ASSERT_EQ(shardrec_fsdp_release(fsdp.get(), u), SHARDREC_OK);
    }
  });
  EXPECT_EQ(step[0], SHARDREC_OK);
  EXPECT_EQ(step[1], SHARDREC_EUSAGE);
  EXPECT_EQ(after[0], after[1]);
  // Unit 0: mean of 4 and 8; unit 1: mean of 4 and rank 1's zeros.
  for (int e = 0; e < 6; ++e) EXPECT_EQ(after[0][e], 1.0f - 6.0f) << e;
  for (int e = 0; e < 5; ++e) EXPECT_EQ(after[0][6 + e], 2.0f - 2.0f) << e;
}

// As for the bucketer: one rank's refusal (NULL initial values, an optimizer the sharded
// parameters do not take) fails every rank at once, and the next creation works.
TEST(CapiFsdpMisuse, ARefusalOnOneRankFailsEveryRankAtOnce) {
  const int world = 2;
  auto comms = LocalGroup(world);
  const int64_t units[] = {5};
  const float init0[] = {1, 2, 3, 4, 5};
  const float* init[] = {init0};
  SpawnRanks(world, [&](int r) {
    for (int round = 0; round < 2; ++round) {
      const auto start = std::chrono::steady_clock::now();
      shardrec_optimizer_config_t c = SgdConfig(0.1f);
      if (r == 1 && round == 1) c.type = SHARDREC_OPTIMIZER_LAMB;
      shardrec_fsdp_t* raw = nullptr;
      const float* const* given = r == 1 && round == 0 ? nullptr : init;
      EXPECT_EQ(shardrec_fsdp_create(&raw, comms[r].get(), units, given, 1, &c), SHARDREC_EINVAL)
          << "rank " << r << " round " << round;
      EXPECT_EQ(raw, nullptr);
      if (r == 0) {
        EXPECT_NE(LastError().find("rank 1 refused"), std::string::npos) << LastError();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << round;
    }
    shardrec_optimizer_config_t c = SgdConfig(0.1f);
    shardrec_fsdp_t* raw = nullptr;
    ASSERT_EQ(shardrec_fsdp_create(&raw, comms[r].get(), units, init, 1, &c), SHARDREC_OK)
        << LastError();
    float* full = nullptr;
    ASSERT_EQ(shardrec_fsdp_gather(raw, 0, -1, &full), SHARDREC_OK) << LastError();
    for (int e = 0; e < 5; ++e) EXPECT_EQ(full[e], init0[e]);
    shardrec_fsdp_destroy(raw);
  });
}

// Units whose counts differ across ranks were accepted, and the first gather exchanged messages
// of different sizes (a wrong result on one rank, the process ended on the other). Creation now
// refuses them on every rank, naming the first rank that differs, and the communicator stays good.
// Optimizers that differ are refused too.
TEST(CapiFsdpMisuse, UnitsThatDifferAcrossRanksAreRefusedOnEveryRank) {
  const int world = 2;
  auto comms = LocalGroup(world);
  std::vector<float> init0(4001, 0.5f);
  const float* init[] = {init0.data()};
  SpawnRanks(world, [&](int r) {
    const int64_t units[] = {r == 0 ? 1000 : 4001};
    shardrec_optimizer_config_t c = SgdConfig(0.1f);
    shardrec_fsdp_t* raw = nullptr;
    EXPECT_EQ(shardrec_fsdp_create(&raw, comms[r].get(), units, init, 1, &c), SHARDREC_EINVAL);
    EXPECT_EQ(raw, nullptr);
    EXPECT_NE(LastError().find("differ across ranks: rank 1"), std::string::npos) << LastError();
    // The same units, another learning rate on rank 1: each rank would update its part of a
    // unit differently.
    const int64_t same[] = {1000};
    shardrec_optimizer_config_t other = SgdConfig(r == 1 ? 0.5f : 0.1f);
    EXPECT_EQ(shardrec_fsdp_create(&raw, comms[r].get(), same, init, 1, &other), SHARDREC_EINVAL);
    EXPECT_EQ(raw, nullptr);
    EXPECT_NE(LastError().find("the same optimizer"), std::string::npos) << LastError();
    ASSERT_EQ(shardrec_fsdp_create(&raw, comms[r].get(), same, init, 1, &c), SHARDREC_OK)
        << LastError();
    float* full = nullptr;
    ASSERT_EQ(shardrec_fsdp_gather(raw, 0, -1, &full), SHARDREC_OK) << LastError();
    EXPECT_EQ(full[999], 0.5f);
    shardrec_fsdp_destroy(raw);
  });
}

TEST(CapiFsdpMisuse, BadArguments) {
  auto comms = LocalGroup(1);
  const int64_t units[] = {4};
  const float init0[] = {1, 2, 3, 4};
  const float* init[] = {init0};
  const float* none[] = {nullptr};
  shardrec_optimizer_config_t c = SgdConfig(0.1f);
  shardrec_fsdp_t* raw = nullptr;
  EXPECT_EQ(shardrec_fsdp_create(&raw, comms[0].get(), units, none, 1, &c), SHARDREC_EINVAL);
  EXPECT_NE(LastError().find("initial[0]"), std::string::npos) << LastError();
  EXPECT_EQ(shardrec_fsdp_create(&raw, comms[0].get(), units, init, 1, nullptr), SHARDREC_EINVAL);
  c.type = SHARDREC_OPTIMIZER_LAMB;
  EXPECT_EQ(shardrec_fsdp_create(&raw, comms[0].get(), units, init, 1, &c), SHARDREC_EINVAL);
  EXPECT_EQ(raw, nullptr);
  float* p = nullptr;
  EXPECT_EQ(shardrec_fsdp_gather(nullptr, 0, -1, &p), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_fsdp_step(nullptr), SHARDREC_EINVAL);
  int64_t cur = 0;
  EXPECT_EQ(shardrec_fsdp_memory(nullptr, &cur, nullptr), SHARDREC_EINVAL);
  shardrec_fsdp_destroy(nullptr);
}

}  // namespace
}  // namespace shardrec::testing
