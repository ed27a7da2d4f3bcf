// A store snapshot a checkpoint names (format.h, StoreRef; docs/checkpoint-format.md, version 4)
// read as if it were a rank file: the entry's records lie one after another in a virtual file,
// each row's bytes taken from that row's store record at the record's store_offset. So every
// reader of records (the load's CopyOverlap and VerifyOverlap, resharding, serving's tiered
// rows) reads a snapshot without knowing it is one. The store checks each record's checksum as
// it reads it (kCorrupt naming the segment); the snapshot's MANIFEST is checked against the
// checksum the checkpoint's manifest holds when it is opened.
#pragma once

#include <memory>
#include <string>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/fs.h"
#include "impl/core/status.h"

namespace shardrec::checkpoint {

// The name of the MANIFEST inside a store snapshot's directory.
inline constexpr const char* kStoreManifestName = "MANIFEST";

// Opens the store snapshot of entry `e` (is_store) at directory `path` read-only: its MANIFEST
// must be e.size bytes with e.store.manifest_xxh3 as checksum, and the store must open with
// e.store's identity and value size (every segment it names present, of its identity, not
// torn). kCorrupt naming the path otherwise; kUnsupported when `fs` is not the operating
// system's (native()). The file is thread-safe (reads share the store, whose Get is); a read
// of a row the snapshot lacks is kCorrupt.
Status OpenStoreSnapshot(FileSystem& fs, const std::string& path, const FileEntry& e,
                         std::unique_ptr<ReadableFile>* out);

// The bytes `size` and checksum of the MANIFEST of the snapshot in directory `path`, and the
// identity and value size of its store: what a save records in the snapshot's file entry.
Status DescribeStoreSnapshot(FileSystem& fs, const std::string& path, uint64_t* size,
                             StoreRef* out);

}  // namespace shardrec::checkpoint
