// Builds a model version from a source: a training checkpoint directory (every table reassembled
// whole and converted to its serving storage) or a serving file (mapped read-only).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "impl/core/status.h"
#include "impl/serving/model.h"

namespace shardrec::serving {

struct OpenOptions {
  Storage default_storage = Storage::kAsTrained;
  std::map<std::string, Storage> table_storage;  // overrides by table name
  Bounds bounds = Bounds::kError;
  // Tables served from the checkpoint's files through a row cache of this many bytes each
  // (tiered_open.h), by table name; a checkpoint only.
  std::map<std::string, uint64_t> tiers;
};

// Reads the checkpoint in `dir` (manifest, rank files, every weights record's checksums; the
// optimizer states are not read). kNotFound without a manifest; kCorrupt naming the file and
// record; kInvalidArgument for an override naming no table or a value a storage cannot hold.
// Memory beyond the result: one fp32 copy of the largest int8/int4 table while it is quantized,
// or of a dynamic table (any storage) while its rows are gathered and sorted by id.
Status OpenCheckpoint(const std::string& dir, const OpenOptions& o, std::shared_ptr<Model>* out);

// A directory is read as a checkpoint, anything else as a serving file (serving_file.h).
Status OpenSource(const std::string& path, const OpenOptions& o, std::shared_ptr<Model>* out);

}  // namespace shardrec::serving
