// The return message's lookup in two parts: the runs whose rows travel, then this rank's own
// (the overlap of the return exchange with the own lookup relies on it). Each part writes exactly
// its own rows, and together they give the bits of one lookup over every run.
#include "impl/embedding/output_dist.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "impl/embedding/param_store.h"
#include "impl/sharding/layout.h"
#include "same_bytes.h"

namespace shardrec::embedding {
namespace {

TEST(EmbeddingOutputDist, TravellingAndOwnRunsSplitTheLookup) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 2;
  plan->local_world_size = 2;
  plan->features = {{"a", 1.0f}, {"b", 1.0f}};
  sharding::TableConfig rw;
  rw.name = "rw";
  rw.rows = 40;
  rw.dim = 8;
  rw.features = {0};
  sharding::TableConfig tw = rw;
  tw.name = "tw";
  tw.rows = 30;
  tw.dim = 4;
  tw.features = {1};
  plan->tables = {rw, tw};
  plan->table_plans = {sharding::MakeRowWise(rw, 2), sharding::MakeTableWise(tw, 0)};
  Layout l;
  ASSERT_TRUE(
      BuildLayout(plan, 0, std::vector<optim::OptimizerType>(2, optim::OptimizerType::kSgd), &l)
          .ok());
  ParamStore params;
  ASSERT_TRUE(params.Allocate(&l, /*huge_pages=*/false).ok());
  ASSERT_TRUE(params.Initialise(7, ExecContext()).ok());

  // Rank 0's batch; rank 1 is taken to have sent the very same message, so this rank looks up
  // rows for two sources: its own (kept) and rank 1's (travelling).
  const int64_t B = 12;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  for (int f = 0; f < 2; ++f)
    for (int64_t b = 0; b < B; ++b) {
      const int32_t len = static_cast<int32_t>((b * 5 + f) % 4);
      lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) ids.push_back((b * 11 + k * 7 + f) % 19);
    }
  Batch batch{B, 2, lengths.data(), lengths.size(), ids.data(), DType::kInt64, ids.size(), nullptr,
              0, {}};
  RoutedBatch rb;
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{}, batch, &rb).ok());
  const int64_t* own = &rb.counts_send[0];
  rb.counts_recv.assign(own, own + kCountFields);
  rb.counts_recv.insert(rb.counts_recv.end(), own, own + kCountFields);
  rb.recv_bytes = {rb.send_bytes[0], rb.send_bytes[0]};
  rb.recv.assign(rb.send.begin() + static_cast<std::ptrdiff_t>(rb.self_offset),
                 rb.send.begin() + static_cast<std::ptrdiff_t>(rb.self_offset + rb.send_bytes[0]));
  ASSERT_TRUE(UnpackInput(l, &rb).ok());
  ASSERT_GT(rb.ret_self_offset, 0u);
  ASSERT_LT(rb.ret_self_offset, rb.ret_floats_total);

  std::vector<kernels::LookupJob> jobs;
  std::vector<float> all(rb.ret_floats_total, 0.0f);
  ASSERT_TRUE(LookupToSend(ExecContext(), l, params, rb, &jobs, all.data()).ok());
  // Parts land on a NaN background: each must write its rows and leave the others alone.
  std::vector<float> split(rb.ret_floats_total, std::nanf(""));
  ASSERT_TRUE(
      LookupToSend(ExecContext(), l, params, rb, &jobs, split.data(), {}, RunSet::kTravelling)
          .ok());
  for (size_t i = 0; i < split.size(); ++i)
    ASSERT_EQ(std::isnan(split[i]), i >= rb.ret_self_offset) << "float " << i;
  ASSERT_TRUE(
      LookupToSend(ExecContext(), l, params, rb, &jobs, split.data(), {}, RunSet::kOwn).ok());
  EXPECT_TRUE(testing::SameBytes(all.data(), split.data(), all.size() * sizeof(float)));
  // Both sources sent the same ids, so the travelling block equals the own block.
  const size_t own_floats = rb.ret_floats_total - rb.ret_self_offset;
  ASSERT_EQ(rb.ret_self_offset, own_floats);
  EXPECT_EQ(std::memcmp(all.data(), all.data() + own_floats, own_floats * sizeof(float)), 0);
}

}  // namespace
}  // namespace shardrec::embedding
