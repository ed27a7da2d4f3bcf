// The id message of a VBE batch's padded form (Batch::feature_bags, docs/variable-batch.md): each
// unit carries its feature's B_f length slots instead of the padded batch's P, and the owner side
// reads the same runs as from the plain message of the same padded batch.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "impl/core/thread_pool.h"
#include "impl/embedding/input_dist.h"
#include "impl/sharding/layout.h"

namespace shardrec::embedding {
namespace {

// Rank 0 of two: feature "u" read by a row-wise table (rows 0-4 on rank 0, 5-9 on rank 1),
// feature "i" by a table-wise table on rank 0.
Layout UserItemLayout() {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 2;
  plan->local_world_size = 2;
  plan->features = {{"u", 1.0f}, {"i", 1.0f}};
  sharding::TableConfig u;
  u.name = "tu";
  u.rows = 10;
  u.dim = 4;
  u.features = {0};
  sharding::TableConfig i = u;
  i.name = "ti";
  i.features = {1};
  plan->tables = {u, i};
  plan->table_plans = {sharding::MakeRowWise(u, 2), sharding::MakeTableWise(i, 0)};
  Layout l;
  EXPECT_TRUE(
      BuildLayout(plan, 0, std::vector<optim::OptimizerType>(2, optim::OptimizerType::kSgd), &l)
          .ok());
  return l;
}

// The padded batch of P = 4 samples: "u" has B_f = 2 bags (then 2 empty ones), "i" has 4.
struct Padded {
  std::vector<int32_t> lengths = {2, 1, 0, 0, 1, 1, 1, 1};
  std::vector<int64_t> ids = {1, 7, 3, 0, 1, 2, 3};
  std::vector<int64_t> feature_bags = {2, 4};
  Batch Of(bool vbe) const {
    Batch b{4, 2, lengths.data(), lengths.size(), ids.data(), DType::kInt64, ids.size(), nullptr,
            0, {}};
    if (vbe) b.feature_bags = feature_bags.data();
    return b;
  }
};

// Routes `batch` and unpacks this rank's message to itself (the peer sends nothing).
RoutedBatch RouteAndUnpackOwn(const Layout& l, const Batch& batch, Status* unpacked) {
  RoutedBatch rb;
  EXPECT_TRUE(
      RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, batch, &rb).ok());
  rb.counts_recv.assign(2 * kCountFields, 0);
  std::memcpy(rb.counts_recv.data(), rb.counts_send.data(), kCountFields * sizeof(int64_t));
  rb.recv_bytes = {rb.send_bytes[0], 0};
  rb.recv.clear();
  *unpacked = UnpackInput(l, &rb);
  return rb;
}

TEST(EmbeddingInputVbeMessage, FormWordKeepsWeightedAndSlots) {
  EXPECT_EQ(FormWord(false, -1), 0);
  EXPECT_EQ(FormWord(true, -1), 1);
  for (bool w : {false, true})
    for (int64_t slots : {int64_t{-1}, int64_t{0}, int64_t{3}, int64_t{1} << 40}) {
      EXPECT_EQ(FormWeighted(FormWord(w, slots)), w);
      EXPECT_EQ(FormSlots(FormWord(w, slots)), slots);
    }
}

TEST(EmbeddingInputVbeMessage, EachUnitCarriesItsFeaturesBagsOnly) {
  const Layout l = UserItemLayout();
  const Padded p;
  Status plain_ok, vbe_ok;
  const RoutedBatch plain = RouteAndUnpackOwn(l, p.Of(false), &plain_ok);
  const RoutedBatch vbe = RouteAndUnpackOwn(l, p.Of(true), &vbe_ok);
  ASSERT_TRUE(plain_ok.ok()) << plain_ok.message();
  ASSERT_TRUE(vbe_ok.ok()) << vbe_ok.message();
  // To rank 1: one unit ("u" rows 5-9: id 7), 2 length slots instead of 4.
  EXPECT_EQ(plain.counts_send[kCountFields + 3], 0);
  EXPECT_EQ(vbe.counts_send[kCountFields + 3], FormWord(false, 2));
  EXPECT_EQ(plain.send_bytes[1], 16u + 8u);  // 4 lengths, 1 id
  EXPECT_EQ(vbe.send_bytes[1], 16u + 8u);    // 1 slot count + 2 lengths (aligned), 1 id
  // To itself: "u" rows 0-4 (ids 1, 3) and "i" (4 ids): 2 + 4 slots instead of 8.
  EXPECT_EQ(vbe.counts_send[3], FormWord(false, 6));
  EXPECT_EQ(plain.send_bytes[0], 32u + 6 * 8u);  // 8 lengths
  EXPECT_EQ(vbe.send_bytes[0], 32u + 6 * 8u);    // 2 slot counts + 6 lengths
  int32_t lens[8];
  std::memcpy(lens, vbe.send.data() + vbe.self_offset, sizeof lens);
  EXPECT_EQ(std::vector<int32_t>(lens, lens + 8), (std::vector<int32_t>{2, 4, 1, 1, 1, 1, 1, 1}));
  // The owner reads the same runs from both forms.
  ASSERT_EQ(plain.shards.size(), vbe.shards.size());
  for (size_t s = 0; s < plain.shards.size(); ++s) {
    ASSERT_EQ(plain.shards[s].runs.size(), vbe.shards[s].runs.size());
    EXPECT_EQ(plain.shards[s].num_ids, vbe.shards[s].num_ids);
    for (size_t r = 0; r < plain.shards[s].runs.size(); ++r) {
      const kernels::BagRun& a = plain.shards[s].runs[r];
      const kernels::BagRun& b = vbe.shards[s].runs[r];
      ASSERT_EQ(a.num_bags, b.num_bags);
      EXPECT_EQ(a.io_offset, b.io_offset);
      for (int64_t k = 0; k <= a.num_bags; ++k) EXPECT_EQ(a.offsets[k], b.offsets[k]);
      for (int64_t k = 0; k < a.offsets[a.num_bags]; ++k) EXPECT_EQ(a.rows[k], b.rows[k]);
    }
  }
  EXPECT_EQ(plain.ret_target, vbe.ret_target);
  EXPECT_EQ(plain.ret_floats_total, vbe.ret_floats_total);
}

TEST(EmbeddingInputVbeMessage, WideBatchSavesTheEmptyBagsSlots) {
  // P = 1000 samples, "u" with 10 bags: its units carry 10 slots each, not 1000.
  const Layout l = UserItemLayout();
  std::vector<int32_t> lengths(2000, 0);
  std::vector<int64_t> ids;
  for (int b = 0; b < 10; ++b) {
    lengths[b] = 1;
    ids.push_back(b);
  }
  for (int b = 0; b < 1000; ++b) {
    lengths[1000 + b] = 1;
    ids.push_back(b % 10);
  }
  const std::vector<int64_t> bags = {10, 1000};
  Batch batch{
      1000, 2, lengths.data(), lengths.size(), ids.data(), DType::kInt64, ids.size(), nullptr,
      0,    {}};
  RoutedBatch plain, vbe;
  ASSERT_TRUE(
      RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, batch, &plain).ok());
  batch.feature_bags = bags.data();
  ASSERT_TRUE(
      RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, batch, &vbe).ok());
  // To rank 1 (ids 5-9 of "u"): 1000 lengths against 1 count and 10 lengths.
  EXPECT_EQ(plain.send_bytes[1], 4000u + 5 * 8u);
  EXPECT_EQ(vbe.send_bytes[1], 48u + 5 * 8u);
}

TEST(EmbeddingInputVbeMessage, MalformedSlotCountsAreAnInternalError) {
  const Layout l = UserItemLayout();
  const Padded p;
  RoutedBatch rb;
  ASSERT_TRUE(
      RouteBatch(ExecContext(), l, RouteOptions{BoundsPolicy::kError, true}, p.Of(true), &rb).ok());
  rb.counts_recv.assign(2 * kCountFields, 0);
  std::memcpy(rb.counts_recv.data(), rb.counts_send.data(), kCountFields * sizeof(int64_t));
  rb.recv_bytes = {rb.send_bytes[0], 0};
  const int32_t too_many = 5;  // more than the batch's 4 samples
  std::memcpy(rb.send.data() + rb.self_offset, &too_many, sizeof too_many);
  const Status s = UnpackInput(l, &rb);
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_NE(s.message().find("length slots"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardrec::embedding
