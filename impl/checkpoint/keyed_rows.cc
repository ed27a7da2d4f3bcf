// Saving and loading the rows of dynamic tables by id (keyed_rows.h). The records of a row block
// are found by the block's first row (the record's row offset); every rank reads every block's
// ids, because under a new plan any saved block may hold ids of any new block.
#include "impl/checkpoint/keyed_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "impl/checkpoint/copy.h"
#include "impl/checkpoint/fixed_rows.h"
#include "impl/core/check.h"
#include "impl/core/element.h"
#include "impl/embedding/dynamic/placement.h"

namespace shardrec::checkpoint {
namespace {

using embedding::ShardTensor;

// Per row block: {forward counter, live rows, slots}.
constexpr const char* kMeta = "dynamic_meta";
constexpr const char* kIds = "ids";
constexpr const char* kLastSeen = "last_seen";
constexpr const char* kCount = "count";
constexpr const char* kAdmission = "admission";
constexpr const char* kScore = "score";  // SCORE eviction only: the caller's scores

int32_t LocalOf(const embedding::Layout& layout, int32_t table, int32_t shard) {
  for (size_t i = 0; i < layout.local.size(); ++i)
    if (layout.local[i].table == table && layout.local[i].shard == shard)
      return static_cast<int32_t>(i);
  return -1;
}

// A 1-D record of the row block that starts at t's first row. Per-row vectors have the table's
// full rows (a block has at most its slots live); the others are no block of a table tensor, and
// their full rows just reach their end.
RowSource Vector(const ShardTensor& t, const char* tensor, DType dtype, int64_t rows,
                 const void* data) {
  RowSource s;
  Record& r = s.rec;
  r.table = t.table_name;
  r.tensor = tensor;
  r.dtype = dtype;
  r.vector = true;
  r.full_rows = std::max(t.full_rows, t.row_offset + rows);
  r.full_cols = 1;
  r.row_offset = t.row_offset;
  r.rows = rows;
  r.cols = 1;
  r.key = StrCat(t.table_name, "/", tensor, "/r", t.row_offset, "_c0");
  s.data = static_cast<const uint8_t*>(data);
  s.row_stride_bytes = static_cast<int64_t>(DTypeSize(dtype));
  return s;
}

// Slots per chunk of keyed-row metadata exported from the storage (KeyedRows: 32 bytes a slot).
constexpr int64_t kChunkSlots = 1 << 16;

// Copies `v` widened to `T` into owned memory.
template <typename T, typename S>
const void* Widen(const S& v, std::deque<std::vector<uint8_t>>* owned) {
  std::vector<uint8_t>& b = owned->emplace_back(v.size() * sizeof(T));
  for (size_t i = 0; i < v.size(); ++i) {
    const T x = static_cast<T>(v[i]);
    std::memcpy(b.data() + i * sizeof(T), &x, sizeof(T));
  }
  return b.data();
}

struct SavedBlock {
  int64_t forwards = 0, rows = 0, slots = 0;
  std::map<std::string, std::pair<size_t, size_t>> vectors;  // tensor -> (file, record)
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> tensors;  // weights and states
  std::vector<int64_t> ids, last_seen, count;
  std::vector<double> score;  // empty: saved without scores (every score 0)
};

// Reads a whole 1-D record of `dtype` into `out`, verifying every chunk.
template <typename T>
Status ReadVector(const ReadableFile& file, const std::string& path, const Record& rec, DType dtype,
                  std::vector<T>* out) {
  if (rec.dtype != dtype || rec.cols != 1 || rec.rows < 0 || DTypeSize(dtype) != sizeof(T))
    return Status::Corrupt(path, ": record ", rec.key, " is not a ", DTypeName(dtype), " vector");
  out->assign(static_cast<size_t>(rec.rows), T{});
  const Target dst{dtype, rec.row_offset, rec.col_offset, rec.rows, 1, out->data(), 1};
  std::vector<uint8_t> buffer;
  return CopyOverlap(file, path, rec, dst, &buffer);
}

// A save writes each id once (a shard holds it in one slot), but an edited or damaged checkpoint
// could repeat one: restored, it would hold two slots, and the shard's index would then lose
// track of it (a later eviction could not find the id to erase). Every saved copy of an id lands
// in the same new row block, so the ids one shard receives are checked together; the error names
// the id and each "ids" record that holds it.
Status CheckDistinctIds(const std::string& table, const std::vector<int64_t>& ids,
                        const std::map<int64_t, SavedBlock>& blocks, const Manifest& m,
                        const std::string& dir) {
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  const auto at = std::adjacent_find(sorted.begin(), sorted.end());
  if (at == sorted.end()) return Status::Ok();
  const int64_t id = *at;
  std::string where;
  for (const auto& [offset, b] : blocks) {
    const auto n = std::count(b.ids.begin(), b.ids.end(), id);
    if (n == 0) continue;
    const auto [f, r] = b.vectors.at(kIds);
    where += StrCat(where.empty() ? "" : " and ", dir, "/", m.files[f].name, ": record ",
                    m.files[f].records[r].key, n > 1 ? StrCat(", ", n, " times") : "");
  }
  return Status::Corrupt("checkpoint: dynamic table ", table, ": id ", id,
                         " appears more than once in its saved \"ids\" (", where,
                         "): a row block holds each id once");
}

}  // namespace

void AppendKeyedSources(embedding::TableStorage& storage, const ShardTensor& t,
                        std::deque<std::vector<uint8_t>>* owned, std::vector<RowSource>* out) {
  const int32_t local = LocalOf(storage.layout(), t.table, t.shard);
  embedding::KeyedRows rows;
  SR_CHECK(storage.ExportKeyedRows(local, 0, 0, &rows));
  const int64_t n = rows.size;
  if (t.kind == embedding::ParamKind::kWeights && t.col_offset == 0) {
    const int64_t meta[3] = {rows.forwards, n, rows.slots};
    std::vector<uint8_t>& b = owned->emplace_back(sizeof(meta));
    std::memcpy(b.data(), meta, sizeof(meta));
    out->push_back(Vector(t, kMeta, DType::kInt64, 3, b.data()));
    if (n > 0) {
      // The metadata of every live row, exported in bounded chunks of slots straight into the
      // owned records (ids, last-seen forwards and counts widened to 64 bits).
      const auto bytes = static_cast<size_t>(n) * 8;
      uint8_t* ids = owned->emplace_back(bytes).data();
      uint8_t* last_seen = owned->emplace_back(bytes).data();
      uint8_t* counts = owned->emplace_back(bytes).data();
      uint8_t* scores = rows.scored ? owned->emplace_back(bytes).data() : nullptr;
      embedding::KeyedRows chunk;
      for (int64_t lo = 0; lo < n; lo += kChunkSlots) {
        storage.ExportKeyedRows(local, lo, kChunkSlots, &chunk);
        const size_t at = static_cast<size_t>(lo) * 8, k = chunk.ids.size();
        std::memcpy(ids + at, chunk.ids.data(), k * 8);
        std::memcpy(last_seen + at, chunk.last_seen.data(), k * 8);
        for (size_t i = 0; i < k; ++i) {
          const int64_t c = chunk.counts[i];
          std::memcpy(counts + at + i * 8, &c, 8);
        }
        if (scores != nullptr) std::memcpy(scores + at, chunk.scores.data(), k * 8);
      }
      out->push_back(Vector(t, kIds, DType::kInt64, n, ids));
      out->push_back(Vector(t, kLastSeen, DType::kInt64, n, last_seen));
      out->push_back(Vector(t, kCount, DType::kInt64, n, counts));
      if (scores != nullptr) out->push_back(Vector(t, kScore, DType::kFloat64, n, scores));
    }
    const std::vector<uint16_t>& sketch = rows.sketch;
    if (!sketch.empty())
      out->push_back(Vector(t, kAdmission, DType::kInt32, static_cast<int64_t>(sketch.size()),
                            Widen<int32_t>(sketch, owned)));
  }
  if (n == 0) return;
  RowSource s;
  Record& r = s.rec;
  r.table = t.table_name;
  r.tensor = t.name;
  r.dtype = t.dtype;
  r.vector = t.kind == embedding::ParamKind::kOptimizerState && t.full_cols == 1 && t.cols == 1;
  r.full_rows = t.full_rows;
  r.full_cols = t.full_cols;
  r.row_offset = t.row_offset;
  r.col_offset = t.col_offset;
  r.rows = n;  // slots [0, n) are the live rows, in slot order like the ids
  r.cols = t.cols;
  r.key = StrCat(t.table_name, "/", t.name, "/r", t.row_offset, "_c", t.col_offset);
  s.data = static_cast<const uint8_t*>(t.data);
  s.row_stride_bytes = t.row_stride * static_cast<int64_t>(DTypeSize(t.dtype));
  // A tiered shard's live slots are read through the storage, a chunk at a time, as a fixed
  // tiered shard's rows are.
  if (t.streamed) s.read = FixedSource(storage, t).read;
  out->push_back(std::move(s));
}

// One local dynamic shard's staged rows.
struct KeyedLoad::Shard {
  int32_t local = 0;
  embedding::KeyedRows rows;  // the ids and their metadata (forwards, ids, ..., sketch)
  // Weights and each optimizer state: packed staged rows and their destination.
  struct Tensor {
    std::vector<uint8_t> rows;
    size_t row_bytes = 0;
    uint8_t* dst = nullptr;
    size_t dst_stride = 0;  // bytes
    bool zero = false;      // a reset optimizer state: zeroed, not read
    // A tiered shard's tensor (docs/disk-tier.md): written through the storage, not to dst.
    bool tiered = false;
    int32_t state = -1;
    DType dtype = DType::kFloat32;
    int64_t cols = 0;
  };
  std::vector<Tensor> tensors;  // weights first, then the states in StateSpec order
};

KeyedLoad::KeyedLoad() = default;
KeyedLoad::~KeyedLoad() = default;

void KeyedLoad::Needed(const Manifest& m, std::vector<std::pair<size_t, size_t>>* out) {
  std::set<std::string> dynamic;
  for (const TableEntry& t : m.tables)
    if (t.dynamic) dynamic.insert(t.name);
  for (size_t f = 0; f < m.files.size(); ++f)
    for (size_t r = 0; r < m.files[f].records.size(); ++r)
      if (dynamic.count(m.files[f].records[r].table)) out->push_back({f, r});
}

Status KeyedLoad::Read(embedding::TableStorage& storage, const Manifest& m,
                       const std::vector<std::unique_ptr<ReadableFile>>& files,
                       const std::string& dir, const std::set<std::string>& reset) {
  const embedding::Layout& layout = storage.layout();
  const sharding::Plan& plan = storage.plan();
  const std::vector<ShardTensor> tensors = storage.ShardTensors();
  auto path = [&](size_t f) { return dir + "/" + m.files[f].name; };
  auto record = [&](std::pair<size_t, size_t> at) -> const Record& {
    return m.files[at.first].records[at.second];
  };
  for (size_t ti = 0; ti < plan.tables.size(); ++ti) {
    const embedding::TableLayout& tl = layout.tables[ti];
    if (!tl.dynamic) continue;
    const std::string& name = plan.tables[ti].name;
    std::vector<int32_t> locals;
    for (size_t i = 0; i < layout.local.size(); ++i)
      if (layout.local[i].table == static_cast<int32_t>(ti))
        locals.push_back(static_cast<int32_t>(i));
    if (locals.empty()) continue;

    // The saved blocks, by first row, with their metadata and ids.
    std::map<int64_t, SavedBlock> blocks;
    for (size_t f = 0; f < m.files.size(); ++f) {
      for (size_t r = 0; r < m.files[f].records.size(); ++r) {
        const Record& rec = m.files[f].records[r];
        if (rec.table != name) continue;
        SavedBlock& b = blocks[rec.row_offset];
        if (rec.tensor == kMeta || rec.tensor == kIds || rec.tensor == kLastSeen ||
            rec.tensor == kCount || rec.tensor == kAdmission || rec.tensor == kScore) {
          if (!b.vectors.emplace(rec.tensor, std::make_pair(f, r)).second)
            return Status::Corrupt("checkpoint: dynamic table ", name, " has two ", rec.tensor,
                                   " records for the row block at row ", rec.row_offset);
        } else {
          b.tensors[rec.tensor].push_back({f, r});
        }
      }
    }
    // The saved table's capacity: its blocks' slots lie inside it.
    int64_t saved_capacity = -1;
    for (const TableEntry& te : m.tables)
      if (te.name == name) saved_capacity = te.rows;
    int64_t forwards = -1;
    for (auto& [offset, b] : blocks) {
      auto meta = b.vectors.find(kMeta);
      if (meta == b.vectors.end())
        return Status::Corrupt("checkpoint: dynamic table ", name, ": the row block at row ",
                               offset, " has records but no ", kMeta);
      std::vector<int64_t> v;
      SR_RETURN_IF_ERROR(ReadVector(*files[meta->second.first], path(meta->second.first),
                                    record(meta->second), DType::kInt64, &v));
      // The forward counter counts training forwards: 2^62 of them is far beyond any run, and
      // one near INT64_MAX would overflow in training.
      if (v.size() != 3 || v[1] < 0 || v[1] > v[2] || v[0] < 0 || v[0] > (int64_t{1} << 62))
        return Status::Corrupt("checkpoint: dynamic table ", name, ": the ", kMeta,
                               " record of the row block at row ", offset, " is inconsistent");
      if (forwards >= 0 && v[0] != forwards)
        return Status::Corrupt("checkpoint: dynamic table ", name, ": the row blocks' forward ",
                               "counters differ (", forwards, " before the row block at row ",
                               offset, ", ", v[0], " there): one of their ", kMeta,
                               " records is corrupt");
      // The slots decide whether a block's admission counts are kept (they must be the same
      // block's), so a count of slots the saved table never had is no block of it.
      if (offset < 0 || saved_capacity < 0 || v[2] > saved_capacity - offset)
        return Status::Corrupt(path(meta->second.first), ": record ", record(meta->second).key,
                               ": the row block at row ", offset, " has ", v[2],
                               " slots, beyond the table's capacity of ", saved_capacity,
                               " rows in the manifest");
      forwards = v[0];
      b.forwards = v[0];
      b.rows = v[1];
      b.slots = v[2];
      // Every per-row record and every weights or state record of the block holds its live rows
      // (a save writes none of them for a block without rows). One of other rows is refused,
      // whatever the block's rows: a dynamic_meta edited to 0 rows would otherwise drop rows
      // its records still hold, unread and unchecked.
      // (Copies: a lambda may not capture a structured binding before C++20's clang 16.)
      const int64_t block_rows = b.rows, block_offset = offset;
      auto rows_of = [&](std::pair<size_t, size_t> at) -> Status {
        if (record(at).rows == block_rows) return Status::Ok();
        return Status::Corrupt(
            path(at.first), ": record ", record(at).key, " has ", record(at).rows, " rows; the ",
            kMeta, " record of its row block at row ", block_offset, " says ", block_rows);
      };
      for (const char* tensor : {kIds, kLastSeen, kCount, kScore})
        if (auto it = b.vectors.find(tensor); it != b.vectors.end())
          SR_RETURN_IF_ERROR(rows_of(it->second));
      for (const auto& [tensor, ats] : b.tensors)
        for (const auto& at : ats) SR_RETURN_IF_ERROR(rows_of(at));
      if (b.rows == 0) continue;
      for (auto [tensor, out] : {std::pair{kIds, &b.ids}, std::pair{kLastSeen, &b.last_seen},
                                 std::pair{kCount, &b.count}}) {
        auto it = b.vectors.find(tensor);
        if (it == b.vectors.end())
          return Status::Corrupt("checkpoint: dynamic table ", name, ": the row block at row ",
                                 offset, " lacks a ", tensor, " record of ", b.rows, " rows");
        SR_RETURN_IF_ERROR(ReadVector(*files[it->second.first], path(it->second.first),
                                      record(it->second), DType::kInt64, out));
      }
      // A row's last-seen forward is one the table had counted by the save: from 0 (a fresh
      // table's counter) to the block's forward counter. A save writes no other (the shard keeps
      // them in that range); the shard would clamp one outside it into a window of 2^32 forwards
      // and order evictions by a value the file never said.
      for (size_t i = 0; i < b.last_seen.size(); ++i) {
        if (b.last_seen[i] >= 0 && b.last_seen[i] <= b.forwards) continue;
        const auto at = b.vectors.at(kLastSeen);
        return Status::Corrupt(path(at.first), ": record ", record(at).key, ": row ", i,
                               " was last seen at forward ", b.last_seen[i], ", outside 0..",
                               b.forwards, " (the forward counter of its ", kMeta, " record)");
      }
      for (size_t i = 0; i < b.count.size(); ++i) {
        if (b.count[i] >= 0 && b.count[i] <= UINT32_MAX) continue;
        const auto at = b.vectors.at(kCount);
        return Status::Corrupt(path(at.first), ": record ", record(at).key, ": row ", i,
                               " has count ", b.count[i], ", outside 0..", UINT32_MAX);
      }
      // Scores are optional: a table saved under another policy loads with every score 0. A
      // saved score is one set_scores took, so finite: the shard would order its victims by a
      // NaN's bits (above or below every score, by its sign) the file never meant.
      if (auto it = b.vectors.find(kScore); it != b.vectors.end()) {
        SR_RETURN_IF_ERROR(ReadVector(*files[it->second.first], path(it->second.first),
                                      record(it->second), DType::kFloat64, &b.score));
        for (size_t i = 0; i < b.score.size(); ++i) {
          if (std::isfinite(b.score[i])) continue;
          return Status::Corrupt(path(it->second.first), ": record ", record(it->second).key,
                                 ": row ", i, " has score ", b.score[i],
                                 "; scores are finite (set_scores refuses others)");
        }
      }
    }
    if (forwards < 0)
      return Status::Corrupt("checkpoint: dynamic table ", name, " has no row blocks");
    // A data-parallel table's copy is one block of every row (its layout keeps no blocks).
    const std::vector<embedding::RowBlock> whole{{0, plan.tables[ti].rows, {}}};
    const std::vector<embedding::RowBlock>& dest = tl.data_parallel ? whole : tl.blocks;
    // The admission counts are kept only when the blocks are the same (same first rows and
    // slots), so each block's counts are those of the same ids.
    bool same_blocks = blocks.size() == dest.size();
    for (size_t k = 0; k < dest.size() && same_blocks; ++k) {
      auto it = blocks.find(dest[k].row_offset);
      same_blocks = it != blocks.end() && it->second.slots == dest[k].rows;
    }

    const int32_t num_blocks = static_cast<int32_t>(dest.size());
    for (int32_t li : locals) {
      const embedding::LocalShard& ls = layout.local[li];
      int32_t k = 0;
      while (k < num_blocks && dest[k].row_offset != ls.row_offset) ++k;
      SR_CHECK(k < num_blocks);
      Shard sh;
      sh.local = li;
      sh.rows.forwards = forwards;
      // The destinations: weights, then each state.
      const auto& specs = tl.state_specs;
      sh.tensors.resize(1 + specs.size());
      for (const ShardTensor& t : tensors) {
        if (t.table != static_cast<int32_t>(ti) || t.shard != ls.shard) continue;
        size_t slot = 0;
        if (t.kind != embedding::ParamKind::kWeights) {
          while (slot < specs.size() && specs[slot].name != t.name) ++slot;
          SR_CHECK(slot < specs.size());
          ++slot;
        }
        Shard::Tensor& d = sh.tensors[slot];
        d.row_bytes = static_cast<size_t>(t.cols) * DTypeSize(t.dtype);
        d.dst = static_cast<uint8_t*>(t.data);
        d.dst_stride = static_cast<size_t>(t.row_stride) * DTypeSize(t.dtype);
        d.zero = slot > 0 && reset.count(name) > 0;
        d.tiered = t.streamed;
        d.state = t.state;
        d.dtype = t.dtype;
        d.cols = t.cols;
        tiered_ = tiered_ || t.streamed;
      }
      std::vector<uint8_t> buf, chunk;
      std::vector<int64_t> pick;
      for (auto& [offset, b] : blocks) {
        pick.clear();
        for (int64_t i = 0; i < b.rows; ++i)
          if (embedding::dynamic::BlockOfId(b.ids[i], num_blocks) == k) pick.push_back(i);
        if (pick.empty()) continue;
        for (int64_t i : pick) {
          sh.rows.ids.push_back(b.ids[i]);
          sh.rows.last_seen.push_back(b.last_seen[i]);
          sh.rows.counts.push_back(static_cast<uint32_t>(b.count[i]));
          sh.rows.scores.push_back(b.score.empty() ? 0.0 : b.score[i]);
        }
        for (size_t slot = 0; slot < sh.tensors.size(); ++slot) {
          Shard::Tensor& d = sh.tensors[slot];
          if (d.zero) {
            d.rows.resize(d.rows.size() + pick.size() * d.row_bytes, 0);
            continue;
          }
          const bool weights = slot == 0;
          const bool row_wise = !weights && specs[slot - 1].row_wise;
          const std::string tensor = weights ? "weights" : specs[slot - 1].name;
          const DType dtype = weights ? ls.dtype : DType::kFloat32;
          const int64_t cols = row_wise ? 1 : ls.cols;
          buf.assign(static_cast<size_t>(b.rows) * d.row_bytes, 0);
          const Target dst{dtype,      offset, row_wise ? 0 : ls.col_offset, b.rows, cols,
                           buf.data(), cols};
          int64_t covered = 0;
          for (const auto& at : b.tensors[tensor]) {
            const Record& rec = record(at);  // of b.rows rows (checked above)
            const int64_t area = OverlapArea(rec, dst);
            if (area == 0) continue;
            covered += area;
            SR_RETURN_IF_ERROR(CopyOverlap(*files[at.first], path(at.first), rec, dst, &chunk));
          }
          if (covered != b.rows * cols)
            return Status::Corrupt("checkpoint: dynamic table ", name, ": the ", tensor,
                                   " records of the row block at row ", offset,
                                   " do not cover columns ", dst.col_offset, "..",
                                   dst.col_offset + cols - 1);
          for (int64_t i : pick)
            d.rows.insert(d.rows.end(), buf.begin() + i * static_cast<int64_t>(d.row_bytes),
                          buf.begin() + (i + 1) * static_cast<int64_t>(d.row_bytes));
        }
      }
      SR_RETURN_IF_ERROR(CheckDistinctIds(name, sh.rows.ids, blocks, m, dir));
      // The plan's rows of the shard (a tiered shard's layout rows are its cache's).
      const int64_t slots = plan.table_plans[ti].shards[static_cast<size_t>(ls.shard)].rows;
      if (static_cast<int64_t>(sh.rows.ids.size()) > slots)
        return Status::InvalidArgument(
            "checkpoint: dynamic table ", name, " has ", sh.rows.ids.size(),
            " saved rows whose ids belong to its row block at row ", ls.row_offset, ", which has ",
            slots, " slots in this plan (raise the table's capacity)");
      if (same_blocks && plan.tables[ti].dynamic.admission_threshold > 1) {
        auto it = blocks[ls.row_offset].vectors.find(kAdmission);
        if (it != blocks[ls.row_offset].vectors.end()) {
          std::vector<int32_t> v;
          SR_RETURN_IF_ERROR(ReadVector(*files[it->second.first], path(it->second.first),
                                        record(it->second), DType::kInt32, &v));
          for (int32_t x : v) {
            if (x < 0 || x > UINT16_MAX)
              return Status::Corrupt("checkpoint: dynamic table ", name,
                                     ": an admission count is out of range");
            sh.rows.sketch.push_back(static_cast<uint16_t>(x));
          }
        }
      }
      shards_.push_back(std::move(sh));
    }
  }
  return Status::Ok();
}

Status KeyedLoad::Commit(embedding::TableStorage& storage) {
  std::vector<float> floats;
  for (const Shard& sh : shards_) {
    storage.ImportKeyedRows(sh.local, sh.rows, embedding::KeyedImport::kReplace);
    const auto n = static_cast<int64_t>(sh.rows.ids.size());
    for (const Shard::Tensor& d : sh.tensors) {
      if (!d.tiered) {
        for (int64_t i = 0; i < n; ++i)
          std::memcpy(d.dst + i * d.dst_stride, d.rows.data() + i * d.row_bytes, d.row_bytes);
        continue;
      }
      // Slots [0, n) through the tier in chunks, as fp32 (16-bit weights widen and round back
      // exactly).
      const size_t es = DTypeSize(d.dtype);
      constexpr int64_t kChunk = 4096;
      for (int64_t lo = 0; lo < n; lo += kChunk) {
        const int64_t hi = std::min(n, lo + kChunk);
        floats.resize(static_cast<size_t>((hi - lo) * d.cols));
        const uint8_t* src = d.rows.data() + static_cast<size_t>(lo) * d.row_bytes;
        for (size_t k = 0; k < floats.size(); ++k) floats[k] = LoadElement(d.dtype, src + k * es);
        SR_RETURN_IF_ERROR(storage.WriteTieredRows(sh.local, d.state, lo, hi - lo, floats.data()));
      }
    }
  }
  shards_.clear();
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
