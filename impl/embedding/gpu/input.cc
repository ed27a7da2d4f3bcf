// The counts exchange that sizes a device input distribution, and the runs placed from the
// counts alone (input.h).
#include "impl/embedding/gpu/input.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

namespace shardrec::embedding {

size_t DeviceCountsTo(const Layout& l, int32_t dest) {
  return kCountFields + 2 * l.units_to_rank[dest].size();
}

size_t DeviceCountsFrom(const Layout& l) { return DeviceCountsTo(l, l.rank); }

void DeviceCountsRecord(const Layout& l, const Status& local_error, const RoutedBatch& rb,
                        std::vector<int64_t>* out) {
  out->clear();
  for (int32_t d = 0; d < l.world; ++d) {
    if (!local_error.ok()) {
      out->push_back(1);
      out->insert(out->end(), DeviceCountsTo(l, d) - 1, 0);
      continue;
    }
    const int64_t* c = &rb.counts_send[static_cast<size_t>(d) * kCountFields];
    out->insert(out->end(), c, c + kCountFields);
    for (int32_t u : l.units_to_rank[d]) {
      const int64_t ids = rb.unit_ids[u];
      out->push_back(ids);
      out->push_back(l.sequence ? ids : rb.ret_count[u]);
    }
  }
}

Status ReadDeviceCounts(const Layout& l, const Status& local_error, std::span<const int64_t> recv,
                        RoutedBatch* rb) {
  if (!local_error.ok()) return local_error;
  const int32_t world = l.world;
  const size_t per = DeviceCountsFrom(l);
  const size_t units = l.units_to_rank[l.rank].size();
  if (recv.size() != per * static_cast<size_t>(world))
    return Status::Internal("input dist: ", recv.size(), " count fields received, expected ",
                            per * static_cast<size_t>(world));
  for (int32_t s = 0; s < world; ++s)
    if (recv[static_cast<size_t>(s) * per] != 0)
      return Status::InvalidArgument("rank ", s, " rejected its batch (its error says why); ",
                                     "no rank changed any state");
  rb->counts_recv.assign(static_cast<size_t>(world) * kCountFields, 0);
  rb->unit_counts_recv.assign(static_cast<size_t>(world) * 2 * units, 0);
  rb->recv_bytes.assign(world, 0);
  for (int32_t s = 0; s < world; ++s) {
    const int64_t* c = recv.data() + static_cast<size_t>(s) * per;
    std::copy(c, c + kCountFields, rb->counts_recv.begin() + s * kCountFields);
    std::copy(c + kCountFields, c + per, rb->unit_counts_recv.begin() + s * 2 * units);
    if (c[1] < 0 || c[2] < 0)
      return Status::Internal("input dist: rank ", s, " announced a negative batch or id count");
    int64_t ids = 0;
    for (size_t ui = 0; ui < units; ++ui) {
      const int64_t n = c[kCountFields + 2 * ui], bags = c[kCountFields + 2 * ui + 1];
      // A non-empty bag holds at least one id; a unit gets at most one bag per sample.
      if (n < 0 || bags < 0 || bags > n || (n > 0) != (bags > 0) || (!l.sequence && bags > c[1]) ||
          (l.sequence && bags != n))
        return Status::Internal("input dist: rank ", s, " announced ", n, " ids in ", bags,
                                " bags for one unit");
      ids += n;
    }
    if (ids != c[2])
      return Status::Internal("input dist: rank ", s, " announced ", c[2], " ids but ", ids,
                              " over its units");
    rb->recv_bytes[s] = LayoutOf(units, c[1], c[2], c[3] != 0).bytes;
  }
  // This rank's own message stays in its send block: it is neither sent nor received.
  rb->a2a_send.assign(rb->send_bytes.begin(), rb->send_bytes.end());
  rb->a2a_recv.assign(rb->recv_bytes.begin(), rb->recv_bytes.end());
  rb->a2a_send[l.rank] = 0;
  rb->a2a_recv[l.rank] = 0;
  rb->recv.clear();
  return Status::Ok();
}

size_t RouteSummaryBytes(const RouteTables& t) {
  return sizeof(SummaryHeader) + RouteReadbackBytes(t);
}

void HostRouteSummary(const RouteTables& t, const Status& local_error, const RoutedBatch& rb,
                      std::vector<uint8_t>* out) {
  out->assign(RouteSummaryBytes(t), 0);
  SummaryHeader h;
  kernels::simt_body::RouteStatus st;
  const size_t slots = static_cast<size_t>(t.num_slots),
               real = static_cast<size_t>(t.num_real_slots);
  std::vector<int64_t> ids_at(slots + 1, 0), ne_at(real + 1, 0);
  if (!local_error.ok()) {
    h.rejected = 1;
  } else {
    h.batch_size = rb.batch_size;
    h.num_values = rb.num_values;
    h.weighted = rb.weighted ? 1 : 0;
    st.total = rb.num_values;  // what the device route's status says of a sound batch
    for (size_t k = 0; k < real; ++k) {
      const int32_t u = t.slot_unit[k];
      ids_at[k + 1] = ids_at[k] + rb.unit_ids[u];
      ne_at[k + 1] = ne_at[k] + rb.ret_count[u];
    }
    // Data-parallel slots stay on this rank: nobody reads them.
    for (size_t k = real; k < slots; ++k) ids_at[k + 1] = ids_at[k];
  }
  uint8_t* p = out->data();
  std::memcpy(p, &h, sizeof(h));
  std::memcpy(p + sizeof(h), &st, sizeof(st));
  std::memcpy(p + sizeof(h) + sizeof(st), ids_at.data(), 8 * ids_at.size());
  std::memcpy(p + sizeof(h) + sizeof(st) + 8 * ids_at.size(), ne_at.data(), 8 * ne_at.size());
}

Status ReadRouteSummaries(const Layout& l, const RouteTables& t, const RouteOptions& o,
                          const Status& local_error, std::span<const uint8_t> gathered,
                          RoutedBatch* rb) {
  if (!local_error.ok()) return local_error;
  const size_t per = RouteSummaryBytes(t);
  if (gathered.size() != per * static_cast<size_t>(l.world))
    return Status::Internal("input dist: ", gathered.size(), " summary bytes gathered, expected ",
                            per * static_cast<size_t>(l.world));
  const size_t slots = static_cast<size_t>(t.num_slots);
  const int32_t first = t.dest_slot_begin[l.rank], last = t.dest_slot_begin[l.rank + 1];
  std::vector<int64_t> records;
  records.reserve(DeviceCountsFrom(l) * static_cast<size_t>(l.world));
  for (int32_t s = 0; s < l.world; ++s) {
    const uint8_t* p = gathered.data() + static_cast<size_t>(s) * per;
    SummaryHeader h;
    kernels::simt_body::RouteStatus st;
    std::memcpy(&h, p, sizeof(h));
    std::memcpy(&st, p + sizeof(h), sizeof(st));
    const bool rejected =
        h.rejected != 0 || RouteStatusRejects(st, h.num_values, o.check_non_finite);
    const auto* ids_at = reinterpret_cast<const int64_t*>(p + sizeof(h) + sizeof(st));
    const int64_t* ne_at = ids_at + slots + 1;
    int64_t n = 0;
    for (int32_t k = first; k < last; ++k) n += ids_at[k + 1] - ids_at[k];
    // kCountFields of them; a device forward announces no mode (ForwardMode::kNone) and no words.
    static_assert(kCountFields == 6);
    records.insert(records.end(), {rejected ? 1 : 0, rejected ? 0 : h.batch_size, rejected ? 0 : n,
                                   rejected ? 0 : h.weighted, 0, 0});
    for (int32_t k = first; k < last; ++k) {
      const int64_t ids = rejected ? 0 : ids_at[k + 1] - ids_at[k];
      records.push_back(ids);
      records.push_back(rejected ? 0 : (l.sequence ? ids : ne_at[k + 1] - ne_at[k]));
    }
  }
  return ReadDeviceCounts(l, Status::Ok(), records, rb);
}

Status UnpackCounts(const Layout& l, RoutedBatch* rb) {
  const auto& my_units = l.units_to_rank[l.rank];
  const size_t units = my_units.size();
  rb->shards.resize(l.local.size());
  rb->run_at.resize(l.local.size());
  for (size_t i = 0; i < l.local.size(); ++i) {
    rb->shards[i].runs.clear();
    rb->shards[i].num_ids = 0;
    rb->run_at[i].clear();
  }
  rb->unpack.clear();
  rb->bag_offsets.clear();
  rb->ret_floats_to.assign(l.world, 0);
  size_t csr = 0;
  size_t byte_off = 0;  // where the source's message starts in the receive block
  size_t float_base = 0;
  for (int32_t s = 0; s < l.world; ++s) {
    const int64_t* c = &rb->counts_recv[static_cast<size_t>(s) * kCountFields];
    const int64_t B = c[1];
    const bool weighted = c[3] != 0;
    const bool self = s == l.rank;
    const MessageLayout m = LayoutOf(units, B, c[2], weighted);
    const auto at = static_cast<int64_t>(self ? rb->self_offset : byte_off);
    const int64_t* uc = rb->unit_counts_recv.data() + static_cast<size_t>(s) * 2 * units;
    int64_t cursor = 0;
    size_t floats = 0;
    for (size_t ui = 0; ui < units; ++ui) {
      const Unit& unit = l.units[my_units[ui]];
      const int64_t ids = uc[2 * ui];
      const int64_t bags = uc[2 * ui + 1];
      const int64_t lengths_at = at + static_cast<int64_t>(4 * ui) * B;
      int64_t offsets_at = -1;
      if (!l.sequence && B > 0) {
        // Every unit with samples is checked against its counts, with offsets only where bags are.
        if (bags > 0) {
          offsets_at = static_cast<int64_t>(csr);
          csr += static_cast<size_t>(bags) + 1;
        }
        rb->unpack.push_back(UnpackPlace{s, self, lengths_at, B, offsets_at, ids, bags});
      }
      kernels::BagRun run;
      run.num_bags = l.sequence ? ids : bags;
      run.io_offset = static_cast<int64_t>(float_base + floats);
      if (run.num_bags > 0) {
        RunPlace place;
        place.self = self;
        place.ids = ids;
        place.rows_at = at + static_cast<int64_t>(m.rows) + 8 * cursor;
        place.weights_at = weighted ? at + static_cast<int64_t>(m.weights) + 4 * cursor : -1;
        place.offsets_at = offsets_at;
        ShardRuns& sr = rb->shards[unit.local];
        sr.runs.push_back(run);
        sr.num_ids += ids;
        rb->run_at[unit.local].push_back(place);
        floats += static_cast<size_t>(run.num_bags) * unit.cols;
      }
      cursor += ids;
    }
    rb->ret_floats_to[s] = floats;
    float_base += floats;
    if (!self) byte_off += rb->recv_bytes[s];
  }
  rb->csr_entries = csr;
  const Status placed = PlaceOwnReturnLast(l, float_base, rb);
  if (!placed.ok()) return placed;
  rb->device_input = true;
  return Status::Ok();
}

}  // namespace shardrec::embedding
