// Loading records into a GPU collection's shard tensor: the destination lives in device memory,
// so it is filled block by block in a host staging area (CopyOverlap: checksums verified, dtypes
// converted, exactly as into a host collection) and each block is then copied to the device.
// Host memory stays bounded (one block, about kStageBytes) whatever the shard's size.
#pragma once

#include <string>
#include <vector>

#include "impl/checkpoint/copy.h"
#include "impl/checkpoint/fs.h"
#include "impl/core/device.h"
#include "impl/embedding/device_copy.h"

namespace shardrec::checkpoint {

// Bytes of destination rows staged per block.
inline constexpr uint64_t kStageBytes = uint64_t{8} << 20;

// One record to read from, and the file (with its path, for messages) that holds it.
struct OverlapSource {
  const ReadableFile* file = nullptr;
  std::string path;
  const Record* rec = nullptr;
};

// Writes the overlap of every source with `dst` into `dst`, whose data is memory on CUDA
// `device` in whole rows (row_stride == cols). A block no set of sources covers completely is
// first read back from the device, so the elements no source holds keep their values. Errors:
// CopyOverlap's (kCorrupt naming the file and record) and the device copies'; the blocks before
// a failure are loaded, the rest unchanged, as a failing CopyOverlap leaves a host tensor.
Status CopyOverlapsToDevice(const Device& device, const Target& dst,
                            const std::vector<OverlapSource>& sources,
                            embedding::HostStaging* staging, std::vector<uint8_t>* buffer);

// Sets every element of `dst` (device memory on `device`, whole rows) to zero.
Status ZeroOnDevice(const Device& device, const Target& dst);

}  // namespace shardrec::checkpoint
