// The on-disk vocabulary of checkpoints (docs/checkpoint-format.md): records (one tensor block
// with its place in the full tensor and a checksum per chunk of rows), per-rank files in the
// safetensors layout, and the JSON manifest that is published last.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "impl/checkpoint/fs.h"
#include "impl/core/dtype.h"
#include "impl/core/status.h"

namespace shardrec::checkpoint {

// Version 1: fixed tables only. Version 2: the same layout plus dynamic tables (rows keyed by id,
// docs/checkpoint-format.md#dynamic-tables). A writer stamps the lowest version that describes
// what it holds, so a checkpoint of fixed tables stays readable by a version-1 reader, and a
// version-1 reader refuses one with dynamic tables as a newer format instead of finding its
// blocks uncovered. Version 3: FP8 tables' weights as their stored bytes (FP8 records, below)
// instead of decoded fp32, which an older reader would misread. Version 4: file entries that
// name a store snapshot (a tiered shard's rows as the disk tier's store holds them, hard-linked
// from it: StoreRef below) beside the rank files. Version 5: store snapshots of dynamic tables'
// shards too (their live rows keyed by slot, the ids in the rank file), which a version-4
// reader, told store snapshots hold fixed tables only, must not meet. The reader takes all five.
inline constexpr int kFormatVersion = 1;
inline constexpr int kDynamicFormatVersion = 2;
inline constexpr int kFp8FormatVersion = 3;
inline constexpr int kStoreFormatVersion = 4;
inline constexpr int kDynamicStoreFormatVersion = 5;
inline constexpr const char* kManifestName = "manifest.json";
// The manifest's member holding the XXH3-64 of its own compact JSON without that member.
inline constexpr const char* kManifestChecksumKey = "manifest_xxh3";
// Rows per checksum chunk are chosen so a chunk is about this many bytes: the loader reads and
// verifies whole chunks, so this bounds both its buffer and its over-read.
inline constexpr uint64_t kChunkBytes = 1u << 20;

// One tensor block. Tables: weights and element-wise states are [rows, cols] blocks of
// [full_rows, full_cols] tables; row-wise states are [rows] blocks of [full_rows] vectors
// (cols = full_cols = 1, vector = true). Dense tensors: table empty, a [rows] vector.
struct Record {
  std::string key;     // tensor name inside its file
  std::string table;   // empty for a dense tensor
  std::string tensor;  // "weights", the optimizer state's name, or the dense tensor's name
  DType dtype = DType::kFloat32;
  bool vector = false;
  int64_t full_rows = 0, full_cols = 0;
  int64_t row_offset = 0, col_offset = 0;
  int64_t rows = 0, cols = 0;
  uint64_t offset = 0;  // absolute byte offset of the data in the file
  uint64_t nbytes = 0;
  int64_t chunk_rows = 1;
  std::vector<uint64_t> checksums;  // XXH3-64 of each chunk; empty when unknown (imports)
  // A record of a store snapshot's file entry: where its row's bytes start in each store record
  // (-1: a record of a rank file). Its bytes are checked by the store's own per-record checksums
  // (`checksums` is empty); `offset` places it in the entry's virtual file (snapshot_file.h).
  int64_t store_offset = -1;

  // An FP8 record (dtype kFp8E4M3 / kFp8E5M2) holds the table's stored rows: per row its fp32
  // scale, then `cols` codes (fp8.h's row layout). In the rank file's safetensors header it is a
  // U8 tensor of [rows, cols + 4] (SafetensorsView).
  uint64_t row_bytes() const {
    return IsFp8DType(dtype) ? static_cast<uint64_t>(Fp8RowBytes(cols))
                             : static_cast<uint64_t>(cols) * DTypeSize(dtype);
  }
};

// What a rank file's safetensors header says of `r`: its dtype and columns (U8 and cols + 4 for
// an FP8 record, else its own). The loader compares the header's records with these.
void SafetensorsView(const Record& r, DType* dtype, int64_t* cols);

int64_t ChunkRows(uint64_t row_bytes);
uint64_t Checksum(const void* data, size_t n);  // XXH3-64

// A store snapshot (impl/store/row_store.h, Snapshot) that a file entry names: a directory of
// segment files and a MANIFEST. Its keys are the shard's rows (0 .. rows), each value one row's
// record of the tiered table (weights in the table's dtype, then its optimizer state).
struct StoreRef {
  std::string identity;        // the store's, which its files carry
  uint64_t value_bytes = 0;    // > 0
  uint64_t manifest_xxh3 = 0;  // Checksum of the snapshot's MANIFEST file
};

struct FileEntry {
  std::string name;  // relative to the checkpoint directory
  // A rank file's bytes; a store snapshot's MANIFEST's bytes.
  uint64_t size = 0;
  std::vector<Record> records;
  bool is_store = false;  // `name` is a store snapshot's directory (version 4)
  StoreRef store;
};

struct StateEntry {
  std::string name;
  bool row_wise = false;
};

struct TableEntry {
  std::string name;
  int64_t rows = 0;
  int32_t dim = 0;
  DType dtype = DType::kFloat32;
  int32_t pooling = 0;
  std::vector<std::string> features;
  int32_t optimizer = 0;       // optim::OptimizerType
  std::string optimizer_json;  // the full config, for people and tools
  std::vector<StateEntry> states;
  // Rows keyed by id (docs/dynamic-tables.md): `rows` is the capacity and the records of each
  // row block hold its live rows with an "ids" record (keyed_rows.h).
  bool dynamic = false;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string library_version;
  int64_t generation = 0;
  int64_t step = 0;  // optimizer step counter
  int32_t world_size = 1;
  int32_t shard_size = 1;  // ranks per sharding group (2D); = world_size in 1D
  std::string plan_json;
  std::vector<TableEntry> tables;
  std::vector<FileEntry> files;
};

std::string ManifestToJson(const Manifest& m);
// kCorrupt naming `path` for text that is not a manifest of this format.
Status ManifestFromJson(const std::string& text, const std::string& path, Manifest* out);

std::string FileEntryToJson(const FileEntry& f);
Status FileEntryFromJson(const std::string& text, FileEntry* out);

// The safetensors header of `records` (their offsets are assigned here, in order, after the
// header) with string metadata; returns the 8-byte length + JSON + padding to 8 bytes.
std::string SafetensorsHeader(std::vector<Record>* records,
                              const std::map<std::string, std::string>& metadata);
// Reads a safetensors file's header: tensors as records (key, dtype, shape as rows/cols, vector
// for 1-D, absolute offsets; full_* = the shape, offsets 0, no checksums) and the metadata.
// kCorrupt naming `path` when the header is malformed or points outside the file, or when the
// tensors do not fill the data area exactly, back to back (the safetensors rule: no gap, no
// overlap, nothing after the last tensor, each tensor's bytes its dtype size x its shape).
Status ReadSafetensors(const ReadableFile& file, const std::string& path,
                       std::vector<Record>* records, std::map<std::string, std::string>* metadata);

// Checks the opened rank file `file` (at `path`) against its manifest entry `e`: its size
// (truncation) and that its safetensors header places every record of `e` where the manifest
// says, with the dtype, shape and rank the manifest gives (an FP8 record as SafetensorsView's
// U8). kCorrupt naming the file (and the record) otherwise. Every reader of a checkpoint runs
// it before reading a record from the file.
Status CheckRankFile(const ReadableFile& file, const std::string& path, const FileEntry& e);
// Opens the rank file of `e` at `path` through `fs` and checks it (CheckRankFile); a missing
// file is kCorrupt (the manifest names it). `*out` is set only on success.
Status OpenRankFile(FileSystem& fs, const std::string& path, const FileEntry& e,
                    std::unique_ptr<ReadableFile>* out);

}  // namespace shardrec::checkpoint
