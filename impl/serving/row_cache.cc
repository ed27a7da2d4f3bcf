// The striped CLOCK row cache (row_cache.h).
#include "impl/serving/row_cache.h"

#include <cstring>
#include <new>
#include <string>

#include "impl/serving/model.h"

namespace shardrec::serving {
namespace {

// At most this many stripes, and at least this many slots in each: enough stripes that 16-64
// reader threads rarely meet on one lock, few enough that a small cache's CLOCK still sees a
// useful share of the rows.
constexpr size_t kMaxStripes = 64;
constexpr uint64_t kMinStripeSlots = 8;

}  // namespace

Status RowCache::Create(uint64_t row_bytes, uint64_t cache_bytes, const std::string& what,
                        std::unique_ptr<RowCache>* out) {
  const uint64_t slot_cost = row_bytes + kSlotOverhead;
  const uint64_t slots = cache_bytes / slot_cost;
  if (slots == 0)
    return Status::InvalidArgument(what, ": cache_bytes ", cache_bytes,
                                   " holds no row (a row costs ", slot_cost, " bytes: ", row_bytes,
                                   " stored + ", kSlotOverhead, " of bookkeeping)");
  size_t stripes = 1;
  int shift = 64;
  while (stripes < kMaxStripes && slots / (stripes * 2) >= kMinStripeSlots) {
    stripes *= 2;
    --shift;
  }
  // Every stripe gets the same number of slots (a hash spreads rows evenly); the remainder of
  // the division is not allocated.
  const uint64_t per = slots / stripes;
  if (per > UINT32_MAX)
    return Status::InvalidArgument(what, ": cache_bytes ", cache_bytes, " is more than ",
                                   uint64_t{UINT32_MAX} * stripes, " rows");
  auto c = std::unique_ptr<RowCache>(new RowCache());
  c->row_bytes_ = row_bytes;
  c->slots_ = static_cast<int64_t>(per * stripes);
  c->memory_ = AlignedBuffer(static_cast<size_t>(per * stripes * row_bytes));
  if (!c->memory_) return Status::OutOfMemory(what, ": a row cache of ", cache_bytes, " bytes");
  try {
    c->stripes_ = std::make_unique<Stripe[]>(stripes);
    for (size_t s = 0; s < stripes; ++s) {
      Stripe& st = c->stripes_[s];
      st.capacity = static_cast<uint32_t>(per);
      st.row.assign(per, -1);
      st.referenced.assign(per, 0);
      st.map.assign(2 * per, Entry{});
      st.data = c->memory_.get() + s * per * row_bytes;
    }
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(what, ": the row cache's map of ", slots, " rows");
  }
  c->num_stripes_ = stripes;
  c->shift_ = shift;
  *out = std::move(c);
  return Status::Ok();
}

void RowCache::Stripe::Erase(int64_t r) {
  const uint64_t n = map.size();
  uint64_t h = Home(r);
  while (map[h].row != r) {
    if (map[h].row < 0) return;
    h = Next(h);
  }
  // Backward shift: move up each later entry of the run whose probe passes the hole, i.e. whose
  // home lies cyclically at or before it (distance from home >= distance from the hole).
  for (uint64_t next = Next(h); map[next].row >= 0; next = Next(next)) {
    const uint64_t home = Home(map[next].row);
    if ((next + n - home) % n >= (next + n - h) % n) {
      map[h] = map[next];
      h = next;
    }
  }
  map[h] = Entry{};
}

bool RowCache::Get(int64_t row, uint8_t* dst) {
  Stripe& s = StripeOf(row);
  std::lock_guard<std::mutex> lock(s.mu);
  const Entry* e = s.Find(row);
  if (e == nullptr) return false;
  std::memcpy(dst, s.data + static_cast<uint64_t>(e->slot) * row_bytes_, row_bytes_);
  s.referenced[e->slot] = 1;
  return true;
}

void RowCache::Put(int64_t row, const uint8_t* src) {
  Stripe& s = StripeOf(row);
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.Find(row) != nullptr) return;  // another reader read it meanwhile
  uint32_t slot = 0;
  if (s.used < s.capacity) {
    slot = s.used++;
  } else {
    while (s.referenced[s.hand] != 0) {  // second chance
      s.referenced[s.hand] = 0;
      s.hand = (s.hand + 1) % s.capacity;
    }
    slot = s.hand;
    s.hand = (s.hand + 1) % s.capacity;
    s.Erase(s.row[slot]);
  }
  std::memcpy(s.data + static_cast<uint64_t>(slot) * row_bytes_, src, row_bytes_);
  s.row[slot] = row;
  s.referenced[slot] = 0;
  s.Insert(row, slot);
}

int64_t RowCache::rows() const {
  int64_t n = 0;
  for (size_t i = 0; i < num_stripes_; ++i) {
    std::lock_guard<std::mutex> lock(stripes_[i].mu);
    n += static_cast<int64_t>(stripes_[i].used);
  }
  return n;
}

}  // namespace shardrec::serving
