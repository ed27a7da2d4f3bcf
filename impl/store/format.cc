// The store's on-disk format; little-endian fields (the hosts the library supports).
#include "impl/store/format.h"

#include <xxhash.h>

#include <cstring>
#include <unordered_map>

namespace shardrec::store {
namespace {

constexpr char kSegmentMagic[8] = {'S', 'R', 'S', 'T', 'S', 'E', 'G', '1'};
constexpr char kManifestMagic[8] = {'S', 'R', 'S', 'T', 'M', 'A', 'N', '1'};
// Header page: magic 8, version 4, identity length 4, segment 4, pad 4, value bytes 8, identity
// hash 8, identity, and the page's checksum in its last 8 bytes.
constexpr size_t kHeaderFixed = 40;
constexpr size_t kHeaderChecksumAt = kPageBytes - 8;

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

// resize + memcpy: GCC 12 warns falsely (-Wstringop-overflow) on vector::insert of a few bytes.
void PutBytes(std::vector<uint8_t>* out, const void* p, size_t n) {
  const size_t at = out->size();
  out->resize(at + n);
  if (n > 0) std::memcpy(out->data() + at, p, n);
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// A bounds-checked cursor over untrusted bytes.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  template <typename T>
  bool Get(T* v) {
    if (n_ - at_ < sizeof(T)) return false;
    *v = Load<T>(p_ + at_);
    at_ += sizeof(T);
    return true;
  }
  bool Bytes(size_t len, std::string* s) {
    if (n_ - at_ < len) return false;
    s->assign(reinterpret_cast<const char*>(p_ + at_), len);
    at_ += len;
    return true;
  }
  size_t left() const { return n_ - at_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
};

}  // namespace

uint64_t IdentityHash(std::string_view identity) {
  return XXH3_64bits(identity.data(), identity.size());
}

RecordGeometry RecordGeometry::For(size_t value_bytes) {
  RecordGeometry g;
  g.value_bytes = value_bytes;
  g.record_bytes = value_bytes + kRecordOverhead;
  if (g.record_bytes <= kPageBytes) {
    g.per_page = kPageBytes / g.record_bytes;
    g.pages = 1;
  } else {
    g.per_page = 1;
    g.pages = (g.record_bytes + kPageBytes - 1) / kPageBytes;
  }
  return g;
}

uint64_t RecordChecksum(uint64_t identity_hash, uint32_t segment, uint64_t slot,
                        const uint8_t* key_and_value, size_t value_bytes) {
  return XXH3_64bits_withSeed(key_and_value, 8 + value_bytes,
                              identity_hash ^ (uint64_t{segment} << 40) ^ slot);
}

void EncodeRecord(uint64_t identity_hash, uint32_t segment, uint64_t slot, int64_t key,
                  const uint8_t* value, size_t value_bytes, uint8_t* out) {
  std::memcpy(out, &key, 8);
  std::memcpy(out + 8, value, value_bytes);
  const uint64_t sum = RecordChecksum(identity_hash, segment, slot, out, value_bytes);
  std::memcpy(out + 8 + value_bytes, &sum, 8);
}

bool DecodeRecord(uint64_t identity_hash, uint32_t segment, uint64_t slot, const uint8_t* rec,
                  size_t value_bytes, int64_t* key) {
  const uint64_t sum = Load<uint64_t>(rec + 8 + value_bytes);
  if (sum != RecordChecksum(identity_hash, segment, slot, rec, value_bytes)) return false;
  *key = Load<int64_t>(rec);
  return true;
}

std::vector<uint8_t> EncodeSegmentHeader(const SegmentHeader& h) {
  std::vector<uint8_t> page;
  page.reserve(kPageBytes);
  PutBytes(&page, kSegmentMagic, 8);
  Put<uint32_t>(&page, kFormatVersion);
  Put<uint32_t>(&page, static_cast<uint32_t>(h.identity.size()));
  Put<uint32_t>(&page, h.segment);
  Put<uint32_t>(&page, 0);
  Put<uint64_t>(&page, h.value_bytes);
  Put<uint64_t>(&page, h.identity_hash);
  PutBytes(&page, h.identity.data(), h.identity.size());
  page.resize(kPageBytes, 0);
  const uint64_t sum = XXH3_64bits(page.data(), kHeaderChecksumAt);
  std::memcpy(page.data() + kHeaderChecksumAt, &sum, 8);
  return page;
}

Status DecodeSegmentHeader(const uint8_t* page, size_t n, const std::string& what,
                           SegmentHeader* h) {
  if (n < kPageBytes) return Status::Corrupt(what, ": segment header truncated (", n, " bytes)");
  if (std::memcmp(page, kSegmentMagic, 8) != 0) {
    return Status::Corrupt(what, ": not a store segment (bad magic)");
  }
  if (Load<uint64_t>(page + kHeaderChecksumAt) != XXH3_64bits(page, kHeaderChecksumAt)) {
    return Status::Corrupt(what, ": segment header checksum mismatch");
  }
  const uint32_t version = Load<uint32_t>(page + 8);
  if (version != kFormatVersion) {
    return Status::Corrupt(what, ": segment format version ", version, ", this library reads ",
                           kFormatVersion);
  }
  const uint32_t id_len = Load<uint32_t>(page + 12);
  if (id_len > kMaxIdentityBytes) return Status::Corrupt(what, ": identity length ", id_len);
  h->segment = Load<uint32_t>(page + 16);
  h->value_bytes = Load<uint64_t>(page + 24);
  h->identity_hash = Load<uint64_t>(page + 32);
  h->identity.assign(reinterpret_cast<const char*>(page + kHeaderFixed), id_len);
  return Status::Ok();
}

std::vector<uint8_t> EncodeManifest(const Manifest& m) {
  std::vector<uint8_t> out;
  out.reserve(64 + m.identity.size() + m.segments.size() * 16 + m.entries.size() * 16);
  PutBytes(&out, kManifestMagic, 8);
  Put<uint32_t>(&out, kFormatVersion);
  Put<uint32_t>(&out, static_cast<uint32_t>(m.identity.size()));
  Put<uint64_t>(&out, m.value_bytes);
  Put<uint64_t>(&out, m.generation);
  Put<uint32_t>(&out, m.next_segment);
  Put<uint32_t>(&out, static_cast<uint32_t>(m.segments.size()));
  Put<uint64_t>(&out, m.entries.size());
  PutBytes(&out, m.identity.data(), m.identity.size());
  for (const ManifestSegment& s : m.segments) {
    Put<uint32_t>(&out, s.id);
    Put<uint32_t>(&out, 0);
    Put<uint64_t>(&out, s.slots);
  }
  for (const ManifestEntry& e : m.entries) {
    Put<int64_t>(&out, e.key);
    Put<uint64_t>(&out, e.loc);
  }
  Put<uint64_t>(&out, XXH3_64bits_withSeed(out.data(), out.size(), IdentityHash(m.identity)));
  return out;
}

Status DecodeManifest(const uint8_t* data, size_t n, const std::string& what, Manifest* m) {
  if (n < 8 + 8 || std::memcmp(data, kManifestMagic, 8) != 0) {
    return Status::Corrupt(what, ": not a store manifest (bad magic or truncated)");
  }
  Reader r(data + 8, n - 8 - 8);
  uint32_t version = 0, id_len = 0, nseg = 0;
  uint64_t nentries = 0;
  if (!r.Get(&version) || !r.Get(&id_len) || !r.Get(&m->value_bytes) || !r.Get(&m->generation) ||
      !r.Get(&m->next_segment) || !r.Get(&nseg) || !r.Get(&nentries)) {
    return Status::Corrupt(what, ": manifest truncated");
  }
  if (version != kFormatVersion) {
    return Status::Corrupt(what, ": manifest format version ", version, ", this library reads ",
                           kFormatVersion);
  }
  if (id_len > kMaxIdentityBytes || !r.Bytes(id_len, &m->identity)) {
    return Status::Corrupt(what, ": manifest identity truncated or too long");
  }
  const uint64_t sum = Load<uint64_t>(data + n - 8);
  if (sum != XXH3_64bits_withSeed(data, n - 8, IdentityHash(m->identity))) {
    return Status::Corrupt(what, ": manifest checksum mismatch (torn or altered)");
  }
  if (r.left() / 16 < nseg || (r.left() - nseg * 16) != nentries * 16 || nentries > r.left() / 16) {
    return Status::Corrupt(what, ": manifest sizes disagree with its length");
  }
  m->segments.resize(nseg);
  std::unordered_map<uint32_t, uint64_t> slots_of;
  for (ManifestSegment& s : m->segments) {
    uint32_t pad = 0;
    (void)(r.Get(&s.id) && r.Get(&pad) && r.Get(&s.slots));
    if (s.id == 0 || s.id >= m->next_segment || s.slots > 0xffffffffull ||
        !slots_of.emplace(s.id, s.slots).second) {
      return Status::Corrupt(what, ": manifest lists a bad or repeated segment ", s.id);
    }
  }
  m->entries.resize(nentries);
  for (ManifestEntry& e : m->entries) {
    (void)(r.Get(&e.key) && r.Get(&e.loc));
    const auto it = slots_of.find(LocSegment(e.loc));
    if (it == slots_of.end()) {
      return Status::Corrupt(what, ": key ", e.key, " points at unlisted segment ",
                             LocSegment(e.loc));
    }
    if (LocSlot(e.loc) >= it->second) {
      return Status::Corrupt(what, ": key ", e.key, " points past the end of segment ", it->first);
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::store
