// Input distribution's exchange and unpack (input_dist.h): the counts exchange that carries
// every rank's verdict and forward terms, the id exchange, and the owner side's description of
// the received ids as runs of bags.
#include <cstring>

#include "impl/embedding/input_dist.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

Status ModesDiffer() {
  return Status::InvalidUsage(
      "the ranks differ in training mode for this forward (shardrec_embedding_set_training "
      "must be the same on every rank); no rank changed any state");
}

Status OutputRefused(int64_t rank) {
  return Status::InvalidArgument("rank ", rank,
                                 " rejected its forward's output buffer (its error says why); no "
                                 "rank changed any state");
}

int64_t FormWord(bool weighted, int64_t slots) {
  return (weighted ? 1 : 0) + (slots < 0 ? 0 : 2 * (slots + 1));
}
bool FormWeighted(int64_t form) { return (form & 1) != 0; }
int64_t FormSlots(int64_t form) { return form < 2 ? -1 : form / 2 - 1; }

MessageLayout LayoutOfCounts(size_t units, const int64_t* c) {
  const int64_t slots = FormSlots(c[3]);
  const bool weighted = FormWeighted(c[3]);
  if (slots < 0) return LayoutOf(units, c[1], c[2], weighted);
  // The plain layout of one "unit" of units + slots lengths: the same sections and alignment.
  return LayoutOf(1, static_cast<int64_t>(units) + slots, c[2], weighted);
}

MessageLengths::MessageLengths(const uint8_t* msg, size_t units, const int64_t* c)
    : units_(units), batch_(c[1]), total_(FormSlots(c[3])) {
  const auto* lens = reinterpret_cast<const int32_t*>(msg);
  if (total_ >= 0) {
    slots_ = lens;
    next_ = lens + units;
  } else {
    next_ = lens;
  }
}

bool MessageLengths::Sound() const {
  if (slots_ == nullptr) return true;
  int64_t sum = 0;
  for (size_t u = 0; u < units_; ++u) {
    if (slots_[u] < 0 || slots_[u] > batch_) return false;
    sum += slots_[u];
  }
  return sum == total_;
}

const int32_t* MessageLengths::Next(int64_t* n) {
  const int32_t* at = next_;
  *n = slots_ != nullptr ? slots_[unit_] : batch_;
  next_ += *n;
  ++unit_;
  return at;
}

void SetUnitSlots(const Layout& l, const Batch& batch, RoutedBatch* rb) {
  rb->unit_slots.clear();
  if (batch.feature_bags == nullptr) return;
  rb->unit_slots.resize(l.units.size());
  for (size_t u = 0; u < l.units.size(); ++u)
    rb->unit_slots[u] = batch.feature_bags[l.pairs[l.units[u].pair].feature];
}

namespace {

int64_t SlotsTo(const Layout& l, const RoutedBatch& rb, int32_t dest) {
  if (rb.unit_slots.empty()) return -1;
  int64_t slots = 0;
  for (int32_t u : l.units_to_rank[dest]) slots += rb.unit_slots[u];
  return slots;
}

}  // namespace

int64_t SendForm(const Layout& l, const RoutedBatch& rb, int32_t dest) {
  return FormWord(rb.weighted, SlotsTo(l, rb, dest));
}

MessageLayout SendLayout(const Layout& l, const RoutedBatch& rb, int32_t dest, int64_t ids) {
  const int64_t c[kCountFields] = {0, rb.batch_size, ids, SendForm(l, rb, dest), 0, 0};
  return LayoutOfCounts(l.units_to_rank[dest].size(), c);
}

void WriteLengths(const Layout& l, const RoutedBatch& rb, int32_t dest, uint8_t* msg) {
  const auto& units = l.units_to_rank[dest];
  const auto B = static_cast<size_t>(rb.batch_size);
  auto* lens = reinterpret_cast<int32_t*>(msg);
  if (!rb.unit_slots.empty()) {
    for (int32_t u : units) *lens++ = static_cast<int32_t>(rb.unit_slots[u]);
  }
  for (int32_t u : units) {
    const size_t n = rb.unit_slots.empty() ? B : static_cast<size_t>(rb.unit_slots[u]);
    if (n != 0) std::memcpy(lens, rb.unit_lengths.data() + static_cast<size_t>(u) * B, 4 * n);
    lens += n;
  }
}

namespace {

// A message's counts as they travel with it: kCountFields int64 words.
constexpr size_t kHeaderBytes = kCountFields * sizeof(int64_t);

// The first round's capacity after a message of `bytes`: its size and a margin of 1/64 (bags
// vary little from batch to batch), 8-byte aligned. Both ranks compute it from the same size.
size_t CapAfter(size_t bytes) { return (bytes + bytes / 64 + 64 + 7) & ~size_t{7}; }

// This rank's counts for every destination: the rejection, or the mode and words announced.
void FillCounts(int32_t world, const Status& local_error, RoutedBatch* rb, ForwardMode mode,
                int64_t words) {
  if (!local_error.ok()) {
    rb->counts_send.assign(world * kCountFields, 0);
    for (int32_t d = 0; d < world; ++d) rb->counts_send[d * kCountFields] = 1;
    return;
  }
  for (int32_t d = 0; d < world; ++d) {
    rb->counts_send[d * kCountFields + 4] = static_cast<int64_t>(mode);
    rb->counts_send[d * kCountFields + 5] = words;
  }
}

// Reads every rank's counts (counts_recv): the rejections, the forward's agreement, and the
// size of each source's message (recv_bytes). Every rank reads the same verdicts.
Status ReadCounts(const Layout& l, const Status& local_error, RoutedBatch* rb) {
  const int32_t world = l.world;
  if (!local_error.ok()) return local_error;
  for (int32_t s = 0; s < world; ++s) {
    if (rb->counts_recv[s * kCountFields] != 0)
      return Status::InvalidArgument("rank ", s, " rejected its batch (its error says why); ",
                                     "no rank changed any state");
  }
  // Every rank sees every rank's mode, so all decide alike.
  const int64_t first_mode = rb->counts_recv[4];
  bool all_announced = true, same = true;
  for (int32_t s = 0; s < world; ++s) {
    const int64_t m = rb->counts_recv[s * kCountFields + 4];
    all_announced &= m != static_cast<int64_t>(ForwardMode::kNone);
    same &= m == first_mode;
  }
  if (all_announced && !same) return ModesDiffer();
  rb->forward_agreed = all_announced;
  rb->forward_words.clear();
  if (all_announced)
    for (int32_t s = 0; s < world; ++s)
      rb->forward_words.push_back(rb->counts_recv[s * kCountFields + 5]);
  const size_t units = l.units_to_rank[l.rank].size();
  rb->recv_bytes.assign(world, 0);
  for (int32_t s = 0; s < world; ++s) {
    const int64_t* c = &rb->counts_recv[s * kCountFields];
    if (c[1] < 0 || c[2] < 0)
      return Status::Internal("input dist: rank ", s, " announced a negative batch or id count");
    if (FormSlots(c[3]) >= 0 && FormSlots(c[3]) > static_cast<int64_t>(units) * c[1])
      return Status::Internal("input dist: rank ", s, " announced more length slots than bags");
    rb->recv_bytes[s] = LayoutOfCounts(units, c).bytes;
  }
  return Status::Ok();
}

// Two ranks: each message travels with its counts. The first round carries the first caps->to
// bytes of the message to the peer (first in `send`, the one this rank keeps follows it) and
// then its counts, written over the kHeaderBytes there, which are kept aside and put back; what
// lies past the message in that span (the start of this rank's own message) travels unread. A
// message longer than its cap sends its rest in a second round, straight behind its first part
// in the receive buffer; both ranks know both messages' sizes after the first round, so both
// decide alike whether it runs, and both set the next caps from the same sizes (a rejecting
// sender's cap is kept).
Status ExchangeTogether(const Layout& l, comm::Communicator& comm, const Status& local_error,
                        RoutedBatch* rb, InputCaps* caps) {
  const int32_t peer = 1 - l.rank;
  const size_t cap_to = caps->to, cap_from = caps->from;
  const size_t sent = local_error.ok() ? rb->send_bytes[peer] : 0;
  if (rb->send.size() < cap_to + kHeaderBytes) rb->send.resize(cap_to + kHeaderBytes);
  uint8_t* header = rb->send.data() + cap_to;
  uint8_t kept[kHeaderBytes];
  std::memcpy(kept, header, kHeaderBytes);
  std::memcpy(header, rb->counts_send.data() + peer * kCountFields, kHeaderBytes);
  if (rb->recv.size() < cap_from + kHeaderBytes) rb->recv.resize(cap_from + kHeaderBytes);
  size_t send_counts[2] = {0, 0}, recv_counts[2] = {0, 0};
  send_counts[peer] = cap_to + kHeaderBytes;
  recv_counts[peer] = cap_from + kHeaderBytes;
  const Status first =
      comm.AllToAllV(rb->send.data(), send_counts, rb->recv.data(), recv_counts, DType::kUInt8);
  std::memcpy(header, kept, kHeaderBytes);
  SR_RETURN_IF_ERROR(first);
  rb->counts_recv.assign(2 * kCountFields, 0);
  std::memcpy(rb->counts_recv.data() + peer * kCountFields, rb->recv.data() + cap_from,
              kHeaderBytes);
  std::memcpy(rb->counts_recv.data() + l.rank * kCountFields,
              rb->counts_send.data() + l.rank * kCountFields, kHeaderBytes);
  const int64_t* c = rb->counts_recv.data() + peer * kCountFields;
  const bool peer_rejected = c[0] != 0;
  size_t received = 0;
  if (!peer_rejected && c[1] >= 0 && c[2] >= 0)
    received = LayoutOfCounts(l.units_to_rank[l.rank].size(), c).bytes;
  if (local_error.ok()) caps->to = CapAfter(sent);
  if (!peer_rejected) caps->from = CapAfter(received);
  SR_RETURN_IF_ERROR(ReadCounts(l, local_error, rb));
  const size_t rest_to = sent > cap_to ? sent - cap_to : 0;
  const size_t rest_from = received > cap_from ? received - cap_from : 0;
  if (rb->recv.size() < received) rb->recv.resize(received);
  if (rest_to == 0 && rest_from == 0) return Status::Ok();
  send_counts[peer] = rest_to;
  recv_counts[peer] = rest_from;
  return comm.AllToAllV(rb->send.data() + cap_to, send_counts, rb->recv.data() + cap_from,
                        recv_counts, DType::kUInt8);
}

}  // namespace

Status ExchangeInput(const Layout& l, comm::Communicator& comm, const Status& local_error,
                     RoutedBatch* rb, ForwardMode mode, int64_t words, InputCaps* caps) {
  const int32_t world = l.world;
  rb->forward_agreed = false;
  FillCounts(world, local_error, rb, mode, words);
  if (caps != nullptr && world == 2) return ExchangeTogether(l, comm, local_error, rb, caps);
  rb->counts_recv.assign(world * kCountFields, 0);
  std::vector<size_t> counts(world, kCountFields);
  SR_RETURN_IF_ERROR(comm.AllToAllV(rb->counts_send.data(), counts, rb->counts_recv.data(), counts,
                                    DType::kInt64));
  SR_RETURN_IF_ERROR(ReadCounts(l, local_error, rb));
  size_t total = 0;
  for (int32_t s = 0; s < world; ++s)
    if (s != l.rank) total += rb->recv_bytes[s];
  // The ids this rank routes to itself stay where they were packed (last in the send buffer):
  // UnpackInput reads them there, so they are neither sent nor copied.
  rb->a2a_send.assign(rb->send_bytes.begin(), rb->send_bytes.end());
  rb->a2a_recv.assign(rb->recv_bytes.begin(), rb->recv_bytes.end());
  rb->a2a_send[l.rank] = 0;
  rb->a2a_recv[l.rank] = 0;
  rb->recv.resize(total);
  return comm.AllToAllV(rb->send.data(), rb->a2a_send, rb->recv.data(), rb->a2a_recv,
                        DType::kUInt8);
}

Status ExchangeAndUnpack(const Layout& l, comm::Communicator& comm, const Status& local,
                         RoutedBatch* rb, const InputTerms& terms, double* comm_seconds,
                         InputCaps* caps) {
  Status s;
  rb->device_input = false;
  {
    ScopedTimer t(comm_seconds);
    const int64_t words = local.ok() && terms.mode == ForwardMode::kTraining && terms.words
                              ? terms.words(*rb)
                              : int64_t{0};
    s = ExchangeInput(l, comm, local, rb, terms.mode, words, caps);
  }
  return s.ok() ? UnpackInput(l, rb) : s;
}

Status PlaceOwnReturnLast(const Layout& l, size_t float_base, RoutedBatch* rb) {
  rb->ret_floats_total = float_base;
  // Every run has at least one row of at least one column, so its io offset lies inside its
  // source's block and tells which block it belongs to.
  size_t self_begin = 0;
  for (int32_t s = 0; s < l.rank; ++s) self_begin += rb->ret_floats_to[s];
  const size_t self_floats = rb->ret_floats_to[l.rank];
  const size_t self_end = self_begin + self_floats;
  rb->ret_self_offset = float_base - self_floats;
  if (self_floats != 0 && self_end != float_base) {
    for (ShardRuns& sr : rb->shards) {
      for (kernels::BagRun& run : sr.runs) {
        const auto io = static_cast<size_t>(run.io_offset);
        if (io >= self_end)
          run.io_offset = static_cast<int64_t>(io - self_floats);
        else if (io >= self_begin)
          run.io_offset = static_cast<int64_t>(io - self_begin + rb->ret_self_offset);
      }
    }
  }
  rb->ret_a2a_to.assign(rb->ret_floats_to.begin(), rb->ret_floats_to.end());
  rb->ret_a2a_from.assign(rb->ret_floats_from.begin(), rb->ret_floats_from.end());
  if (rb->ret_a2a_from[l.rank] != self_floats)
    return Status::Internal("input dist: this rank routed ", rb->ret_a2a_from[l.rank],
                            " return floats to itself but received ", self_floats);
  rb->ret_a2a_to[l.rank] = 0;
  rb->ret_a2a_from[l.rank] = 0;
  return Status::Ok();
}

Status UnpackInput(const Layout& l, RoutedBatch* rb) {
  const auto& my_units = l.units_to_rank[l.rank];
  rb->shards.resize(l.local.size());
  for (auto& sr : rb->shards) {
    sr.runs.clear();
    sr.num_ids = 0;
  }
  // Room for every run's CSR offsets, so the pointers handed to the runs never move.
  size_t max_offsets = 0;
  for (int32_t s = 0; s < l.world; ++s) {
    const int64_t* c = &rb->counts_recv[s * kCountFields];
    const int64_t slots = FormSlots(c[3]);
    max_offsets += slots >= 0 ? my_units.size() + static_cast<size_t>(slots)
                              : my_units.size() * (static_cast<size_t>(c[1]) + 1);
  }
  rb->bag_offsets.resize(l.sequence ? 0 : max_offsets);
  size_t next_offset = 0;
  rb->ret_floats_to.assign(l.world, 0);
  size_t byte_off = 0;
  size_t float_base = 0;
  for (int32_t s = 0; s < l.world; ++s) {
    const int64_t* c = &rb->counts_recv[s * kCountFields];
    const int64_t n = c[2];
    const bool weighted = FormWeighted(c[3]);
    const uint8_t* msg =
        s == l.rank ? rb->send.data() + rb->self_offset : rb->recv.data() + byte_off;
    const MessageLayout m = LayoutOfCounts(my_units.size(), c);
    MessageLengths lengths(msg, my_units.size(), c);
    if (!lengths.Sound())
      return Status::Internal("input dist: malformed length slots from rank ", s);
    const auto* rows = reinterpret_cast<const int64_t*>(msg + m.rows);
    const auto* wts = reinterpret_cast<const float*>(msg + m.weights);
    int64_t cursor = 0;
    size_t floats = 0;
    for (size_t ui = 0; ui < my_units.size(); ++ui) {
      const Unit& unit = l.units[my_units[ui]];
      kernels::BagRun run;
      run.rows = rows + cursor;
      run.weights = weighted ? wts + cursor : nullptr;
      run.io_offset = static_cast<int64_t>(float_base + floats);
      int64_t ids = 0;
      int64_t* offsets = l.sequence ? nullptr : rb->bag_offsets.data() + next_offset;
      if (offsets != nullptr) offsets[0] = 0;
      int64_t bags = 0;
      const int32_t* lens = lengths.Next(&bags);
      for (int64_t b = 0; b < bags; ++b) {
        const int32_t len = lens[b];
        if (len == 0) continue;
        if (len < 0 || cursor + ids + len > n)
          return Status::Internal("input dist: malformed message from rank ", s);
        ids += len;
        if (offsets != nullptr) offsets[++run.num_bags] = ids;
      }
      if (offsets == nullptr) run.num_bags = ids;
      run.offsets = offsets;
      cursor += ids;
      if (run.num_bags > 0) {
        if (offsets != nullptr) next_offset += static_cast<size_t>(run.num_bags) + 1;
        ShardRuns& sr = rb->shards[unit.local];
        sr.runs.push_back(run);
        sr.num_ids += ids;
        floats += static_cast<size_t>(run.num_bags) * unit.cols;
      }
    }
    if (cursor != n) return Status::Internal("input dist: rank ", s, " sent unused ids");
    rb->ret_floats_to[s] = floats;
    float_base += floats;
    if (s != l.rank) byte_off += rb->recv_bytes[s];
  }
  return PlaceOwnReturnLast(l, float_base, rb);
}

}  // namespace shardrec::embedding
