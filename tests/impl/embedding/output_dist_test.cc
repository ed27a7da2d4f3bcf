// The return message's lookup in two parts: the runs whose rows travel, then this rank's own
// (the overlap of the return exchange with the own lookup relies on it). Each part writes exactly
// its own rows, and together they give the bits of one lookup over every run.
#include "impl/embedding/output_dist.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "impl/embedding/param_store.h"
#include "impl/embedding/vbe.h"
#include "impl/sharding/layout.h"
#include "same_bytes.h"

namespace shardrec::embedding {
namespace {

// One table of a test plan and how it is sharded (`rank`: a table-wise table's).
struct TableSpec {
  const char* name;
  int64_t rows;
  int32_t dim;
  std::vector<int32_t> features;
  enum Kind { kRowWise, kTableWise, kDataParallel } kind;
  int32_t rank = 0;
};

// Rank 0's layout and initialised parameters (the layout outlives the store: built in place).
struct Collection {
  Layout l;
  ParamStore params;
};

// Features "a", "b", ... over `world` ranks.
void Build(int32_t world, int32_t num_features, const std::vector<TableSpec>& specs,
           Collection* c) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = world;
  plan->local_world_size = world;
  for (int32_t f = 0; f < num_features; ++f)
    plan->features.push_back({std::string(1, static_cast<char>('a' + f)), 1.0f});
  for (const TableSpec& spec : specs) {
    sharding::TableConfig t;
    t.name = spec.name;
    t.rows = spec.rows;
    t.dim = spec.dim;
    t.features = spec.features;
    plan->tables.push_back(t);
    plan->table_plans.push_back(spec.kind == TableSpec::kRowWise ? sharding::MakeRowWise(t, world)
                                : spec.kind == TableSpec::kTableWise
                                    ? sharding::MakeTableWise(t, spec.rank)
                                    : sharding::MakeDataParallel(t, world));
  }
  ASSERT_TRUE(
      BuildLayout(plan, 0,
                  std::vector<optim::OptimizerType>(specs.size(), optim::OptimizerType::kSgd),
                  &c->l)
          .ok());
  ASSERT_TRUE(c->params.Allocate(&c->l, /*huge_pages=*/false).ok());
  ASSERT_TRUE(c->params.Initialise(7, ExecContext()).ok());
}

// A batch of B samples per feature, bag (f, b) of length(f, b) ids id(f, b, k), routed at rank 0.
struct TestBatch {
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  RoutedBatch rb;
};

template <typename Length, typename Id>
void Route(const Layout& l, int64_t B, Length length, Id id, TestBatch* t) {
  const auto nf = static_cast<int32_t>(l.plan->features.size());
  for (int32_t f = 0; f < nf; ++f)
    for (int64_t b = 0; b < B; ++b) {
      const int32_t len = length(f, b);
      t->lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) t->ids.push_back(id(f, b, k));
    }
  const std::vector<int32_t>& len = t->lengths;
  const std::vector<int64_t>& ids = t->ids;
  Batch batch{B, nf, len.data(), len.size(), ids.data(), DType::kInt64, ids.size(), nullptr, 0, {}};
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{}, batch, &t->rb).ok());
}

// Rank 1 (of two) is taken to have sent the very same message as this rank, so this rank looks
// up rows for two sources: its own (kept) and rank 1's (travelling).
void PeerSentTheSame(const Layout& l, RoutedBatch* rb) {
  const int64_t* own = &rb->counts_send[0];
  rb->counts_recv.assign(own, own + kCountFields);
  rb->counts_recv.insert(rb->counts_recv.end(), own, own + kCountFields);
  rb->recv_bytes = {rb->send_bytes[0], rb->send_bytes[0]};
  rb->recv.assign(
      rb->send.begin() + static_cast<std::ptrdiff_t>(rb->self_offset),
      rb->send.begin() + static_cast<std::ptrdiff_t>(rb->self_offset + rb->send_bytes[0]));
  ASSERT_TRUE(UnpackInput(l, rb).ok());
}

// The bags of the tests on two ranks: some empty, some with ids in only one row block.
int32_t SomeLength(int32_t f, int64_t b) { return static_cast<int32_t>((b * 5 + f) % 4); }

TEST(EmbeddingOutputDist, TravellingAndOwnRunsSplitTheLookup) {
  Collection c;
  ASSERT_NO_FATAL_FAILURE(Build(
      2, 2, {{"rw", 40, 8, {0}, TableSpec::kRowWise}, {"tw", 30, 4, {1}, TableSpec::kTableWise, 0}},
      &c));
  const Layout& l = c.l;
  ParamStore& params = c.params;
  TestBatch t;
  ASSERT_NO_FATAL_FAILURE(Route(
      l, 12, SomeLength, [](int32_t f, int64_t b, int32_t k) { return (b * 11 + k * 7 + f) % 19; },
      &t));
  RoutedBatch& rb = t.rb;
  ASSERT_NO_FATAL_FAILURE(PeerSentTheSame(l, &rb));
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

// The combine writes the rows of the first unit to reach each output column instead of zeroing
// and adding: on any background it must give the bits of zero-then-add in unit order, including
// the rows a first unit does not return (zeroed) and a -0.0f row (+0.0f, as 0.0f + -0.0f gives).
TEST(EmbeddingOutputDist, CombineWritesWhatZeroThenAddGave) {
  // Rank 0's output: "a" is summed from both ranks' row blocks, "b" comes only from rank 1, "c"
  // is looked up here.
  Collection c;
  ASSERT_NO_FATAL_FAILURE(Build(2, 3,
                                {{"rw", 40, 8, {0}, TableSpec::kRowWise},
                                 {"tw", 30, 4, {1}, TableSpec::kTableWise, 1},
                                 {"dp", 20, 4, {2}, TableSpec::kDataParallel}},
                                &c));
  const Layout& l = c.l;
  ParamStore& params = c.params;
  const int64_t B = 12;
  TestBatch t;
  ASSERT_NO_FATAL_FAILURE(Route(
      l, B, SomeLength,
      [](int32_t f, int64_t b, int32_t k) { return (b * 11 + k * 7 + f) % (f == 0 ? 40 : 19); },
      &t));
  RoutedBatch& rb = t.rb;
  // Rank 1's rows for this rank's samples are made up (every third one -0.0f), sized as the
  // return exchange announces them.
  ASSERT_NO_FATAL_FAILURE(PeerSentTheSame(l, &rb));
  std::vector<kernels::LookupJob> jobs;
  std::vector<float> send(rb.ret_floats_total, 0.0f);
  ASSERT_TRUE(LookupToSend(ExecContext(), l, params, rb, &jobs, send.data()).ok());
  for (size_t i = rb.ret_self_offset; i < send.size(); i += 5) send[i] = -0.0f;
  size_t recv_floats = 0;
  for (size_t v : ReturnRecvCounts(rb)) recv_floats += v;
  ASSERT_GT(recv_floats, 0u);
  std::vector<float> recv(recv_floats);
  for (size_t i = 0; i < recv.size(); ++i)
    recv[i] = i % 3 == 0 ? -0.0f : 0.25f * static_cast<float>(i % 17) - 2.0f;
  const float* self = send.data() + rb.ret_self_offset;

  const int64_t D = l.output_dim;
  std::vector<float> zeroed(static_cast<size_t>(B * D), 0.0f);
  ASSERT_TRUE(
      CombineOutput(ExecContext(), l, params, rb, recv.data(), self, &jobs, zeroed.data()).ok());
  std::vector<float> out(zeroed.size(), std::nanf(""));
  ASSERT_TRUE(
      CombineOutput(ExecContext(), l, params, rb, recv.data(), self, &jobs, out.data()).ok());
  EXPECT_TRUE(testing::SameBytes(zeroed.data(), out.data(), out.size() * sizeof(float)));

  // Zero-then-add in unit order, by hand, for the units' columns; the data-parallel columns are
  // the lookup's (compared through the background test above).
  std::vector<float> ref(out.size(), 0.0f);
  std::vector<uint8_t> unit_col(static_cast<size_t>(D), 0);
  int64_t others = 0;
  const int64_t* targets = rb.ret_target.data();
  for (int32_t d = 0; d < l.world; ++d) {
    int64_t at = d == l.rank ? 0 : others;
    for (int32_t u : l.units_to_rank[d]) {
      const Unit& unit = l.units[u];
      const int64_t col = l.pairs[unit.pair].out_offset + unit.col_offset;
      for (int32_t c = 0; c < unit.cols; ++c) unit_col[col + c] = 1;
      for (int64_t k = 0; k < rb.ret_count[u]; ++k) {
        const float* src = (d == l.rank ? self : recv.data()) + at + k * unit.cols;
        for (int32_t c = 0; c < unit.cols; ++c) ref[targets[k] * D + col + c] += src[c];
      }
      targets += rb.ret_count[u];
      at += rb.ret_count[u] * unit.cols;
    }
    if (d != l.rank) others = at;
  }
  int64_t unit_zeros = 0;
  for (int64_t i = 0; i < B * D; ++i) {
    if (unit_col[i % D] == 0) continue;
    ASSERT_TRUE(testing::SameBytes(&ref[i], &out[i], sizeof(float))) << "float " << i;
    unit_zeros += out[i] == 0.0f ? 1 : 0;
  }
  EXPECT_GT(unit_zeros, 0);  // some rows came back as -0.0f or not at all
}

// At world 1 the own rows of a unit that is first on its columns and has a bag for every sample
// are looked up straight into the output (DirectRows): the same bits as through the return
// message and the combine, on any background, including a bag whose rows are all -0.0f (the
// kernel's sum starts from +0.0f, as zero-then-add did).
TEST(EmbeddingOutputDist, OwnRowsLookedUpStraightIntoTheOutput) {
  // "a" and "c" read the table "full", "b" the table "sparse".
  Collection c;
  ASSERT_NO_FATAL_FAILURE(Build(1, 3,
                                {{"full", 40, 8, {0, 2}, TableSpec::kTableWise, 0},
                                 {"sparse", 30, 4, {1}, TableSpec::kTableWise, 0}},
                                &c));
  const Layout& l = c.l;
  ParamStore& params = c.params;
  const std::vector<float> negative_zero(8, -0.0f);
  params.WriteRow(l.local[l.tables[0].shard_local[0]], 3, negative_zero.data());

  // "a" and "c" have a bag for every sample (sample 0 of "a" reads only the -0.0f row), "b" not.
  const int64_t B = 10;
  TestBatch t;
  ASSERT_NO_FATAL_FAILURE(Route(
      l, B,
      [](int32_t f, int64_t b) {
        return f == 1 ? static_cast<int32_t>(b % 3) : 1 + static_cast<int32_t>(b % 3);
      },
      [](int32_t f, int64_t b, int32_t k) -> int64_t {
        return f == 0 && b == 0 ? 3 : (b * 11 + k * 7 + f) % (f == 1 ? 30 : 40);
      },
      &t));
  RoutedBatch& rb = t.rb;
  rb.counts_recv.assign(rb.counts_send.begin(), rb.counts_send.end());
  rb.recv_bytes = {rb.send_bytes[0]};
  ASSERT_TRUE(UnpackInput(l, &rb).ok());

  const int64_t D = l.output_dim;
  std::vector<kernels::LookupJob> jobs;
  std::vector<float> send(rb.ret_floats_total, 0.0f);
  ASSERT_TRUE(LookupToSend(ExecContext(), l, params, rb, &jobs, send.data()).ok());
  std::vector<float> combined(static_cast<size_t>(B * D), 0.0f);
  ASSERT_TRUE(CombineOutput(ExecContext(), l, params, rb, nullptr, send.data() + rb.ret_self_offset,
                            &jobs, combined.data())
                  .ok());

  std::vector<float> out(combined.size(), std::nanf(""));
  DirectRows direct;
  OwnRowsDirect(l, rb, out.data(), nullptr, &direct);
  ASSERT_EQ(direct.runs.size(), 2u);
  for (const DirectRows::Run& run : direct.runs) EXPECT_EQ(run.out, out.data());
  int direct_units = 0;
  for (size_t u = 0; u < l.units.size(); ++u) {
    const bool full_unit = l.units[u].table == 0;
    EXPECT_EQ(direct.unit[u] != 0, full_unit) << "unit " << u;
    direct_units += direct.unit[u];
  }
  ASSERT_EQ(direct_units, 2);
  std::vector<float> send2(rb.ret_floats_total, 0.0f);
  ASSERT_TRUE(
      LookupToSend(ExecContext(), l, params, rb, &jobs, send2.data(), {}, RunSet::kAll, &direct)
          .ok());
  ASSERT_TRUE(CombineOutput(ExecContext(), l, params, rb, nullptr,
                            send2.data() + rb.ret_self_offset, &jobs, out.data(), nullptr, {},
                            nullptr, direct.unit.data())
                  .ok());
  EXPECT_TRUE(testing::SameBytes(combined.data(), out.data(), out.size() * sizeof(float)));
  EXPECT_FALSE(std::signbit(out[0]));  // sample 0 of "a": the -0.0f row's sum
  EXPECT_EQ(out[0], 0.0f);
}

// A VBE batch's places at world 1 take the own rows straight from the lookup too: a feature read
// through inverse indices into the scratch (its B_f rows), and one read in sample order into the
// caller's output (stride D), each when every one of its bags holds ids; a feature with empty bags
// still goes through the combine. The places get the bits of the combine, on any background.
TEST(EmbeddingOutputDist, VbePlacesTakeOwnRowsStraightFromTheLookup) {
  // "a" and "c" read the table "full", "b" the table "sparse".
  Collection c;
  ASSERT_NO_FATAL_FAILURE(Build(1, 3,
                                {{"full", 40, 8, {0, 2}, TableSpec::kTableWise, 0},
                                 {"sparse", 30, 4, {1}, TableSpec::kTableWise, 0}},
                                &c));
  const Layout& l = c.l;
  ParamStore& params = c.params;
  const int64_t B = 10;
  const std::vector<int64_t> sizes = {4, B, B};  // "a": 4 bags read through inverse indices
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  for (int32_t f = 0; f < 3; ++f)
    for (int64_t b = 0; b < sizes[f]; ++b) {
      const int32_t len = f == 1 ? static_cast<int32_t>(b % 3) : 1 + static_cast<int32_t>(b % 2);
      lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) ids.push_back((b * 11 + k * 7 + f) % (f == 1 ? 30 : 40));
    }
  std::vector<int64_t> inverse;
  for (int32_t f = 0; f < 3; ++f)
    for (int64_t b = 0; b < B; ++b) inverse.push_back(f == 0 ? (b * 3) % 4 : b);
  VbeBatch vbe;
  vbe.kjt = Batch{
      B, 3, lengths.data(), lengths.size(), ids.data(), DType::kInt64, ids.size(), nullptr, 0, {}};
  vbe.feature_batch_sizes = sizes.data();
  vbe.num_feature_batch_sizes = sizes.size();
  vbe.inverse = inverse.data();
  vbe.num_inverse = inverse.size();
  VbeStep step;
  Batch padded;
  ASSERT_TRUE(step.Prepare(l, vbe, RouteOptions{}, &padded).ok());
  PairRows* places = step.places();
  ASSERT_NE(places, nullptr);
  RoutedBatch rb;
  ASSERT_TRUE(RouteBatch(ExecContext(), l, RouteOptions{}, padded, &rb).ok());
  rb.counts_recv.assign(rb.counts_send.begin(), rb.counts_send.end());
  rb.recv_bytes = {rb.send_bytes[0]};
  ASSERT_TRUE(UnpackInput(l, &rb).ok());

  const size_t out_len = static_cast<size_t>(B * l.output_dim);
  std::vector<kernels::LookupJob> jobs;
  std::vector<float> send(rb.ret_floats_total, 0.0f);
  std::vector<float> combined(out_len, 0.0f);
  std::vector<float> combined_aux(step.aux_len(), 0.0f);
  ASSERT_TRUE(LookupToSend(ExecContext(), l, params, rb, &jobs, send.data()).ok());
  places->aux = combined_aux.data();
  ASSERT_TRUE(CombineOutput(ExecContext(), l, params, rb, nullptr, send.data() + rb.ret_self_offset,
                            &jobs, combined.data(), nullptr, {}, places)
                  .ok());

  std::vector<float> out(out_len, std::nanf(""));
  std::vector<float> aux(step.aux_len(), std::nanf(""));
  places->aux = aux.data();
  DirectRows direct;
  OwnRowsDirect(l, rb, out.data(), places, &direct);
  std::vector<const float*> buffers;
  for (size_t u = 0; u < l.units.size(); ++u) {
    const int32_t feature = l.pairs[l.units[u].pair].feature;
    EXPECT_EQ(direct.unit[u] != 0, feature != 1) << "unit " << u;
  }
  for (const DirectRows::Run& run : direct.runs) buffers.push_back(run.out);
  ASSERT_EQ(buffers.size(), 2u);
  EXPECT_NE(buffers[0], buffers[1]);  // one run into the scratch, one into the caller's output
  std::vector<float> send2(rb.ret_floats_total, 0.0f);
  ASSERT_TRUE(
      LookupToSend(ExecContext(), l, params, rb, &jobs, send2.data(), {}, RunSet::kAll, &direct)
          .ok());
  ASSERT_TRUE(CombineOutput(ExecContext(), l, params, rb, nullptr,
                            send2.data() + rb.ret_self_offset, &jobs, out.data(), nullptr, {},
                            places, direct.unit.data())
                  .ok());
  EXPECT_TRUE(testing::SameBytes(combined_aux.data(), aux.data(), aux.size() * sizeof(float)));
  // The caller's output: only the places are written ("a"'s columns are Expand's, later).
  for (size_t p = 0; p < l.pairs.size(); ++p) {
    const PairRows::Place& at = places->pairs[p];
    if (at.aux) continue;
    for (int64_t r = 0; r < at.rows; ++r)
      EXPECT_TRUE(testing::SameBytes(combined.data() + at.offset + r * at.stride,
                                     out.data() + at.offset + r * at.stride,
                                     static_cast<size_t>(at.cols) * sizeof(float)))
          << "pair " << p << " row " << r;
  }
}

}  // namespace
}  // namespace shardrec::embedding
