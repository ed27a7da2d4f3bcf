// Table export and import of dynamic tables (keyed_table_io.h). The export gathers every rank's
// live rows (each column shard its columns, row-wise state once) and merges them by id; the
// import reads the whole file on every rank, because only the ids say which shard a row goes to.
#include "impl/checkpoint/keyed_table_io.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "impl/checkpoint/copy.h"
#include "impl/checkpoint/format.h"
#include "impl/checkpoint/record_copy.h"
#include "impl/comm/agree.h"
#include "impl/comm/gather_bytes.h"
#include "impl/core/check.h"
#include "impl/core/config.h"
#include "impl/core/element.h"
#include "impl/embedding/dynamic/placement.h"

namespace shardrec::checkpoint {
namespace {

using embedding::ShardTensor;

// The table's tensors in file order: "weights", then each optimizer state; their row widths.
struct TableTensors {
  std::vector<std::string> names;
  std::vector<int64_t> widths;
  std::vector<bool> row_wise;
};

TableTensors Describe(const embedding::TableStorage& storage, int32_t t) {
  const embedding::TableLayout& tl = storage.layout().tables[static_cast<size_t>(t)];
  const int64_t dim = storage.plan().tables[static_cast<size_t>(t)].dim;
  TableTensors out{{"weights"}, {dim}, {false}};
  for (const auto& s : tl.state_specs) {
    out.names.push_back(s.name);
    out.widths.push_back(s.row_wise ? 1 : dim);
    out.row_wise.push_back(s.row_wise);
  }
  return out;
}

// The index in TableTensors of shard tensor `st`.
size_t TensorIndex(const TableTensors& tt, const ShardTensor& st) {
  if (st.kind == embedding::ParamKind::kWeights) return 0;
  for (size_t k = 1; k < tt.names.size(); ++k)
    if (tt.names[k] == st.name) return k;
  SR_CHECK(false);
  return 0;
}

std::vector<int32_t> LocalShardsOf(const embedding::Layout& layout, int32_t t) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < layout.local.size(); ++i)
    if (layout.local[i].table == t) out.push_back(static_cast<int32_t>(i));
  return out;
}

// Every rank's live rows of table `t` merged by id: ids ascending, and per tensor the rows
// [ids.size(), width] (fp32).
Status GatherTable(embedding::TableStorage& storage, int32_t t, const TableTensors& tt,
                   size_t ntensors, std::vector<int64_t>* ids,
                   std::vector<std::vector<float>>* data) {
  const embedding::Layout& layout = storage.layout();
  const std::string& name = storage.plan().tables[static_cast<size_t>(t)].name;
  comm::Communicator& comm = storage.comm();
  Status local = Status::Ok();
  if (storage.input_dist_pending())
    local = Status::InvalidUsage("cannot export dynamic table '", name,
                                 "' while an input distribution is pending");
  SR_RETURN_IF_ERROR(Agree(comm, local, "to start the export"));
  // This rank's part: entries (id, tensor, first column, columns, values).
  std::vector<uint8_t> blob(sizeof(int64_t), 0);
  int64_t entries = 0;
  const std::vector<ShardTensor> tensors = storage.ShardTensors();
  for (int32_t li : LocalShardsOf(layout, t)) {
    const embedding::LocalShard& ls = layout.local[static_cast<size_t>(li)];
    embedding::KeyedRows shard;
    SR_CHECK(storage.ExportKeyedRows(li, 0, INT64_MAX, &shard));
    for (const ShardTensor& st : tensors) {
      if (st.table != t || st.shard != ls.shard || st.duplicate) continue;
      const size_t k = TensorIndex(tt, st);
      if (k >= ntensors) continue;
      const size_t es = DTypeSize(st.dtype);
      const auto c0 = static_cast<int32_t>(tt.row_wise[k] ? 0 : st.col_offset);
      const auto nc = static_cast<int32_t>(st.cols);
      // A tiered shard's live slots (docs/disk-tier.md) are read through the storage in chunks.
      constexpr int64_t kChunk = 4096;
      std::vector<float> chunk;
      for (int64_t s = 0; s < shard.size && local.ok(); ++s) {
        if (st.streamed && s % kChunk == 0) {
          const int64_t n = std::min(kChunk, shard.size - s);
          chunk.resize(static_cast<size_t>(n * nc));
          local = storage.ReadTieredRows(li, st.state, s, n, chunk.data());
          if (!local.ok()) break;
        }
        PutValue<int64_t>(&blob, shard.ids[static_cast<size_t>(s)]);
        PutValue<int32_t>(&blob, static_cast<int32_t>(k));
        PutValue<int32_t>(&blob, c0);
        PutValue<int32_t>(&blob, nc);
        if (st.streamed) {
          for (int32_t c = 0; c < nc; ++c) PutValue<float>(&blob, chunk[(s % kChunk) * nc + c]);
        } else {
          const auto* row = static_cast<const uint8_t*>(st.data) +
                            static_cast<size_t>(s) * static_cast<size_t>(st.row_stride) * es;
          for (int32_t c = 0; c < nc; ++c)
            PutValue<float>(&blob, LoadElement(st.dtype, row + c * es));
        }
        ++entries;
      }
    }
  }
  // A tiered shard's read can fail on this rank alone (its store).
  SR_RETURN_IF_ERROR(Agree(comm, local, "to read its rows"));
  std::memcpy(blob.data(), &entries, sizeof(entries));
  std::vector<uint8_t> all;
  std::vector<size_t> sizes;
  SR_RETURN_IF_ERROR(comm::AllGatherBytes(comm, blob.data(), blob.size(), &all, &sizes));

  std::vector<int64_t> offsets(ntensors + 1, 0);  // of each tensor in a merged row
  for (size_t k = 0; k < ntensors; ++k) offsets[k + 1] = offsets[k] + tt.widths[k];
  std::map<int64_t, std::vector<float>> rows;
  const uint8_t* p = all.data();
  for (size_t r = 0; r < sizes.size(); ++r) {
    const int64_t ne = GetValue<int64_t>(p);
    for (int64_t e = 0; e < ne; ++e) {
      const int64_t id = GetValue<int64_t>(p);
      const auto k = static_cast<size_t>(GetValue<int32_t>(p));
      const int32_t c0 = GetValue<int32_t>(p), nc = GetValue<int32_t>(p);
      std::vector<float>& row = rows[id];
      row.resize(static_cast<size_t>(offsets[ntensors]));
      std::memcpy(row.data() + offsets[k] + c0, p, static_cast<size_t>(nc) * sizeof(float));
      p += static_cast<size_t>(nc) * sizeof(float);
    }
  }
  ids->clear();
  data->assign(ntensors, {});
  for (const auto& [id, row] : rows) {
    ids->push_back(id);
    for (size_t k = 0; k < ntensors; ++k)
      (*data)[k].insert((*data)[k].end(), row.begin() + offsets[k], row.begin() + offsets[k + 1]);
  }
  return Status::Ok();
}

// Splits "dir/name" (a bare name lives in ".").
void SplitPath(const std::string& path, std::string* dir, std::string* name) {
  const size_t slash = path.rfind('/');
  *dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  *name = slash == std::string::npos ? path : path.substr(slash + 1);
}

// One local shard's import: its ids after the import (its rows in slot order, then the new ids)
// with their metadata (scores for SCORE tables only), and the (slot, file row) pairs to write.
struct StagedShard {
  int32_t local = 0;
  size_t existing = 0;  // slots [0, existing) held rows before the import
  embedding::KeyedRows rows;
  std::vector<std::pair<int64_t, int64_t>> writes;
};

}  // namespace

Status ExportKeyedTable(embedding::TableStorage& storage, FileSystem& fs, const std::string& path,
                        int32_t t, bool with_state) {
  if (path.empty()) return Status::InvalidArgument("path must not be empty");
  const std::string& table = storage.plan().tables[static_cast<size_t>(t)].name;
  const TableTensors tt = Describe(storage, t);
  const size_t ntensors = with_state ? tt.names.size() : 1;
  std::vector<int64_t> ids;
  std::vector<std::vector<float>> data;
  SR_RETURN_IF_ERROR(GatherTable(storage, t, tt, ntensors, &ids, &data));
  const auto n = static_cast<int64_t>(ids.size());
  std::vector<Record> recs(1 + ntensors);
  recs[0].key = "ids";
  recs[0].dtype = DType::kInt64;
  recs[0].vector = true;
  recs[0].rows = n;
  recs[0].cols = 1;
  recs[0].nbytes = static_cast<uint64_t>(n) * sizeof(int64_t);
  for (size_t k = 0; k < ntensors; ++k) {
    Record& r = recs[1 + k];
    r.key = tt.names[k];
    r.vector = tt.row_wise[k];
    r.rows = n;
    r.cols = tt.widths[k];
    r.nbytes = data[k].size() * sizeof(float);
  }
  Status local = Status::Ok();
  if (storage.comm().Rank() == 0) {
    const std::string header =
        SafetensorsHeader(&recs, {{"format", "shardrec-dynamic-table"},
                                  {"table", table},
                                  {"library_version", SHARDREC_VERSION_STRING}});
    std::vector<std::pair<const void*, size_t>> pieces{{header.data(), header.size()},
                                                       {ids.data(), recs[0].nbytes}};
    for (size_t k = 0; k < ntensors; ++k) pieces.push_back({data[k].data(), recs[1 + k].nbytes});
    std::string dir, name;
    SplitPath(path, &dir, &name);
    local = WriteAtomically(fs, dir, name, pieces);
  }
  return Agree(storage.comm(), local, "to write the exported table");
}

Status ImportKeyedTable(embedding::TableStorage& storage, FileSystem& fs, const std::string& path,
                        int32_t t, bool with_state) {
  const embedding::Layout& layout = storage.layout();
  const embedding::TableLayout& tl = layout.tables[static_cast<size_t>(t)];
  const std::string& table = storage.plan().tables[static_cast<size_t>(t)].name;
  const TableTensors tt = Describe(storage, t);
  std::vector<int64_t> ids;
  std::vector<std::vector<float>> data(tt.names.size());  // empty: not in the file (or not read)
  std::vector<StagedShard> staged;
  Status local = [&]() -> Status {
    if (storage.input_dist_pending())
      return Status::InvalidUsage("cannot import a table while an input distribution is pending");
    std::unique_ptr<ReadableFile> file;
    SR_RETURN_IF_ERROR(fs.OpenReadable(path, &file));
    file = StopOnAbort(std::move(file), storage.comm());
    std::vector<Record> recs;
    SR_RETURN_IF_ERROR(ReadSafetensors(*file, path, &recs, nullptr));
    std::map<std::string, const Record*> by_key;
    for (const Record& r : recs) by_key[r.key] = &r;
    auto ids_rec = by_key.find("ids");
    if (ids_rec == by_key.end())
      return Status::InvalidArgument(path, " has no tensor named \"ids\": dynamic table '", table,
                                     "' imports rows keyed by id (a table export of it)");
    const Record& ir = *ids_rec->second;
    if (ir.dtype != DType::kInt64 || ir.cols != 1)
      return Status::InvalidArgument(path, ": \"ids\" must be an I64 vector");
    const int64_t n = ir.rows;
    std::vector<uint8_t> chunk;
    ids.resize(static_cast<size_t>(n));
    SR_RETURN_IF_ERROR(
        CopyOverlap(*file, path, ir, Target{DType::kInt64, 0, 0, n, 1, ids.data(), 1}, &chunk));
    std::vector<int64_t> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    if (auto at = std::adjacent_find(sorted.begin(), sorted.end()); at != sorted.end())
      return Status::InvalidArgument(path, ": id ", *at, " appears twice in \"ids\"");
    for (size_t k = 0; k < tt.names.size(); ++k) {
      if (k > 0 && !with_state) break;
      auto it = by_key.find(tt.names[k]);
      if (it == by_key.end()) {
        if (k == 0) return Status::InvalidArgument(path, " has no tensor named \"weights\"");
        continue;  // a state the file lacks: new rows start at zero, existing rows keep theirs
      }
      const Record& r = *it->second;
      if (r.dtype != DType::kFloat32 && r.dtype != DType::kFloat16 && r.dtype != DType::kBFloat16)
        return Status::InvalidArgument(path, ": tensor ", r.key, " is ", DTypeName(r.dtype),
                                       "; import reads F32, F16 or BF16");
      if (r.rows != n || r.cols != tt.widths[k] || (k == 0 && r.vector && tt.widths[k] > 1))
        return Status::InvalidArgument(path, ": \"", r.key, "\" is ", r.rows, " x ", r.cols,
                                       ", dynamic table '", table, "' needs ", n, " x ",
                                       tt.widths[k], " (one row per id)");
      data[k].resize(static_cast<size_t>(n * tt.widths[k]));
      SR_RETURN_IF_ERROR(CopyOverlap(
          *file, path, r,
          Target{DType::kFloat32, 0, 0, n, tt.widths[k], data[k].data(), tt.widths[k]}, &chunk));
    }
    // Each local shard: the file's ids of its row block, overwritten in place or added. A
    // data-parallel table's copy is one block of every id (its layout keeps no blocks), so every
    // rank inserts the same ids in the same order and the copies stay equal.
    const auto num_blocks = tl.data_parallel ? 1 : static_cast<int32_t>(tl.blocks.size());
    for (int32_t li : LocalShardsOf(layout, t)) {
      const embedding::LocalShard& ls = layout.local[static_cast<size_t>(li)];
      int32_t block = 0;
      while (!tl.data_parallel && block < num_blocks &&
             tl.blocks[static_cast<size_t>(block)].row_offset != ls.row_offset)
        ++block;
      SR_CHECK(block < num_blocks);
      StagedShard s;
      s.local = li;
      embedding::KeyedRows& held = s.rows;
      SR_CHECK(storage.ExportKeyedRows(li, 0, INT64_MAX, &held));
      s.existing = static_cast<size_t>(held.size);
      std::unordered_map<int64_t, int64_t> slot_of;
      for (size_t i = 0; i < held.ids.size(); ++i)
        slot_of.emplace(held.ids[i], static_cast<int64_t>(i));
      std::vector<std::pair<int64_t, int64_t>> fresh;  // (id, file row), placed in id order
      for (int64_t row = 0; row < n; ++row) {
        const int64_t id = ids[static_cast<size_t>(row)];
        if (embedding::dynamic::BlockOfId(id, num_blocks) != block) continue;
        auto it = slot_of.find(id);
        if (it != slot_of.end())
          s.writes.push_back({it->second, row});
        else
          fresh.push_back({id, row});
      }
      std::sort(fresh.begin(), fresh.end());
      if (static_cast<int64_t>(s.existing + fresh.size()) > held.slots)
        return Status::InvalidArgument("import of dynamic table '", table,
                                       "': its row block at row ", ls.row_offset, " would hold ",
                                       s.existing + fresh.size(), " rows (", s.existing, " held, ",
                                       fresh.size(), " new from ", path, ") but has ", held.slots,
                                       " slots; nothing was imported (raise the capacity)");
      for (const auto& [id, row] : fresh) {
        s.writes.push_back({static_cast<int64_t>(held.ids.size()), row});
        held.ids.push_back(id);
        held.last_seen.push_back(held.forwards);  // seen now: not the first victim of LRU or TTL
        held.counts.push_back(0);
        if (held.scored) held.scores.push_back(0.0);
      }
      staged.push_back(std::move(s));
    }
    return Status::Ok();
  }();
  SR_RETURN_IF_ERROR(Agree(storage.comm(), local, "to read the table file"));
  // Every rank read the whole file: they must have read the same rows (a data-parallel copy
  // importing another file than its peers would leave the copies different, and the slot-wise
  // gradient reduction would then mix ids), so the ranks compare a digest of what they read.
  std::vector<int64_t> read = {static_cast<int64_t>(Checksum(ids.data(), ids.size() * 8) >> 1)};
  for (const std::vector<float>& d : data)
    read.push_back(static_cast<int64_t>(Checksum(d.data(), d.size() * sizeof(float)) >> 1));
  const int64_t same[] = {comm::Digest63(read)};
  SR_RETURN_IF_ERROR(comm::AgreeOnArguments(
      storage.comm(), Status::Ok(), "dynamic table import", same,
      StrCat("the ranks read different contents (this rank: ", path,
             "); every rank must import the same file (a copy of it may sit at another path)")));
  // Memory copies only from here: nothing can fail.
  const std::vector<ShardTensor> tensors = storage.ShardTensors();
  for (const StagedShard& s : staged) {
    storage.ImportKeyedRows(s.local, s.rows, embedding::KeyedImport::kUpdate);
    const embedding::LocalShard& ls = layout.local[static_cast<size_t>(s.local)];
    for (const ShardTensor& st : tensors) {
      if (st.table != t || st.shard != ls.shard) continue;
      const size_t k = TensorIndex(tt, st);
      const size_t es = DTypeSize(st.dtype);
      const size_t stride = static_cast<size_t>(st.row_stride) * es;
      auto* base = static_cast<uint8_t*>(st.data);
      if (data[k].empty()) {
        // Not imported: the new rows' state starts at zero, as a row new to training.
        for (size_t i = s.existing; i < s.rows.ids.size(); ++i)
          std::memset(base + i * stride, 0, static_cast<size_t>(st.cols) * es);
        continue;
      }
      const int64_t c0 = tt.row_wise[k] ? 0 : st.col_offset;
      for (const auto& [slot, row] : s.writes) {
        const float* from = data[k].data() + row * tt.widths[k] + c0;
        uint8_t* to = base + static_cast<size_t>(slot) * stride;
        for (int64_t c = 0; c < st.cols; ++c) StoreElement(st.dtype, from[c], to + c * es);
      }
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
