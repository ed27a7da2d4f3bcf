// A model version from a training checkpoint: the plan gives the features and tables, the
// manifest gives each weights block's place; every block is read through the checkpoint's own
// verified record copy, whatever plan, world size or mesh wrote it; a dynamic table's row blocks
// are gathered by id.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/fs.h"
#include "impl/checkpoint/record_copy.h"
#include "impl/core/check.h"
#include "impl/serving/checkpoint_blocks.h"
#include "impl/serving/encode.h"
#include "impl/serving/open.h"
#include "impl/serving/serving_file.h"
#include "impl/serving/tiered_open.h"
#include "impl/sharding/plan_json.h"

namespace shardrec::serving {
namespace {

using checkpoint::FileSystem;
using checkpoint::ReadableFile;
using checkpoint::Record;
using checkpoint::Target;

Status ReadManifest(FileSystem& fs, const std::string& dir, checkpoint::Manifest* m) {
  const std::string path = dir + "/" + checkpoint::kManifestName;
  std::unique_ptr<ReadableFile> f;
  Status s = fs.OpenReadable(path, &f);
  if (s.code() == Code::kNotFound)
    return Status::NotFound("no checkpoint in ", dir, ": ", checkpoint::kManifestName,
                            " does not exist");
  SR_RETURN_IF_ERROR(s);
  std::string text(f->size(), '\0');
  SR_RETURN_IF_ERROR(f->ReadAt(0, text.data(), text.size()));
  return checkpoint::ManifestFromJson(text, path, m);
}

// Copies every record of (table, tensor) into `dst`, which spans the whole tensor, and checks
// that the records cover it exactly once.
Status Assemble(CheckpointFiles& files, const checkpoint::Manifest& m, const std::string& table,
                const std::string& tensor, const Target& dst, const std::string& what) {
  std::vector<uint8_t> buffer;
  int64_t area = 0;
  for (size_t fi = 0; fi < m.files.size(); ++fi) {
    for (const Record& rec : m.files[fi].records) {
      if (rec.table != table || rec.tensor != tensor) continue;
      if (rec.full_rows != dst.rows || rec.full_cols != dst.cols)
        return Status::Corrupt("checkpoint file ", files.Path(fi), ": record ", rec.key,
                               " belongs to a ", rec.full_rows, " x ", rec.full_cols, " ", what,
                               ", the plan says ", dst.rows, " x ", dst.cols);
      const ReadableFile* f = nullptr;
      SR_RETURN_IF_ERROR(files.Get(fi, &f));
      area += checkpoint::OverlapArea(rec, dst);
      SR_RETURN_IF_ERROR(checkpoint::CopyOverlap(*f, files.Path(fi), rec, dst, &buffer));
    }
  }
  if (area != dst.rows * dst.cols)
    return Status::Corrupt("checkpoint ", m.files.empty() ? "" : files.Path(0), ": the records of ",
                           what, " cover ", area, " of its ", dst.rows * dst.cols, " elements");
  return Status::Ok();
}

Storage Resolve(const OpenOptions& o, const std::string& table, DType trained) {
  auto it = o.table_storage.find(table);
  Storage s = it != o.table_storage.end() ? it->second : o.default_storage;
  if (s != Storage::kAsTrained) return s;
  return StorageOf(FloatFormatOf(trained));
}

Status ReadTable(CheckpointFiles& files, const checkpoint::Manifest& m,
                 const sharding::TableConfig& tc, const OpenOptions& o, Model* model) {
  Table t;
  t.name = tc.name;
  t.rows = tc.rows;
  t.dim = tc.dim;
  t.pooling = static_cast<Pooling>(tc.pooling);
  t.features = tc.features;
  t.storage = Resolve(o, tc.name, tc.dtype);
  t.row_bytes = RowBytes(t.storage, t.dim);
  const uint64_t bytes = static_cast<uint64_t>(t.rows) * t.row_bytes;
  std::shared_ptr<uint8_t> buf = AlignedBuffer(bytes);
  if (!buf) return Status::OutOfMemory("table ", t.name, ": ", bytes, " bytes");
  const std::string what = "table " + t.name + " weights";
  Target dst;
  dst.rows = t.rows;
  dst.cols = t.dim;
  dst.row_stride = t.dim;
  if (IsEncodedStorage(t.storage)) {
    std::vector<float> staging;
    try {
      staging.resize(static_cast<size_t>(t.rows) * t.dim);
    } catch (const std::bad_alloc&) {
      return Status::OutOfMemory("table ", t.name, ": fp32 staging of ", t.rows, " x ", t.dim);
    }
    dst.dtype = DType::kFloat32;
    dst.data = staging.data();
    SR_RETURN_IF_ERROR(Assemble(files, m, t.name, "weights", dst, what));
    SR_RETURN_IF_ERROR(
        EncodeRows(staging.data(), t.rows, t.dim, t.storage, buf.get(), "table " + t.name));
  } else {
    // fp32/fp16/bf16 land in place: the record copy converts (nearest even) as it reads.
    dst.dtype = t.storage == Storage::kFp16   ? DType::kFloat16
                : t.storage == Storage::kBf16 ? DType::kBFloat16
                                              : DType::kFloat32;
    dst.data = buf.get();
    SR_RETURN_IF_ERROR(Assemble(files, m, t.name, "weights", dst, what));
  }
  t.data = buf.get();
  t.own = std::move(buf);
  model->tables.push_back(std::move(t));
  return Status::Ok();
}

// A dynamic table: every saved block's live rows (ids and fp32 weights) gathered, sorted by id
// and converted to the serving storage, with the zero row after them and the id index built.
// Memory beyond the result: the fp32 rows and ids once while they are sorted and encoded.
Status ReadDynamicTable(CheckpointFiles& files, const checkpoint::Manifest& m,
                        const sharding::TableConfig& tc, const OpenOptions& o, Model* model) {
  Table t;
  t.name = tc.name;
  t.dim = tc.dim;
  t.pooling = static_cast<Pooling>(tc.pooling);
  t.features = tc.features;
  t.storage = Resolve(o, tc.name, tc.dtype);
  t.row_bytes = RowBytes(t.storage, t.dim);
  std::map<int64_t, DynamicBlock> blocks;
  SR_RETURN_IF_ERROR(GroupDynamicBlocks(files, m, t.name, &blocks));
  std::vector<int64_t> ids;
  std::vector<float> rows;
  std::vector<uint8_t> buffer;
  for (const auto& [offset, b] : blocks) {
    const size_t first = ids.size();
    SR_RETURN_IF_ERROR(ReadBlockIds(files, t.name, offset, b, t.dim, &ids, &buffer));
    if (ids.size() == first) continue;
    const int64_t n = static_cast<int64_t>(ids.size() - first);
    try {
      rows.resize(ids.size() * static_cast<size_t>(t.dim));
    } catch (const std::bad_alloc&) {
      return Status::OutOfMemory("table ", t.name, ": fp32 staging of ", ids.size(), " rows");
    }
    const Target row_dst{DType::kFloat32, offset, 0, n, t.dim, rows.data() + first * t.dim, t.dim};
    for (const auto& [wfi, wr] : b.weights) {
      const ReadableFile* f = nullptr;
      SR_RETURN_IF_ERROR(files.Get(wfi, &f));
      SR_RETURN_IF_ERROR(checkpoint::CopyOverlap(*f, files.Path(wfi), *wr, row_dst, &buffer));
    }
  }
  // Rows in ascending id order, so a version's ids are a sorted array (serving files, deltas).
  std::vector<size_t> order;
  auto d = std::make_shared<DynamicIds>();
  SR_RETURN_IF_ERROR(SortDynamicIds(t.name, ids, &order, &d->ids));
  t.rows = static_cast<int64_t>(d->ids.size());
  const uint64_t bytes = (static_cast<uint64_t>(t.rows) + 1) * t.row_bytes;
  std::shared_ptr<uint8_t> buf = AlignedBuffer(bytes);  // zeroed: the zero row stays so
  if (!buf) return Status::OutOfMemory("table ", t.name, ": ", bytes, " bytes");
  // Encoded straight from the gathered rows into id order (no sorted fp32 copy).
  const size_t dim = static_cast<size_t>(t.dim);
  for (size_t i = 0; i < order.size(); ++i)
    SR_RETURN_IF_ERROR(EncodeRows(rows.data() + order[i] * dim, 1, t.dim, t.storage,
                                  buf.get() + i * t.row_bytes,
                                  "table " + t.name + " id " + std::to_string(d->ids[i])));
  SR_RETURN_IF_ERROR(IdIndex::Build(d->ids.data(), t.rows, t.name, &d->index));
  t.data = buf.get();
  t.own = std::move(buf);
  t.dynamic = std::move(d);
  model->tables.push_back(std::move(t));
  return Status::Ok();
}

Status ReadDense(CheckpointFiles& files, const checkpoint::Manifest& m, Model* model) {
  std::map<std::string, int64_t> counts;
  for (const checkpoint::FileEntry& e : m.files)
    for (const Record& rec : e.records)
      if (rec.table.empty()) counts[rec.tensor] = rec.full_rows;
  for (const auto& [name, count] : counts) {
    std::shared_ptr<uint8_t> buf = AlignedBuffer(static_cast<size_t>(count) * sizeof(float));
    if (!buf && count > 0) return Status::OutOfMemory("dense tensor ", name);
    Target dst;
    dst.rows = count;
    dst.cols = 1;
    dst.row_stride = 1;
    dst.data = buf.get();
    SR_RETURN_IF_ERROR(Assemble(files, m, "", name, dst, "dense tensor " + name));
    model->dense[name] =
        Dense{reinterpret_cast<const float*>(buf.get()), static_cast<size_t>(count)};
    if (buf) model->backing.push_back(std::move(buf));
  }
  return Status::Ok();
}

}  // namespace

Status OpenCheckpoint(const std::string& dir, const OpenOptions& o, std::shared_ptr<Model>* out) {
  static const std::shared_ptr<FileSystem> fs = checkpoint::PosixFileSystem();
  checkpoint::Manifest m;
  SR_RETURN_IF_ERROR(ReadManifest(*fs, dir, &m));
  sharding::Plan plan;
  Status s = sharding::PlanFromJson(m.plan_json, &plan);
  if (!s.ok())
    return Status::Corrupt(dir, "/", checkpoint::kManifestName, ": its plan: ", s.message());
  for (const auto& [name, storage] : o.table_storage) {
    if (plan.TableIndex(name) < 0)
      return Status::InvalidArgument("table_storage names table ", name, ", which the checkpoint ",
                                     dir, " does not have");
  }
  for (const auto& [name, bytes] : o.tiers) {
    if (plan.TableIndex(name) < 0)
      return Status::InvalidArgument("tiers names table ", name, ", which the checkpoint ", dir,
                                     " does not have");
  }
  auto model = std::make_shared<Model>();
  model->bounds = o.bounds;
  for (const sharding::FeatureConfig& f : plan.features) model->features.push_back(f.name);
  CheckpointFiles files(*fs, dir, m);
  for (const sharding::TableConfig& tc : plan.tables) {
    auto tier = o.tiers.find(tc.name);
    if (tier != o.tiers.end()) {
      SR_RETURN_IF_ERROR(OpenTieredTable(*fs, dir, m, tc, Resolve(o, tc.name, tc.dtype),
                                         tier->second, model.get()));
      continue;
    }
    SR_RETURN_IF_ERROR(tc.dynamic.enabled ? ReadDynamicTable(files, m, tc, o, model.get())
                                          : ReadTable(files, m, tc, o, model.get()));
  }
  SR_RETURN_IF_ERROR(ReadDense(files, m, model.get()));
  SR_RETURN_IF_ERROR(model->Finish());
  *out = std::move(model);
  return Status::Ok();
}

Status OpenSource(const std::string& path, const OpenOptions& o, std::shared_ptr<Model>* out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return Status::NotFound("cannot open ", path, " for serving: it does not exist");
  if (S_ISDIR(st.st_mode)) return OpenCheckpoint(path, o, out);
  if (!o.tiers.empty())
    return Status::Unsupported("tiers: ", path,
                               " is a serving file, which is mapped (the page cache keeps its hot "
                               "rows); tiers serve the tables of a checkpoint directory");
  return OpenServingFile(path, o.bounds, out);
}

}  // namespace shardrec::serving
