// The serving file (docs/serving-format.md): one file holding a model version's tables in their
// serving storage and its dense tensors, 64-byte aligned, checksummed, opened by mmap.
#pragma once

#include <memory>
#include <string>

#include "impl/core/status.h"
#include "impl/serving/model.h"

namespace shardrec::serving {

// Version 2 added dynamic tables (their ids and zero row); files without one are written as 1.
inline constexpr int kServingFormatVersion = 2;

// Writes `m` to `path` atomically (temporary file, fsync, rename, directory fsync). kIo.
Status SaveServingFile(const Model& m, const std::string& path);

// Maps `path` read-only (shared pages) and verifies its header and every checksum before
// returning. kNotFound for a missing file; kCorrupt naming the file and the record for anything
// malformed, truncated or failing a checksum; kIo.
Status OpenServingFile(const std::string& path, Bounds bounds, std::shared_ptr<Model>* out);

}  // namespace shardrec::serving
