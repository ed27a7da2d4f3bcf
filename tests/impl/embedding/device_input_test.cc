// The device input distribution's host part (input.h) and its unpack steps
// (kernels/simt/unpack_body.h on the host executor) against the host input distribution: over
// random plans of every sharding type, every rank of a world routes a batch, the host exchange is
// simulated byte for byte (ExchangeInput's counts and messages, then UnpackInput), and so is the
// device one (the extended counts, then UnpackCounts with the messages placed as a device block
// would hold them, then the unpack steps). Runs, return sizes and io offsets must be UnpackInput's;
// the ids, weights and CSR offsets the places and the steps give must be the bytes UnpackInput's
// runs point to. A message whose lengths disagree with its counts is reported.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "impl/embedding/gpu/input.h"
#include "impl/embedding/kernels/simt/unpack_body.h"
#include "tests/impl/embedding/kernels/route_host_exec.h"
#include "tests/impl/embedding/route_cases.h"
#include "tests/impl/embedding/same_bytes.h"

namespace shardrec::embedding {
namespace {

using testing::SameBytes;

using kernels::simt_body::HostRouteExec;
using kernels::simt_body::UnpackParams;
using kernels::simt_body::UnpackRun;
using testing::BatchData;
using testing::Case;
using testing::RandomBatch;
using testing::RandomCase;

// Where rank s's message to rank d starts in its send buffer (the others' in rank order, its own
// last).
size_t MessageAt(const RoutedBatch& rb, int32_t s, int32_t d) {
  if (d == s) return rb.self_offset;
  size_t at = 0;
  for (int32_t e = 0; e < d; ++e)
    if (e != s) at += rb.send_bytes[e];
  return at;
}

// Every rank's view of one step: its layout, its routed batch as the host path and as the device
// path sees it, and the device block of its received messages.
struct World {
  std::vector<Layout> layouts;
  std::vector<BatchData> data;
  std::vector<RoutedBatch> host;
  std::vector<RoutedBatch> dev;
  std::vector<std::vector<uint8_t>> recv_block;
};

bool Route(std::mt19937& rng, const Case& c, World* w) {
  const int32_t W = c.plan->world_size;
  w->layouts.resize(W);
  w->data.resize(W);
  w->host.resize(W);
  for (int32_t r = 0; r < W; ++r) {
    std::vector<optim::OptimizerType> types(c.plan->tables.size(), optim::OptimizerType::kSgd);
    if (!BuildLayout(c.plan, r, types, &w->layouts[r]).ok()) return false;
    RandomBatch(rng, c, false, &w->data[r]);
    const Status s =
        RouteBatch(ExecContext(), w->layouts[r], RouteOptions{BoundsPolicy::kError, true},
                   w->data[r].batch, &w->host[r]);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) return false;
  }
  w->dev = w->host;
  return true;
}

// ExchangeInput and UnpackInput, simulated across the ranks.
void HostExchange(World* w) {
  const auto W = static_cast<int32_t>(w->layouts.size());
  for (int32_t r = 0; r < W; ++r) {
    RoutedBatch& rb = w->host[r];
    const size_t units = w->layouts[r].units_to_rank[r].size();
    rb.counts_recv.assign(static_cast<size_t>(W) * kCountFields, 0);
    rb.recv_bytes.assign(W, 0);
    rb.recv.clear();
    for (int32_t s = 0; s < W; ++s) {
      const RoutedBatch& from = w->host[s];
      for (size_t k = 0; k < kCountFields; ++k)
        rb.counts_recv[s * kCountFields + k] = from.counts_send[r * kCountFields + k];
      const int64_t* c = &rb.counts_recv[s * kCountFields];
      rb.recv_bytes[s] = LayoutOf(units, c[1], c[2], c[3] != 0).bytes;
      if (s == r) continue;
      const size_t at = MessageAt(from, s, r);
      rb.recv.insert(rb.recv.end(), from.send.begin() + at,
                     from.send.begin() + at + from.send_bytes[r]);
    }
    ASSERT_TRUE(UnpackInput(w->layouts[r], &rb).ok());
  }
}

// The device path: every rank's route summary, their all-gather, ReadRouteSummaries (which reads
// this rank's counts through ReadDeviceCounts), the messages' all-to-all into each rank's
// receive block, UnpackCounts.
void DeviceExchange(World* w) {
  const auto W = static_cast<int32_t>(w->layouts.size());
  std::vector<uint8_t> gathered;
  for (int32_t s = 0; s < W; ++s) {
    std::vector<uint8_t> summary;
    HostRouteSummary(BuildRouteTables(w->layouts[s]), Status::Ok(), w->dev[s], &summary);
    gathered.insert(gathered.end(), summary.begin(), summary.end());
  }
  w->recv_block.assign(W, {});
  for (int32_t r = 0; r < W; ++r) {
    RoutedBatch& rb = w->dev[r];
    const RouteTables tables = BuildRouteTables(w->layouts[r]);
    ASSERT_EQ(gathered.size(), RouteSummaryBytes(tables) * static_cast<size_t>(W));
    ASSERT_TRUE(
        ReadRouteSummaries(w->layouts[r], tables, RouteOptions{}, Status::Ok(), gathered, &rb)
            .ok());
    for (int32_t s = 0; s < W; ++s) {
      if (s == r) continue;
      const RoutedBatch& from = w->dev[s];
      ASSERT_EQ(from.send_bytes[r], rb.a2a_recv[s]);
      const size_t at = MessageAt(from, s, r);
      w->recv_block[r].insert(w->recv_block[r].end(), from.send.begin() + at,
                              from.send.begin() + at + from.send_bytes[r]);
    }
    ASSERT_TRUE(UnpackCounts(w->layouts[r], &rb).ok());
  }
}

// The unpack steps over rank r's places into `csr`; returns the bad-run word.
unsigned long long RunUnpack(const World& w, int32_t r, std::vector<int64_t>* csr) {
  const RoutedBatch& rb = w.dev[r];
  const uint8_t* recv = w.recv_block[r].data();
  const uint8_t* self = rb.send.data();
  csr->assign(rb.csr_entries, -7);
  std::vector<UnpackRun> runs;
  std::vector<int64_t> cell_begin{0};
  for (const UnpackPlace& u : rb.unpack) {
    UnpackRun run;
    run.lengths = reinterpret_cast<const int32_t*>((u.self ? self : recv) + u.lengths_at);
    run.offsets = u.offsets_at >= 0 ? csr->data() + u.offsets_at : nullptr;
    run.ids = u.ids;
    run.bags = u.bags;
    runs.push_back(run);
    cell_begin.push_back(cell_begin.back() + u.batch);
  }
  const int64_t cells = cell_begin.back();
  std::vector<int64_t> wide(cells + 1, -3), ne(cells + 1, -3), id(cells + 1, -3);
  unsigned long long bad = 77;
  UnpackParams p;
  p.num_runs = static_cast<int64_t>(runs.size());
  p.num_cells = cells;
  p.runs = runs.data();
  p.cell_begin = cell_begin.data();
  p.wide = wide.data();
  p.ne_scan = ne.data();
  p.id_scan = id.data();
  p.bad = &bad;
  HostRouteExec ex;
  kernels::simt_body::UnpackSteps(ex, p);
  return bad;
}

void ExpectSameUnpack(const World& w, int32_t r, const std::string& what) {
  SCOPED_TRACE(what + " rank " + std::to_string(r));
  const RoutedBatch& want = w.host[r];
  const RoutedBatch& got = w.dev[r];
  EXPECT_EQ(want.recv_bytes, got.recv_bytes);
  EXPECT_EQ(want.ret_floats_to, got.ret_floats_to);
  EXPECT_EQ(want.ret_floats_total, got.ret_floats_total);
  EXPECT_EQ(want.ret_self_offset, got.ret_self_offset);
  EXPECT_EQ(want.ret_a2a_to, got.ret_a2a_to);
  EXPECT_EQ(want.ret_a2a_from, got.ret_a2a_from);
  std::vector<int64_t> csr;
  EXPECT_EQ(RunUnpack(w, r, &csr), 0u);
  ASSERT_EQ(want.shards.size(), got.shards.size());
  for (size_t i = 0; i < want.shards.size(); ++i) {
    ASSERT_EQ(want.shards[i].runs.size(), got.shards[i].runs.size()) << "shard " << i;
    EXPECT_EQ(want.shards[i].num_ids, got.shards[i].num_ids) << "shard " << i;
    for (size_t k = 0; k < want.shards[i].runs.size(); ++k) {
      const kernels::BagRun& a = want.shards[i].runs[k];
      const kernels::BagRun& b = got.shards[i].runs[k];
      const RunPlace& at = got.run_at[i][k];
      EXPECT_EQ(a.num_bags, b.num_bags);
      EXPECT_EQ(a.io_offset, b.io_offset);
      const uint8_t* base = at.self ? got.send.data() : w.recv_block[r].data();
      const int64_t n = a.num_ids();
      EXPECT_EQ(at.ids, n);
      ASSERT_TRUE(SameBytes(a.rows, base + at.rows_at, 8 * static_cast<size_t>(n)))
          << "rows of shard " << i << " run " << k;
      EXPECT_EQ(a.weights != nullptr, at.weights_at >= 0);
      if (a.weights != nullptr) {
        EXPECT_TRUE(SameBytes(a.weights, base + at.weights_at, 4 * static_cast<size_t>(n)));
      }
      EXPECT_EQ(a.offsets != nullptr, at.offsets_at >= 0);
      if (a.offsets != nullptr) {
        EXPECT_EQ(std::vector<int64_t>(a.offsets, a.offsets + a.num_bags + 1),
                  std::vector<int64_t>(csr.data() + at.offsets_at,
                                       csr.data() + at.offsets_at + a.num_bags + 1))
            << "offsets of shard " << i << " run " << k;
      }
    }
  }
}

TEST(DeviceInput, CountsAndUnpackGiveUnpackInputsRunsOverRandomPlans) {
  std::mt19937 rng(20261125);
  int plans = 0, pooled_runs = 0;
  for (int attempt = 0; attempt < 3000 && plans < 200; ++attempt) {
    Case c;
    if (!RandomCase(rng, &c)) continue;
    World w;
    if (!Route(rng, c, &w)) continue;
    ++plans;
    HostExchange(&w);
    DeviceExchange(&w);
    if (HasFatalFailure()) return;
    for (int32_t r = 0; r < c.plan->world_size; ++r) {
      ExpectSameUnpack(w, r, "plan " + std::to_string(plans));
      pooled_runs += static_cast<int>(w.dev[r].unpack.size());
      if (HasFatalFailure()) return;
    }
  }
  EXPECT_GE(plans, 150);
  EXPECT_GE(pooled_runs, 500);
}

// A length that disagrees with the announced counts (a corrupted or mismatched message) is
// reported with the run it belongs to, and no offset leaves the run's announced ids.
TEST(DeviceInput, AMessageThatDisagreesWithItsCountsIsReported) {
  std::mt19937 rng(5);
  int planted = 0;
  for (int attempt = 0; attempt < 2000 && planted < 50; ++attempt) {
    Case c;
    if (!RandomCase(rng, &c) || c.layout.sequence) continue;
    World w;
    if (!Route(rng, c, &w)) continue;
    DeviceExchange(&w);
    if (HasFatalFailure()) return;
    for (int32_t r = 0; r < c.plan->world_size; ++r) {
      RoutedBatch& rb = w.dev[r];
      for (size_t k = 0; k < rb.unpack.size(); ++k) {
        const UnpackPlace& u = rb.unpack[k];
        if (u.self) continue;
        auto* lengths = reinterpret_cast<int32_t*>(w.recv_block[r].data() + u.lengths_at);
        const int32_t old = lengths[0];
        lengths[0] = old + 3;
        std::vector<int64_t> csr;
        const unsigned long long bad = RunUnpack(w, r, &csr);
        EXPECT_NE(bad, 0u);
        EXPECT_EQ(kernels::simt_body::MinOf(bad), static_cast<int64_t>(k));
        for (const UnpackPlace& v : rb.unpack) {
          if (v.offsets_at < 0) continue;
          for (int64_t b = 0; b <= v.bags; ++b) {
            const int64_t o = csr[static_cast<size_t>(v.offsets_at + b)];
            EXPECT_TRUE(o >= 0 && o <= v.ids) << o;
          }
        }
        lengths[0] = -1;
        EXPECT_NE(RunUnpack(w, r, &csr), 0u) << "a negative length";
        lengths[0] = old;
        ++planted;
        break;
      }
    }
  }
  EXPECT_GE(planted, 20);
}

// A rejecting rank's summary carries the flag (a host rejection) or a status that rejects (a
// device route's); every peer names the rank, the rejecting rank returns its own error.
TEST(DeviceInput, ARejectedSummaryIsNamedByEveryPeer) {
  std::mt19937 rng(11);
  for (int attempt = 0; attempt < 200; ++attempt) {
    Case c;
    if (!RandomCase(rng, &c) || c.plan->world_size < 2) continue;
    World w;
    if (!Route(rng, c, &w)) continue;
    const int32_t W = c.plan->world_size;
    for (int how = 0; how < 3; ++how) {
      std::vector<uint8_t> gathered;
      for (int32_t s = 0; s < W; ++s) {
        std::vector<uint8_t> summary;
        const RouteTables t = BuildRouteTables(w.layouts[s]);
        HostRouteSummary(t, s == 1 && how == 0 ? Status::InvalidArgument("no") : Status::Ok(),
                         w.dev[s], &summary);
        if (s == 1 && how > 0) {
          kernels::simt_body::RouteStatus st;
          std::memcpy(&st, summary.data() + sizeof(SummaryHeader), sizeof(st));
          if (how == 1) st.inv_id = ~static_cast<unsigned long long>(3);  // an id out of range
          if (how == 2) st.total += 1;  // lengths that do not sum to the values
          std::memcpy(summary.data() + sizeof(SummaryHeader), &st, sizeof(st));
        }
        gathered.insert(gathered.end(), summary.begin(), summary.end());
      }
      for (int32_t r = 0; r < W; ++r) {
        if (r == 1) continue;
        const Status got = ReadRouteSummaries(w.layouts[r], BuildRouteTables(w.layouts[r]),
                                              RouteOptions{}, Status::Ok(), gathered, &w.dev[r]);
        EXPECT_NE(got.message().find("rank 1 rejected its batch"), std::string::npos)
            << how << ": " << got.message();
      }
    }
    return;
  }
  FAIL() << "no plan of two or more ranks";
}

// The same through the per-destination records (what the summaries come down to).
TEST(DeviceInput, ARejectedBatchIsNamedByEveryPeer) {
  std::mt19937 rng(9);
  for (int attempt = 0; attempt < 200; ++attempt) {
    Case c;
    if (!RandomCase(rng, &c) || c.plan->world_size < 2) continue;
    World w;
    if (!Route(rng, c, &w)) continue;
    const int32_t W = c.plan->world_size;
    const Status mine = Status::InvalidArgument("batch: my own reason");
    std::vector<std::vector<int64_t>> records(W);
    for (int32_t s = 0; s < W; ++s)
      DeviceCountsRecord(w.layouts[s], s == 1 ? mine : Status::Ok(), w.dev[s], &records[s]);
    for (int32_t r = 0; r < W; ++r) {
      std::vector<int64_t> recv;
      for (int32_t s = 0; s < W; ++s) {
        size_t at = 0;
        for (int32_t d = 0; d < r; ++d) at += DeviceCountsTo(w.layouts[s], d);
        recv.insert(recv.end(), records[s].begin() + at,
                    records[s].begin() + at + DeviceCountsTo(w.layouts[s], r));
      }
      const Status got =
          ReadDeviceCounts(w.layouts[r], r == 1 ? mine : Status::Ok(), recv, &w.dev[r]);
      if (r == 1) {
        EXPECT_EQ(got.message(), mine.message());
      } else {
        EXPECT_NE(got.message().find("rank 1 rejected its batch"), std::string::npos)
            << got.message();
      }
    }
    return;
  }
  FAIL() << "no plan of two or more ranks";
}

}  // namespace
}  // namespace shardrec::embedding
