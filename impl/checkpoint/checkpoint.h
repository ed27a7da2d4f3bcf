// Sharded checkpoints of an embedding collection (1D or on a 2D mesh), loadable under any plan
// and world size, and export/import of single full tables. Reads and writes the collection only
// through its parameter views (param_views.h), a GPU collection's through host staging.
// docs/checkpoint-format.md describes the files.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "impl/checkpoint/fs.h"
#include "impl/comm/communicator.h"
#include "impl/core/status.h"
#include "impl/embedding/collection.h"

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
  // Read and verify every chunk this rank needs before changing anything (a second read of the
  // same bytes), so a corrupt record leaves the collection untouched.
  bool verify_first = false;
};

// Collective over g.comm. Each writing rank writes its file atomically, then world rank 0
// publishes `dir`/manifest.json atomically (the previous checkpoint in `dir` stays loadable
// until that rename) and removes the previous checkpoint's files. Errors: kInvalidUsage while an
// input distribution is pending; kInvalidArgument for bad dense tensors; kIo from the file
// system; a GPU collection's failed device copy (kCuda, kTimeout: nothing changed); a rank's
// failure fails every rank.
Status Save(embedding::EmbeddingCollection& coll, const Group& g, FileSystem& fs,
            const std::string& dir, const SaveOptions& options);

// Collective over g.comm: every rank reads the manifest and the byte ranges of the records that
// overlap its local shards (in chunks of about kChunkBytes, each verified against its checksum).
// Before anything changes: kNotFound without a manifest; kInvalidArgument for a checkpoint of
// other tables, dims, dtypes or optimizers (see LoadOptions) or a dense tensor that does not
// match; kCorrupt for a malformed manifest, a missing, truncated or malformed rank file or
// records that do not cover a local shard. A chunk whose checksum fails is kCorrupt naming the
// file and the record, found while copying: the collection's values are then partly loaded and
// must be loaded again (unless verify_first, which finds it before anything changes). A GPU
// collection's shards are filled through host staging (staged_copy.h); a failed device copy
// leaves them partly loaded the same way.
Status Load(embedding::EmbeddingCollection& coll, const Group& g, FileSystem& fs,
            const std::string& dir, const LoadOptions& options);

// Collective over the collection's communicator: gathers the full table (fp32 weights, and with
// `with_state` every optimizer state) and rank 0 writes `path` atomically in the safetensors
// layout (tensors "weights" [rows, dim] and each state by name). kNotFound for an unknown table.
Status ExportTable(embedding::EmbeddingCollection& coll, FileSystem& fs, const std::string& path,
                   const std::string& table, bool with_state);

// Collective: every rank reads the overlap of its local shards with the file's "weights" tensor
// (F32, F16 or BF16, shape [rows, dim] of the table), and with `with_state` the states present
// in the file whose names and shapes match the table's optimizer. kInvalidArgument for a shape
// mismatch, kCorrupt for a malformed file; checked before anything changes.
Status ImportTable(embedding::EmbeddingCollection& coll, FileSystem& fs, const std::string& path,
                   const std::string& table, bool with_state);

}  // namespace shardrec::checkpoint
