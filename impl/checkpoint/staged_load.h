// All-or-nothing loading: every destination block (a shard tensor, a dense tensor) is read and
// verified into host memory first, and only once every rank has verified its part is anything
// copied into place, so a load that fails while reading leaves the collection as it was.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/checkpoint/copy.h"
#include "impl/checkpoint/staged_copy.h"
#include "impl/core/device.h"

namespace shardrec::checkpoint {

// Host memory a load stages by default (per call, per rank). Destinations beyond it are
// verified by a first read and read again (verified again) while committing.
inline constexpr uint64_t kDefaultStagingLimit = uint64_t{1} << 30;

class StagedLoad {
 public:
  explicit StagedLoad(uint64_t limit_bytes) : limit_(limit_bytes) {}

  // Reads the overlap of every source with `dst` (memory on `device`; a device destination is
  // whole rows) and verifies each chunk against its checksum: into a host copy of `dst` while
  // the staged total stays within the limit, else only verified. Changes nothing in `dst`
  // (a staged block that the sources do not cover exactly starts from `dst`'s values, read
  // back). Errors: CopyOverlap's (kCorrupt naming the file and record, kIo), the read-back's.
  Status Add(const Device& device, const Target& dst, std::vector<OverlapSource> sources);

  // Whether Commit can fail: a device copy, or a destination that must be read again.
  bool commit_can_fail() const { return commit_can_fail_; }
  uint64_t staged_bytes() const { return staged_; }

  // Writes every destination: staged ones from host memory (a host destination cannot fail),
  // the others read again from their files. A failure leaves the destinations before it
  // written: only device copies and second reads can fail (commit_can_fail).
  Status Commit();

 private:
  struct Dest {
    Device device;
    Target dst;
    std::vector<OverlapSource> sources;
    std::unique_ptr<uint8_t[]> staged;  // null: verified only, read again by Commit
  };
  uint64_t limit_;
  uint64_t staged_ = 0;
  bool commit_can_fail_ = false;
  std::vector<Dest> dests_;
  std::vector<uint8_t> buffer_;     // one chunk, for reads that are not in place
  embedding::HostStaging staging_;  // device blocks read again beyond the limit
};

}  // namespace shardrec::checkpoint
