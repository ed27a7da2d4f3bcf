// What the serving's two ways of opening a checkpoint table share (open_checkpoint.cc reads a
// table into memory, tiered_dynamic_open.cc serves it from its files): the rank files opened on
// first use, and a dynamic table's saved row blocks gathered, checked and their ids read, so both
// refuse the same damage with the same words and order rows the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/fs.h"
#include "impl/core/status.h"

namespace shardrec::serving {

// A checkpoint's rank files, each opened on first use and checked against the manifest (its size,
// and the safetensors header's entry of every record). Refers to `fs` and `m`, which outlive it;
// one thread at a time.
class CheckpointFiles {
 public:
  CheckpointFiles(checkpoint::FileSystem& fs, std::string dir, const checkpoint::Manifest& m)
      : fs_(fs), dir_(std::move(dir)), m_(m), open_(m.files.size()) {}

  std::string Path(size_t fi) const { return dir_ + "/" + m_.files[fi].name; }
  // The file of manifest entry `fi`, owned by this object. kCorrupt (truncated, header not the
  // manifest's) or the file system's error, naming the path.
  Status Get(size_t fi, const checkpoint::ReadableFile** out);

 private:
  checkpoint::FileSystem& fs_;
  std::string dir_;
  const checkpoint::Manifest& m_;
  std::vector<std::unique_ptr<checkpoint::ReadableFile>> open_;
};

// One saved row block of a dynamic table: its ids record and its weights records (one per column
// shard), each with the index of the manifest entry that holds it. Points into the manifest.
struct DynamicBlock {
  const checkpoint::Record* ids = nullptr;
  size_t ids_file = 0;
  std::vector<std::pair<size_t, const checkpoint::Record*>> weights;
};

// The saved row blocks of dynamic table `table`, by their first row (ascending: the order rows
// are numbered in before sorting). kCorrupt for two ids records of one block.
Status GroupDynamicBlocks(const CheckpointFiles& files, const checkpoint::Manifest& m,
                          const std::string& table, std::map<int64_t, DynamicBlock>* out);

// Checks the row block of `table` (dim `dim`) starting at row `offset` and appends its ids to
// `ids`: the ids record an I64 vector, every weights record of the block's rows and inside its
// columns, together covering rows x dim once. kCorrupt naming the file and record; weights
// without ids are refused; an empty block (metadata only) appends nothing. `buffer`: scratch.
Status ReadBlockIds(CheckpointFiles& files, const std::string& table, int64_t offset,
                    const DynamicBlock& b, int64_t dim, std::vector<int64_t>* ids,
                    std::vector<uint8_t>* buffer);

// The permutation that sorts `ids` ascending (`order`) and the sorted ids (`sorted`): a version's
// rows in id order, so a row number means the same in memory, from files and in deltas. kCorrupt
// for an id saved twice.
Status SortDynamicIds(const std::string& table, const std::vector<int64_t>& ids,
                      std::vector<size_t>* order, std::vector<int64_t>* sorted);

}  // namespace shardrec::serving
