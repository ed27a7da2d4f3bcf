// The store's on-disk format (docs/disk-tier.md, "The store"): segment files of 4 KiB pages, each
// opened by a header page naming the store's identity, then fixed-size records that never straddle
// a page; and the MANIFEST, the index of the last Flush (key -> segment and slot) with the list of
// segments it needs, checksummed as a whole. Pure functions over bytes, so the fuzz target
// (tests/fuzz/fuzz_store_format.cc) reaches every reader without a file system.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::store {

inline constexpr size_t kPageBytes = 4096;
inline constexpr uint32_t kFormatVersion = 1;
// The identity lives in the segment header page beside the fixed fields and the checksum.
inline constexpr size_t kMaxIdentityBytes = 3968;
// A record: key (8 B), value, checksum (8 B).
inline constexpr size_t kRecordOverhead = 16;

// XXH3 of the identity: every checksum of the store is seeded with it, so a record or manifest of
// another store fails its check instead of being read.
uint64_t IdentityHash(std::string_view identity);

// Where a store's records fall in a segment file: records of up to a page are packed
// `per_page` to a page; a larger record starts a page and takes `pages` of them.
struct RecordGeometry {
  size_t value_bytes = 0;
  size_t record_bytes = 0;  // value + kRecordOverhead
  size_t per_page = 1;
  size_t pages = 1;  // pages a record's read covers

  static RecordGeometry For(size_t value_bytes);
  // Byte offset, in its segment file, of the page holding `slot` (after the header page).
  uint64_t PageOffset(uint64_t slot) const { return kPageBytes * (1 + (slot / per_page) * pages); }
  size_t InPage(uint64_t slot) const { return (slot % per_page) * record_bytes; }
  // File bytes up to and including the page of slot `slots - 1`.
  uint64_t FileBytes(uint64_t slots) const {
    return kPageBytes * (1 + ((slots + per_page - 1) / per_page) * pages);
  }
  uint64_t RoundUpSlot(uint64_t slots) const {
    return (slots + per_page - 1) / per_page * per_page;
  }
};

// Checksum of one record; seeded with the identity, the segment and the slot, so a record copied
// to another place (or another store) does not verify, and neither does a page of zeros.
uint64_t RecordChecksum(uint64_t identity_hash, uint32_t segment, uint64_t slot,
                        const uint8_t* key_and_value, size_t value_bytes);
void EncodeRecord(uint64_t identity_hash, uint32_t segment, uint64_t slot, int64_t key,
                  const uint8_t* value, size_t value_bytes, uint8_t* out);
// True when `rec` (record_bytes long) is a valid record of that place; sets *key.
bool DecodeRecord(uint64_t identity_hash, uint32_t segment, uint64_t slot, const uint8_t* rec,
                  size_t value_bytes, int64_t* key);

struct SegmentHeader {
  uint32_t segment = 0;
  uint64_t value_bytes = 0;
  uint64_t identity_hash = 0;
  std::string identity;
};
// One page.
std::vector<uint8_t> EncodeSegmentHeader(const SegmentHeader& h);
// kCorrupt (naming `what`) unless `page` (n bytes) is a valid header page.
Status DecodeSegmentHeader(const uint8_t* page, size_t n, const std::string& what,
                           SegmentHeader* h);

// A location in the index: segment id (>= 1) in the high 32 bits, slot in the low; 0 is none.
inline uint64_t PackLoc(uint32_t segment, uint32_t slot) {
  return (uint64_t{segment} << 32) | slot;
}
inline uint32_t LocSegment(uint64_t loc) { return static_cast<uint32_t>(loc >> 32); }
inline uint32_t LocSlot(uint64_t loc) { return static_cast<uint32_t>(loc); }

struct ManifestSegment {
  uint32_t id = 0;
  uint64_t slots = 0;  // slots written when the manifest was made
};
struct ManifestEntry {
  int64_t key = 0;
  uint64_t loc = 0;
};
struct Manifest {
  uint64_t value_bytes = 0;
  std::string identity;
  uint64_t generation = 0;
  uint32_t next_segment = 1;
  std::vector<ManifestSegment> segments;
  std::vector<ManifestEntry> entries;
};
std::vector<uint8_t> EncodeManifest(const Manifest& m);
// kCorrupt (naming `what`) for a bad checksum, a truncated or overlong file, a location outside
// the listed segments, or a segment listed twice. Duplicate keys are the index's to find.
Status DecodeManifest(const uint8_t* data, size_t n, const std::string& what, Manifest* m);

}  // namespace shardrec::store
