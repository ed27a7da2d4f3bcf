// The checksums a served tiered table keeps of its rank files' records (docs/disk-tier.md,
// "Serving"): a record's rows are cut into units of whole rows (the fewest rows of at least 512
// bytes; the last unit clipped to the record), and open keeps a 32-bit checksum of each
// (XXH3-64's low half), taken from the bytes its one pass over the record has just verified
// against the manifest's chunk checksums (RecordSums::Builder). A lookup reads whole units and
// checks each before any of its rows is used, so a file changed after open (overwritten, bit rot, a
// disk returning bad bytes) fails the lookup instead of serving wrong rows. The manifest's own
// chunks (about 1 MiB) are too coarse for that: a miss would read a megabyte to check a row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/record_chunks.h"
#include "impl/core/status.h"

namespace shardrec::serving {

class RecordSums {
 public:
  // A miss from the page cache pays per byte it reads (the copy and the checksum): whole 4 KiB
  // pages cost a 256-byte row a third of the warm throughput (tests/bench/RESULTS.md), 512-byte
  // units little more than the row. A unit is whole rows, so a one-row miss reads and hashes
  // one unit and never a neighbour's bytes (units at the file's 512-byte boundaries cut a row
  // in two as often as not). At least kUnit bytes each: at most 4 bytes of checksum per 512,
  // 8 MiB per GiB of rows.
  static constexpr uint64_t kUnit = 512;

  // The rows per unit of a record of `row_bytes`-byte rows: the fewest whose bytes reach kUnit.
  static uint64_t UnitRows(uint64_t row_bytes);

  // Takes a record's unit checksums from its chunks as the open's single pass reads and verifies
  // them (tiered_pass.h), so that no byte is read a second time for them. Every chunk of the
  // record must be visited, in order (SR_CHECK): a unit's bytes may lie in two chunks.
  class Builder final : public checkpoint::ChunkVisitor {
   public:
    // The sums of `rec` (which outlives the builder) go to `out`, complete after Finish.
    Builder(const checkpoint::Record& rec, RecordSums* out);
    Status Visit(const checkpoint::Record& rec, int64_t lo, int64_t hi,
                 const uint8_t* data) override;
    // Once every chunk was visited (SR_CHECK).
    void Finish() const;

   private:
    RecordSums* out_;
    uint64_t unit_ = 0;          // the file byte where the unit not yet complete starts
    std::vector<uint8_t> held_;  // its bytes so far (less than a unit)
  };

  // The file bytes [*lo, *hi) of the whole units covering the record's file bytes [at, at + len)
  // (which must lie in the record).
  void Cover(uint64_t at, uint64_t len, uint64_t* lo, uint64_t* hi) const;

  // Asks the CPU to load the checksums of the units of [lo, hi) (as Cover gives them) into
  // cache: the table is 8 MiB per GiB of rows, read at random, so Check's load of a checksum
  // is a cache miss unless it was asked for while the reads were in flight.
  void Prefetch(uint64_t lo, uint64_t hi) const;

  // Checks the units of the file bytes [lo, hi) (unit boundaries, as Cover gives them), read
  // into `data`. kCorrupt naming `path`, the record and the bytes for a unit whose checksum is
  // not the one taken at open.
  Status Check(const uint8_t* data, uint64_t lo, uint64_t hi, const std::string& path,
               const std::string& key) const;

  size_t units() const { return sums_.size(); }

 private:
  uint64_t UnitEnd(uint64_t at) const;

  uint64_t begin_ = 0, end_ = 0;  // the record's bytes in the file
  uint64_t unit_ = kUnit;         // a unit's bytes (whole rows, UnitRows)
  std::vector<uint32_t> sums_;    // per unit, in file order
};

}  // namespace shardrec::serving
