// Sharded checkpoints of an embedding collection (1D or on a 2D mesh), loadable under any plan
// and world size, and export/import of single full tables. Reads and writes the collection only
// through its storage seam (embedding/storage/table_storage.h: its parameter views, a GPU
// collection's through host staging, and the keyed rows of its dynamic tables).
// docs/checkpoint-format.md describes the files.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "impl/checkpoint/fs.h"
#include "impl/checkpoint/staged_load.h"
#include "impl/comm/communicator.h"
#include "impl/core/status.h"
#include "impl/embedding/storage/table_storage.h"

namespace shardrec::checkpoint {

// A host-owned fp32 tensor saved with the checkpoint (the dense side: MLP parameters and their
// optimizer state). Replicated on every rank: world rank 0 writes it, every rank reads it.
struct DenseTensor {
  std::string name;
  float* data = nullptr;
  size_t count = 0;
};

// Who holds the model. 1D: `comm` is the collection's communicator, one replica. 2D: `comm` is
// the mesh's world, `replicas` R and this rank's position in its replica group; every replica
// of a shard holds the same values, so one of them (spread over the replicas) writes it.
struct Group {
  comm::Communicator* comm = nullptr;
  int replicas = 1;
  int replica_rank = 0;
  // 2D: this rank's replica group. With it, a save of dynamic tables first checks that every
  // replica holds the same keys (the mesh was synced after the last step); without it, it
  // trusts that they do.
  comm::Communicator* replica = nullptr;
};

struct SaveOptions {
  std::vector<DenseTensor> dense;
};

struct LoadOptions {
  std::vector<DenseTensor> dense;  // each must exist in the checkpoint with the same count
  // Load the weights of tables whose optimizer differs from the checkpoint's, starting their
  // optimizer state (and the step counter) from zero; without it that is a mismatch error.
  bool reset_optimizer_state = false;
  // Accept a table stored as fp32 in the checkpoint and fp16/bf16 in the collection (or the
  // reverse); values are converted (round to nearest even when narrowing).
  bool allow_dtype_change = false;
  // By default a load is all-or-nothing (staged_load.h): every rank reads and verifies its part
  // into host staging (up to staging_limit bytes; beyond it, a verifying first read and a second
  // read while committing), the ranks agree, and only then is anything copied into place.
  // allow_partial_load streams each verified chunk straight into place instead (no staging
  // memory, one copy less): a failure while copying leaves the collection partly loaded.
  bool allow_partial_load = false;
  // With allow_partial_load: read and verify every chunk first (a second read of the same
  // bytes), so a corrupt record still changes nothing; an I/O error while copying does.
  // Without it this changes nothing (every chunk is verified before anything changes anyway).
  bool verify_first = false;
  // Host staging per rank and call; the C API uses the default, tests lower it to reach the
  // path beyond it.
  uint64_t staging_limit = kDefaultStagingLimit;
};

// Collective over g.comm. Each writing rank writes its file atomically, then world rank 0 checks
// that every rank's file is in its `dir`, publishes `dir`/manifest.json atomically (the previous
// checkpoint in `dir` stays loadable until that rename) and removes the previous checkpoint's
// files. Errors: kInvalidUsage while an input distribution is pending; kInvalidArgument for bad
// dense tensors or a rank's file missing from rank 0's `dir` (ranks given different
// directories: nothing published); kIo from the file system; a GPU collection's failed device
// copy (kCuda, kTimeout: nothing changed); a rank's failure fails every rank.
Status Save(embedding::TableStorage& storage, const Group& g, FileSystem& fs,
            const std::string& dir, const SaveOptions& options);

// Collective over g.comm: every rank reads the manifest and the byte ranges of the records that
// overlap its local shards (in chunks of about kChunkBytes, each verified against its checksum).
// Errors: kNotFound without a manifest; kInvalidArgument for a checkpoint of other tables, dims,
// dtypes or optimizers (see LoadOptions) or a dense tensor that does not match; kCorrupt for a
// malformed manifest, a missing, truncated or malformed rank file, records that do not cover a
// local shard, a chunk whose checksum fails (naming the file and the record), or a dynamic
// table's id saved twice; kIo; a peer's failure or a timeout. By default every one of them
// leaves the weights, optimizer states, step counter and dense tensors unchanged on every rank
// (all are found before the commit, which copies from host staging), except a peer lost during
// the last agreement: it may complete on some ranks (which commit) and fail on others (which may
// have committed when the commit can fail, as that is agreed after the commit then;
// docs/checkpoint-format.md). What can still fail after the commit began, leaving the collection
// partly loaded and reported as such on every rank: a GPU collection's device copy, and the
// second read of destinations beyond staging_limit. allow_partial_load: failures found while
// copying leave the collection partly loaded (verify_first finds corrupt chunks first).
Status Load(embedding::TableStorage& storage, const Group& g, FileSystem& fs,
            const std::string& dir, const LoadOptions& options);

// Collective over the collection's communicator: gathers the full table (fp32 weights, and with
// `with_state` every optimizer state) and rank 0 writes `path` atomically in the safetensors
// layout (tensors "weights" [rows, dim] and each state by name). kNotFound for an unknown table.
Status ExportTable(embedding::TableStorage& storage, FileSystem& fs, const std::string& path,
                   const std::string& table, bool with_state);

// Collective: every rank reads the overlap of its local shards with the file's "weights" tensor
// (F32, F16 or BF16, shape [rows, dim] of the table), and with `with_state` the states present
// in the file whose names and shapes match the table's optimizer. kInvalidArgument for a shape
// mismatch, kCorrupt for a malformed or truncated file, kIo, a peer's failure: all found before
// anything changes, as a default Load (staged up to `staging_limit`).
Status ImportTable(embedding::TableStorage& storage, FileSystem& fs, const std::string& path,
                   const std::string& table, bool with_state,
                   uint64_t staging_limit = kDefaultStagingLimit);

}  // namespace shardrec::checkpoint
