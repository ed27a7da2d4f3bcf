// The host's part of the device route: the flattened plan, the workspace carving, the sizing
// between the two step groups (SizeMessages' arithmetic from the scans) and the error messages.
#include "impl/embedding/gpu/route.h"

#include <cstring>

namespace shardrec::embedding {

namespace {

using kernels::simt_body::RouteParams;
using kernels::simt_body::RouteStatus;

size_t Align8(size_t n) { return (n + 7) & ~size_t{7}; }

// Carves typed arrays out of one workspace: a first walk with a null base sizes it.
class Carver {
 public:
  explicit Carver(uint8_t* base) : base_(base) {}
  template <class T>
  T* Take(size_t n) {
    at_ = (at_ + 15) & ~size_t{15};
    T* p = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + at_);
    at_ += sizeof(T) * n;
    return p;
  }
  size_t bytes() const { return (at_ + 15) & ~size_t{15}; }

 private:
  uint8_t* base_;
  size_t at_ = 0;
};

// The count work and the read-back block, carved in this order.
struct CountArrays {
  int64_t* bag_offsets = nullptr;
  int64_t* wide = nullptr;
  int32_t* slot_lengths = nullptr;
  int64_t* id_scan = nullptr;
  int64_t* ne_scan = nullptr;
  float* mean_div = nullptr;
  RouteStatus* status = nullptr;  // read back with the two gathers after it, in one copy
  int64_t* slot_ids_at = nullptr;
  int64_t* slot_ne_at = nullptr;
  size_t readback_bytes = 0;
};

CountArrays CarveCount(uint8_t* base, const RouteTables& t, int64_t B, int64_t num_lengths,
                       bool pooled, size_t num_pairs, size_t* bytes) {
  Carver c(base);
  CountArrays a;
  const size_t cells = static_cast<size_t>(t.num_slots) * static_cast<size_t>(B);
  const size_t real = static_cast<size_t>(t.num_real_slots) * static_cast<size_t>(B);
  const size_t lengths = static_cast<size_t>(num_lengths);
  a.bag_offsets = c.Take<int64_t>(lengths + 1);
  a.wide = c.Take<int64_t>((lengths > cells ? lengths : cells) + 1);
  a.slot_lengths = c.Take<int32_t>(cells);
  a.id_scan = c.Take<int64_t>(cells + 1);
  a.ne_scan = c.Take<int64_t>(real + 1);
  a.mean_div = pooled ? c.Take<float>(num_pairs * static_cast<size_t>(B)) : nullptr;
  // The read-back block: status and gathers contiguous (RouteStatus is a multiple of 8 bytes).
  a.status = c.Take<RouteStatus>(1);
  // The sizing pass (base null) only counts bytes: no pointer arithmetic on null.
  if (a.status != nullptr) {
    a.slot_ids_at = reinterpret_cast<int64_t*>(a.status + 1);
    a.slot_ne_at = a.slot_ids_at + t.num_slots + 1;
  }
  a.readback_bytes = sizeof(RouteStatus) +
                     sizeof(int64_t) * (static_cast<size_t>(t.num_slots) + t.num_real_slots + 2);
  c.Take<uint8_t>(a.readback_bytes - sizeof(RouteStatus));
  *bytes = c.bytes();
  return a;
}

static_assert(sizeof(RouteStatus) % 8 == 0, "the gathers follow the status block");

// The errors in RouteBatch's order: structure, weights, ids.
Status ErrorOf(const Layout& l, const RouteOptions& o, const Batch& batch, const RouteStatus& st) {
  using kernels::simt_body::HasMin;
  using kernels::simt_body::MinOf;
  const auto& plan = *l.plan;
  if (HasMin(st.inv_neg))
    return NegativeLengthError(plan, batch.batch_size, static_cast<size_t>(MinOf(st.inv_neg)),
                               static_cast<int32_t>(st.neg_len));
  if (st.total != static_cast<int64_t>(batch.num_values))
    return LengthSumError(static_cast<size_t>(st.total), batch.num_values);
  if (o.check_non_finite && HasMin(st.inv_weight))
    return NonFiniteWeightError(plan, batch.batch_size, static_cast<size_t>(st.weight_bag),
                                static_cast<size_t>(MinOf(st.inv_weight)), st.weight);
  if (HasMin(st.inv_id)) {
    const int64_t key = MinOf(st.inv_id);
    const auto nv = static_cast<int64_t>(batch.num_values);
    const Pair& pair = l.pairs[static_cast<size_t>(key / nv)];
    return IdOutOfRangeError(plan, pair.feature, pair.table, st.id_sample,
                             static_cast<size_t>(key % nv), st.id_value);
  }
  return Status::Ok();
}

template <class T>
Status Upload(RouteBackend& be, T* dst, const std::vector<T>& src) {
  return src.empty() ? Status::Ok() : be.ToDevice(dst, src.data(), sizeof(T) * src.size());
}

template <class T>
Status CopyBack(RouteBackend& be, std::vector<T>* out, const T* src, size_t n) {
  out->resize(n);
  if (n == 0) return Status::Ok();
  return be.ToHost(out->data(), src, sizeof(T) * n);
}

}  // namespace

Status RouteBackend::Tables(const RouteTables& t, const int32_t** i32, const int64_t** i64) {
  Carver sizing(nullptr);
  sizing.Take<int32_t>(t.i32.size());
  sizing.Take<int64_t>(t.i64.size());
  void* ws = nullptr;
  SR_RETURN_IF_ERROR(Workspace(2, sizing.bytes(), &ws));
  Carver c(static_cast<uint8_t*>(ws));
  int32_t* d32 = c.Take<int32_t>(t.i32.size());
  int64_t* d64 = c.Take<int64_t>(t.i64.size());
  SR_RETURN_IF_ERROR(Upload(*this, d32, t.i32));
  SR_RETURN_IF_ERROR(Upload(*this, d64, t.i64));
  *i32 = d32;
  *i64 = d64;
  return Status::Ok();
}

RouteTables BuildRouteTables(const Layout& l) {
  RouteTables t;
  const size_t np = l.pairs.size();
  std::vector<int32_t> slot_of_unit(l.units.size(), -1);
  std::vector<int32_t> slot_dest, slot_in_dest;
  t.dest_slot_begin.push_back(0);
  for (int32_t d = 0; d < l.world; ++d) {
    int32_t k = 0;
    for (int32_t u : l.units_to_rank[d]) {
      slot_of_unit[u] = static_cast<int32_t>(t.slot_unit.size());
      t.slot_unit.push_back(u);
      slot_dest.push_back(d);
      slot_in_dest.push_back(k++);
    }
    t.dest_slot_begin.push_back(static_cast<int32_t>(t.slot_unit.size()));
  }
  t.num_real_slots = static_cast<int32_t>(t.slot_unit.size());
  std::vector<int32_t> dp_slot(np, -1);
  int32_t next = t.num_real_slots;
  for (int32_t p : l.dp_pairs) dp_slot[p] = next++;
  t.num_slots = next;
  std::vector<int32_t> feature, flags, block_begin{0}, slot_begin{0}, slots;
  std::vector<int64_t> rows, first;
  for (size_t p = 0; p < np; ++p) {
    const Pair& pair = l.pairs[p];
    const TableLayout& tl = l.tables[pair.table];
    feature.push_back(pair.feature);
    rows.push_back(l.plan->tables[pair.table].rows);
    flags.push_back((pair.mean ? kernels::simt_body::kRoutePairMean : 0) |
                    (tl.data_parallel ? kernels::simt_body::kRoutePairDp : 0));
    if (tl.data_parallel) {
      first.push_back(0);
      slots.push_back(dp_slot[p]);
      slot_begin.push_back(static_cast<int32_t>(slots.size()));
    } else {
      for (const RowBlock& block : tl.blocks) {
        first.push_back(block.row_offset);
        for (int32_t s : block.shards) slots.push_back(slot_of_unit[l.unit_of[p][s]]);
        slot_begin.push_back(static_cast<int32_t>(slots.size()));
      }
    }
    block_begin.push_back(static_cast<int32_t>(first.size()));
  }
  auto append = [](std::vector<int32_t>* to, const std::vector<int32_t>& v) {
    const size_t at = to->size();
    to->insert(to->end(), v.begin(), v.end());
    return at;
  };
  t.pair_feature = append(&t.i32, feature);
  t.pair_flags = append(&t.i32, flags);
  t.pair_block_begin = append(&t.i32, block_begin);
  t.block_slot_begin = append(&t.i32, slot_begin);
  t.block_slots = append(&t.i32, slots);
  t.slot_dest = append(&t.i32, slot_dest);
  t.slot_in_dest = append(&t.i32, slot_in_dest);
  t.pair_rows = 0;
  t.i64 = rows;
  t.block_first = t.i64.size();
  t.i64.insert(t.i64.end(), first.begin(), first.end());
  return t;
}

bool RouteStatusRejects(const RouteStatus& st, int64_t num_values, bool check_non_finite) {
  using kernels::simt_body::HasMin;
  return HasMin(st.inv_neg) || st.total != num_values ||
         (check_non_finite && HasMin(st.inv_weight)) || HasMin(st.inv_id);
}

Status RouteCountOnly(const Layout& l, const RouteTables& t, const RouteOptions& o,
                      const Batch& batch, RouteBackend& be, RouteCounted* out) {
  SR_RETURN_IF_ERROR(CheckBatchFields(*l.plan, batch));
  const int64_t B = batch.batch_size;
  const bool pooled = !l.sequence;
  const size_t np = l.pairs.size();
  size_t bytes = 0;
  CarveCount(nullptr, t, B, static_cast<int64_t>(batch.num_lengths), pooled, np, &bytes);
  void* ws = nullptr;
  SR_RETURN_IF_ERROR(be.Workspace(0, bytes, &ws));
  const CountArrays a = CarveCount(static_cast<uint8_t*>(ws), t, B,
                                   static_cast<int64_t>(batch.num_lengths), pooled, np, &bytes);
  const int32_t* i32 = nullptr;
  const int64_t* i64 = nullptr;
  SR_RETURN_IF_ERROR(be.Tables(t, &i32, &i64));
  RouteParams& p = out->params;
  p = RouteParams();
  p.batch_size = B;
  p.num_lengths = static_cast<int64_t>(batch.num_lengths);
  p.num_values = static_cast<int64_t>(batch.num_values);
  p.lengths = batch.lengths;
  p.values = batch.values;
  p.weights = batch.weights;
  p.ids64 = batch.values_dtype == DType::kInt64 ? 1 : 0;
  p.bounds = static_cast<int32_t>(o.bounds);
  p.check_non_finite = o.check_non_finite ? 1 : 0;
  p.sequence = l.sequence ? 1 : 0;
  p.num_pairs = static_cast<int32_t>(np);
  p.num_slots = t.num_slots;
  p.num_real_slots = t.num_real_slots;
  p.pair_feature = i32 + t.pair_feature;
  p.pair_flags = i32 + t.pair_flags;
  p.pair_block_begin = i32 + t.pair_block_begin;
  p.block_slot_begin = i32 + t.block_slot_begin;
  p.block_slots = i32 + t.block_slots;
  p.slot_dest = i32 + t.slot_dest;
  p.slot_in_dest = i32 + t.slot_in_dest;
  p.pair_rows = i64 + t.pair_rows;
  p.block_first = i64 + t.block_first;
  p.bag_offsets = a.bag_offsets;
  p.wide = a.wide;
  p.slot_lengths = a.slot_lengths;
  p.id_scan = a.id_scan;
  p.ne_scan = a.ne_scan;
  p.mean_div = a.mean_div;
  p.slot_ids_at = a.slot_ids_at;
  p.slot_ne_at = a.slot_ne_at;
  p.status = a.status;
  out->readback = a.status;
  out->readback_bytes = a.readback_bytes;
  return be.Count(p);
}

size_t RouteReadbackBytes(const RouteTables& t) {
  return sizeof(RouteStatus) +
         sizeof(int64_t) * (static_cast<size_t>(t.num_slots) + t.num_real_slots + 2);
}

Status RouteSize(const Layout& l, const RouteTables& t, const RouteOptions& o, const Batch& batch,
                 const uint8_t* readback, RoutedBatch* rb, RouteFillPlan* plan) {
  RouteStatus st;
  std::memcpy(&st, readback, sizeof(st));
  SR_RETURN_IF_ERROR(ErrorOf(l, o, batch, st));
  std::vector<int64_t>& ids_at = plan->ids_at;
  std::vector<int64_t>& ne_at = plan->ne_at;
  ids_at.resize(static_cast<size_t>(t.num_slots) + 1);
  ne_at.resize(static_cast<size_t>(t.num_real_slots) + 1);
  std::memcpy(ids_at.data(), readback + sizeof(st), 8 * ids_at.size());
  std::memcpy(ne_at.data(), readback + sizeof(st) + 8 * ids_at.size(), 8 * ne_at.size());
  const int64_t B = batch.batch_size;
  const bool weighted = batch.weights != nullptr;

  // SizeMessages' arithmetic from the scans.
  const int32_t world = l.world;
  rb->batch_size = B;
  rb->num_values = static_cast<int64_t>(batch.num_values);
  rb->weighted = weighted;
  rb->send_bytes.assign(world, 0);
  rb->counts_send.assign(static_cast<size_t>(world) * kCountFields, 0);
  rb->ret_count.assign(l.units.size(), 0);
  rb->unit_ids.assign(l.units.size(), 0);
  rb->ret_floats_from.assign(world, 0);
  std::vector<int64_t> dest_base(world), dest_rows(world), dest_weights(world),
      dest_first_id(world);
  size_t total = 0, others = 0;
  for (int32_t d = 0; d < world; ++d) {
    int64_t n = 0;
    for (int32_t s = t.dest_slot_begin[d]; s < t.dest_slot_begin[d + 1]; ++s) {
      const int32_t u = t.slot_unit[s];
      const int64_t ids = ids_at[s + 1] - ids_at[s];
      const int64_t ret = l.sequence ? ids : ne_at[s + 1] - ne_at[s];
      rb->ret_count[u] = ret;
      rb->unit_ids[u] = ids;
      rb->ret_floats_from[d] += static_cast<size_t>(ret) * l.units[u].cols;
      n += ids;
    }
    const size_t units = static_cast<size_t>(t.dest_slot_begin[d + 1] - t.dest_slot_begin[d]);
    const size_t rows_off = Align8(4 * units * static_cast<size_t>(B));
    const size_t weights_off = rows_off + 8 * static_cast<size_t>(n);
    const size_t msg = weights_off + (weighted ? Align8(4 * static_cast<size_t>(n)) : 0);
    rb->send_bytes[d] = msg;
    int64_t* c = &rb->counts_send[static_cast<size_t>(d) * kCountFields];
    c[0] = 0;
    c[1] = B;
    c[2] = n;
    c[3] = weighted ? 1 : 0;
    dest_rows[d] = static_cast<int64_t>(rows_off);
    dest_weights[d] = static_cast<int64_t>(weights_off);
    dest_first_id[d] = ids_at[t.dest_slot_begin[d]];
    total += msg;
    if (d != l.rank) others += msg;
  }
  // Messages to the others in rank order, then the one this rank keeps (RouteBatch's order).
  rb->self_offset = others;
  size_t at = 0;
  for (int32_t d = 0; d < world; ++d) {
    dest_base[d] = static_cast<int64_t>(d == l.rank ? others : at);
    if (d != l.rank) at += rb->send_bytes[d];
  }
  plan->send_bytes = total;
  plan->targets =
      static_cast<size_t>(l.sequence ? ids_at[t.num_real_slots] : ne_at[t.num_real_slots]);
  plan->dp_total = static_cast<size_t>(ids_at[t.num_slots] - ids_at[t.num_real_slots]);
  plan->dests.resize(4 * static_cast<size_t>(world));
  for (int32_t d = 0; d < world; ++d) {
    plan->dests[d] = dest_base[d];
    plan->dests[world + d] = dest_rows[d];
    plan->dests[2 * world + d] = dest_weights[d];
    plan->dests[3 * world + d] = dest_first_id[d];
  }
  return Status::Ok();
}

Status RouteFill(const Layout& l, const Batch& batch, RouteBackend& be, const RouteCounted& counted,
                 const RouteFillPlan& plan, uint8_t* send, RoutedBatch* rb) {
  const int64_t B = batch.batch_size;
  const int32_t world = l.world;
  const bool pooled = !l.sequence;
  const bool weighted = batch.weights != nullptr;
  const size_t np = l.pairs.size();
  const size_t num_dp = l.dp_pairs.size();
  const size_t total = plan.send_bytes, targets = plan.targets, dp_total = plan.dp_total;
  const size_t dp_off = num_dp * (static_cast<size_t>(B) + 1);
  auto carve_fill = [&](uint8_t* base, RouteParams* q) {
    Carver c(base);
    int64_t* dests = c.Take<int64_t>(4 * static_cast<size_t>(world));
    q->dest_base = dests;
    // The sizing pass (base null) only counts bytes: no pointer arithmetic on null.
    q->dest_rows = dests == nullptr ? nullptr : dests + world;
    q->dest_weights = dests == nullptr ? nullptr : dests + 2 * world;
    q->dest_first_id = dests == nullptr ? nullptr : dests + 3 * world;
    uint8_t* own = c.Take<uint8_t>(send == nullptr ? total : 0);
    q->send = send != nullptr ? send : own;
    q->ret_target = c.Take<int64_t>(targets);
    q->dp_rows = c.Take<int64_t>(dp_total);
    q->dp_weights = weighted ? c.Take<float>(dp_total) : nullptr;
    q->dp_pos = l.sequence ? c.Take<int64_t>(dp_total) : nullptr;
    q->dp_offsets = c.Take<int64_t>(dp_off);
    return c.bytes();
  };
  RouteParams q = counted.params;
  const size_t fill_bytes = carve_fill(nullptr, &q);
  void* ws1 = nullptr;
  SR_RETURN_IF_ERROR(be.Workspace(1, fill_bytes, &ws1));
  carve_fill(static_cast<uint8_t*>(ws1), &q);
  q.send_bytes = static_cast<int64_t>(total);
  SR_RETURN_IF_ERROR(
      be.ToDevice(const_cast<int64_t*>(q.dest_base), plan.dests.data(), 8 * plan.dests.size()));
  SR_RETURN_IF_ERROR(be.Fill(q));

  // Back to the host: the messages unless they stay on the device, and what the sample side
  // needs (the combine, backward's packing and the data-parallel tables).
  if (send == nullptr) {
    SR_RETURN_IF_ERROR(CopyBack(be, &rb->send, q.send, total));
  } else {
    rb->send.clear();
  }
  SR_RETURN_IF_ERROR(CopyBack(be, &rb->ret_target, q.ret_target, targets));
  SR_RETURN_IF_ERROR(CopyBack(be, &rb->dp_rows, q.dp_rows, dp_total));
  SR_RETURN_IF_ERROR(CopyBack(be, &rb->dp_weights, static_cast<const float*>(q.dp_weights),
                              weighted ? dp_total : 0));
  SR_RETURN_IF_ERROR(
      CopyBack(be, &rb->dp_pos, static_cast<const int64_t*>(q.dp_pos), l.sequence ? dp_total : 0));
  SR_RETURN_IF_ERROR(
      CopyBack(be, &rb->dp_offsets, static_cast<const int64_t*>(q.dp_offsets), dp_off));
  // Only MEAN pairs' divisors are ever read (the others are 0 on both routes).
  bool any_mean = false;
  for (const Pair& pair : l.pairs) any_mean = any_mean || pair.mean;
  if (any_mean) {
    SR_RETURN_IF_ERROR(CopyBack(be, &rb->mean_div,
                                static_cast<const float*>(counted.params.mean_div),
                                pooled ? np * static_cast<size_t>(B) : 0));
  } else {
    rb->mean_div.assign(pooled ? np * static_cast<size_t>(B) : 0, 0.0f);
  }
  SR_RETURN_IF_ERROR(be.Wait());
  rb->dp_offsets_begin.resize(num_dp);
  for (size_t k = 0; k < num_dp; ++k) rb->dp_offsets_begin[k] = k * (static_cast<size_t>(B) + 1);
  return Status::Ok();
}

Status RouteWith(const Layout& l, const RouteTables& t, const RouteOptions& o, const Batch& batch,
                 RouteBackend& be, RoutedBatch* rb) {
  RouteCounted counted;
  SR_RETURN_IF_ERROR(RouteCountOnly(l, t, o, batch, be, &counted));
  // The one read-back that sizes everything.
  std::vector<uint8_t> back(counted.readback_bytes);
  SR_RETURN_IF_ERROR(be.ToHost(back.data(), counted.readback, back.size()));
  SR_RETURN_IF_ERROR(be.Wait());
  RouteFillPlan plan;
  SR_RETURN_IF_ERROR(RouteSize(l, t, o, batch, back.data(), rb, &plan));
  return RouteFill(l, batch, be, counted, plan, nullptr, rb);
}

}  // namespace shardrec::embedding
