// Checkpoint save: each rank streams its records into its own safetensors file (temp file,
// fsync, rename, directory fsync), the ranks agree, and world rank 0 publishes the manifest
// last, so an interrupted save never replaces the previous checkpoint. A GPU collection's
// shard tensors are staged to the host chunk by chunk on their way to the file, so its files
// hold the same bytes as a host collection's.
#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "impl/checkpoint/checkpoint.h"
#include "impl/checkpoint/copy.h"
#include "impl/checkpoint/fixed_rows.h"
#include "impl/checkpoint/format.h"
#include "impl/checkpoint/keyed_rows.h"
#include "impl/checkpoint/snapshot_file.h"
#include "impl/comm/gather_bytes.h"
#include "impl/core/check.h"
#include "impl/core/config.h"
#include "impl/core/rng.h"
#include "impl/embedding/device_copy.h"
#include "impl/optim/optimizer.h"
#include "impl/sharding/plan_json.h"

namespace shardrec::checkpoint {
namespace {

using embedding::ShardTensor;

using Source = RowSource;

// A tensor of a tiered shard whose store a save snapshots, with the record it would be copied as.
struct TieredTensor {
  ShardTensor tensor;
  Source source;
};
using TieredShards = std::map<int32_t, std::vector<TieredTensor>>;

std::string OptimizerJson(const optim::OptimizerConfig& o) {
  nlohmann::json j;
  j["type"] = static_cast<int32_t>(o.type);
  j["name"] = optim::OptimizerName(o.type);
  j["learning_rate"] = o.learning_rate;
  j["eps"] = o.eps;
  j["beta1"] = o.beta1;
  j["beta2"] = o.beta2;
  j["weight_decay"] = o.weight_decay;
  j["weight_decay_mode"] = static_cast<int32_t>(o.weight_decay_mode);
  j["stochastic_rounding"] = o.stochastic_rounding;
  return j.dump();
}

// The generation of the checkpoint now in `dir`, or 0 when there is none readable.
int64_t CurrentGeneration(FileSystem& fs, const std::string& dir, Manifest* previous) {
  std::unique_ptr<ReadableFile> f;
  if (!fs.OpenReadable(dir + "/" + kManifestName, &f).ok()) return 0;
  std::string text(f->size(), '\0');
  if (!f->ReadAt(0, text.data(), text.size()).ok()) return 0;
  if (!ManifestFromJson(text, kManifestName, previous).ok()) return 0;
  return previous->generation;
}

// A record's size and chunking, from its shape.
void Size(Record* r) {
  r->nbytes = static_cast<uint64_t>(r->rows) * r->row_bytes();
  r->chunk_rows = ChunkRows(r->row_bytes());
}

// Which of this rank's shard tensors it writes: not the duplicates (row-wise state of a second
// column shard), data-parallel tables only on world rank 0, and in 2D one replica per tensor.
// Every replica of a sharding rank holds the same tensors in the same order, so each hands
// them out alike: in order, to the replica with the fewest bytes so far (lowest index on a tie),
// which gives every replica a similar share whatever the plan put on the rank.
// A fixed table's shard tensor is one record (fixed_rows.h); a dynamic table's shard writes its
// live rows keyed by id (keyed_rows.h), its metadata that is not a row of the shard in `owned`.
// With `snapshots`, the tensors of a tiered shard go to `tiered` by local shard instead (its
// store is snapshotted: TakeSnapshots); a dynamic table's metadata stays in the rank file.
std::vector<Source> Select(embedding::TableStorage& storage, const Group& g,
                           const std::vector<DenseTensor>& dense,
                           std::deque<std::vector<uint8_t>>* owned, bool snapshots,
                           TieredShards* tiered) {
  std::vector<Source> out;
  const int world_rank = g.comm->Rank();
  std::vector<int64_t> replica_bytes(static_cast<size_t>(g.replicas), 0);
  for (const ShardTensor& t : storage.ShardTensors()) {
    if (t.duplicate || t.rows == 0 || t.cols == 0) continue;
    if (storage.layout().tables[t.table].dynamic) {
      // A data-parallel table's copies are the same (dp_agree.h): world rank 0 writes one.
      if (t.data_parallel && world_rank != 0) continue;
      // In 2D every replica holds the same rows (Save checks it): one writes each shard tensor,
      // handed out like a fixed table's by its bytes at capacity.
      if (g.replicas > 1 && !t.data_parallel) {
        const auto least = std::min_element(replica_bytes.begin(), replica_bytes.end());
        *least += t.rows * t.cols * static_cast<int64_t>(DTypeSize(t.dtype));
        if (least - replica_bytes.begin() != g.replica_rank) continue;
      }
      // FP8 weights are handed out `streamed` too (fp32 rows), but have no store.
      if (!snapshots || !t.streamed ||
          IsFp8DType(storage.plan().tables[static_cast<size_t>(t.table)].dtype)) {
        AppendKeyedSources(storage, t, owned, &out);
        continue;
      }
      // The shard's live rows (the one source read through the storage) are its store's first
      // rows, by slot as the "ids" record lists them.
      std::vector<Source> keyed;
      AppendKeyedSources(storage, t, owned, &keyed);
      for (Source& k : keyed) {
        if (!k.read) {
          out.push_back(std::move(k));
          continue;
        }
        Size(&k.rec);
        (*tiered)[t.local].push_back({t, std::move(k)});
      }
      continue;
    }
    if (t.data_parallel) {
      if (world_rank != 0) continue;
    } else {
      const auto least = std::min_element(replica_bytes.begin(), replica_bytes.end());
      *least += t.rows * t.cols * static_cast<int64_t>(DTypeSize(t.dtype));
      if (least - replica_bytes.begin() != g.replica_rank) continue;
    }
    // FP8 weights are handed out `streamed` too (fp32 rows), but have no store.
    if (snapshots && t.streamed && !t.data_parallel &&
        !IsFp8DType(storage.plan().tables[static_cast<size_t>(t.table)].dtype)) {
      Source src = FixedSource(storage, t);
      Size(&src.rec);
      (*tiered)[t.local].push_back({t, std::move(src)});
      continue;
    }
    out.push_back(FixedSource(storage, t));
  }
  if (world_rank == 0) {
    for (const DenseTensor& d : dense) {
      Source s;
      Record& r = s.rec;
      r.tensor = d.name;
      r.key = "dense/" + d.name;
      r.vector = true;
      r.full_rows = r.rows = static_cast<int64_t>(d.count);
      r.full_cols = r.cols = 1;
      s.data = reinterpret_cast<const uint8_t*>(d.data);
      s.row_stride_bytes = 4;
      out.push_back(std::move(s));
    }
  }
  for (Source& s : out) Size(&s.rec);
  return out;
}

// Where tensor `t`'s row starts in a record of its tiered shard's store (tiered/record.h): the
// weights in the table's dtype, then each optimizer state in order (one float per row-wise state,
// else the shard's columns).
int64_t StoreOffset(const embedding::Layout& layout, const ShardTensor& t) {
  const embedding::LocalShard& ls = layout.local[static_cast<size_t>(t.local)];
  if (t.state < 0) return 0;
  int64_t at = static_cast<int64_t>(ls.cols) * static_cast<int64_t>(DTypeSize(ls.dtype));
  const auto& specs = layout.tables[static_cast<size_t>(ls.table)].state_specs;
  for (int32_t k = 0; k < t.state; ++k) at += (specs[k].row_wise ? 1 : ls.cols) * 4;
  return at;
}

// Snapshots the store of every tiered shard in `tiered` into `dir` (the store's hard-linked
// segments: no row is copied) and describes each as a file entry (version 4; 5 for a dynamic
// table's). A shard the storage cannot snapshot (kUnsupported) is copied instead: its tensors
// are added to `sources`. `made` gets each snapshot directory made (removed again by the caller
// if the save fails). Between chunks of the rows a snapshot writes into its store it asks `comm`
// whether it was aborted, as the rank file's write does.
Status TakeSnapshots(embedding::TableStorage& storage, FileSystem& fs, const std::string& dir,
                     int64_t generation, const comm::Communicator& comm, const TieredShards& tiered,
                     std::vector<Source>* sources, std::vector<FileEntry>* entries,
                     std::vector<std::string>* made) {
  const std::function<Status()> usable = [&comm] { return comm::UsableNow(comm); };
  for (const auto& [local, tensors] : tiered) {
    const std::string name =
        StrCat("g", generation, "-rank", comm.Rank(), "-shard", local, ".store");
    const std::string path = dir + "/" + name;
    // Left by a save of this generation that crashed: never published, so garbage.
    SR_RETURN_IF_ERROR(fs.RemoveTree(path));
    const Status s = storage.SnapshotTieredShard(local, path, usable);
    if (s.code() == Code::kUnsupported) {
      for (const TieredTensor& t : tensors) sources->push_back(t.source);
      continue;
    }
    SR_RETURN_IF_ERROR(s);
    made->push_back(path);
    FileEntry e;
    e.name = name;
    e.is_store = true;
    SR_RETURN_IF_ERROR(DescribeStoreSnapshot(fs, path, &e.size, &e.store));
    uint64_t at = 0;  // the records' places in the entry's virtual file
    for (const TieredTensor& t : tensors) {
      Record r = t.source.rec;
      r.offset = at;
      r.store_offset = StoreOffset(storage.layout(), t.tensor);
      if (r.row_bytes() + static_cast<uint64_t>(r.store_offset) > e.store.value_bytes)
        return Status::Internal("tiered shard ", local, " tensor ", t.tensor.name, ": ",
                                r.row_bytes(), " bytes at ", r.store_offset, " overrun its ",
                                e.store.value_bytes, "-byte store records");
      at += r.nbytes;
      e.records.push_back(std::move(r));
    }
    entries->push_back(std::move(e));
  }
  return Status::Ok();
}

// Writes the header and every source's rows to `f`, recording a checksum per chunk in `recs`.
// Between chunks it asks `comm` whether it was aborted (or failed on another thread): a shard of
// gigabytes takes seconds to write, and an abort must end the call within about a second.
Status WriteRecords(WritableFile& f, const std::string& header, std::vector<Source>* sources,
                    std::vector<Record>* recs_out, const comm::Communicator& comm) {
  std::vector<Record>& recs = *recs_out;
  SR_RETURN_IF_ERROR(f.Append(header.data(), header.size()));
  std::vector<uint8_t> staging;
  embedding::HostStaging device_staging;  // chunks of device tensors, pinned when it can be
  for (size_t i = 0; i < sources->size(); ++i) {
    Source& s = (*sources)[i];
    Record& r = recs[i];
    const uint64_t rb = r.row_bytes();
    for (int64_t lo = 0; lo < r.rows; lo += r.chunk_rows) {
      SR_RETURN_IF_ERROR(comm::UsableNow(comm));
      const int64_t hi = std::min(r.rows, lo + r.chunk_rows);
      const size_t n = static_cast<size_t>(hi - lo) * rb;
      const uint8_t* p = s.read ? nullptr : s.data + lo * s.row_stride_bytes;
      if (s.read) {  // a tiered shard: its rows through the reader, a chunk at a time
        staging.resize(n);
        SR_RETURN_IF_ERROR(s.read(lo, hi, staging.data()).WithContext(StrCat("saving ", r.key)));
        p = staging.data();
      } else if (!s.device.is_host()) {  // device rows: stage them (packed) on the host
        SR_RETURN_IF_ERROR(device_staging.Reserve(s.device, n));
        if (static_cast<uint64_t>(s.row_stride_bytes) == rb) {
          SR_RETURN_IF_ERROR(embedding::CopyToHost(s.device, device_staging.data(), p, n)
                                 .WithContext(StrCat("saving ", r.key)));
        } else {
          for (int64_t k = lo; k < hi; ++k)
            SR_RETURN_IF_ERROR(embedding::CopyToHost(s.device,
                                                     device_staging.data() + (k - lo) * rb,
                                                     s.data + k * s.row_stride_bytes, rb)
                                   .WithContext(StrCat("saving ", r.key)));
        }
        p = device_staging.data();
      } else if (static_cast<uint64_t>(s.row_stride_bytes) != rb) {  // strided rows: pack them
        staging.resize(n);
        for (int64_t k = lo; k < hi; ++k)
          std::memcpy(staging.data() + (k - lo) * rb, s.data + k * s.row_stride_bytes, rb);
        p = staging.data();
      }
      r.checksums.push_back(Checksum(p, n));
      SR_RETURN_IF_ERROR(f.Append(p, n));
    }
  }
  return Status::Ok();
}

// Streams the records into `dir`/`name` atomically, recording a checksum per chunk.
Status WriteRankFile(FileSystem& fs, const std::string& dir, const std::string& name,
                     std::vector<Source>* sources, int64_t generation, FileEntry* entry,
                     const comm::Communicator& comm) {
  std::vector<Record> recs;
  for (const Source& s : *sources) recs.push_back(s.rec);
  const std::string header = SafetensorsHeader(
      &recs, {{"format", "shardrec-checkpoint-shard"}, {"generation", std::to_string(generation)}});
  // A failed write takes its temporary file with it: on a full disk it would otherwise keep the
  // space the next save needs until that save (or a later one) succeeded.
  SR_RETURN_IF_ERROR(WriteThroughTemporary(fs, dir, name, name + ".tmp", [&](WritableFile& f) {
    return WriteRecords(f, header, sources, &recs, comm);
  }));
  entry->name = name;
  entry->size = header.size();
  for (const Record& r : recs) entry->size += r.nbytes;
  entry->records = std::move(recs);
  return Status::Ok();
}

Status CheckDense(const std::vector<DenseTensor>& dense) {
  std::set<std::string> names;
  for (size_t i = 0; i < dense.size(); ++i) {
    const DenseTensor& d = dense[i];
    if (d.name.empty() || d.name.find('/') != std::string::npos)
      return Status::InvalidArgument("dense tensor ", i,
                                     ": its name must be non-empty without '/'");
    if (d.data == nullptr && d.count > 0)
      return Status::InvalidArgument("dense tensor ", d.name, ": data is NULL");
    if (!names.insert(d.name).second)
      return Status::InvalidArgument("dense tensor name ", d.name, " is given twice");
  }
  return Status::Ok();
}

Manifest Describe(embedding::TableStorage& storage, const Group& g, int64_t generation) {
  const sharding::Plan& plan = storage.plan();
  Manifest m;
  m.library_version = SHARDREC_VERSION_STRING;
  m.generation = generation;
  m.step = storage.num_steps();
  m.world_size = g.comm->Size();
  m.shard_size = plan.world_size;
  m.plan_json = sharding::PlanToJson(plan);
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const sharding::TableConfig& c = plan.tables[t];
    TableEntry e;
    e.name = c.name;
    e.rows = c.rows;
    e.dim = c.dim;
    e.dtype = c.dtype;
    e.pooling = static_cast<int32_t>(c.pooling);
    for (int32_t f : c.features) e.features.push_back(plan.features[f].name);
    const optim::OptimizerConfig& o = storage.table_optimizer(static_cast<int32_t>(t));
    e.optimizer = static_cast<int32_t>(o.type);
    e.optimizer_json = OptimizerJson(o);
    for (const optim::StateSpec& s : optim::StateSpecs(o.type))
      e.states.push_back({s.name, s.row_wise});
    e.dynamic = c.dynamic.enabled;
    m.tables.push_back(std::move(e));
  }
  return m;
}

// Digest of this rank's dynamic shards: their forward counters, ids, last-seen forwards, counts
// and scores (the rows follow from the ids after a sync: a merge writes the same values
// everywhere).
uint64_t DynamicDigest(const embedding::TableStorage& storage) {
  embedding::KeyedRows d;
  uint64_t h = Mix64(0x2d);
  const auto fold = [&h](const void* p, size_t bytes) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, b + i, 8);
      h = Mix64(h ^ w);
    }
    for (size_t i = bytes / 8 * 8; i < bytes; ++i) h = Mix64(h ^ b[i]);
  };
  for (size_t li = 0; li < storage.layout().local.size(); ++li) {
    if (!storage.ExportKeyedRows(static_cast<int32_t>(li), 0, INT64_MAX, &d)) continue;
    const int64_t head[2] = {d.forwards, d.size};
    fold(head, sizeof(head));
    fold(d.ids.data(), d.ids.size() * sizeof(int64_t));
    fold(d.last_seen.data(), d.last_seen.size() * sizeof(int64_t));
    fold(d.counts.data(), d.counts.size() * sizeof(uint32_t));
    fold(d.scores.data(), d.scores.size() * sizeof(double));  // empty unless SCORE
  }
  return h;
}

// Collective over g.replica (when set) and then g.comm: a 2D save of dynamic tables requires
// every replica of a shard to hold the same keys (a sync since the last training step), which
// one replica then writes. Every rank learns the verdict; nothing is written otherwise.
Status CheckDynamicReplicas(const embedding::TableStorage& storage, const Group& g) {
  bool any = false;
  for (const embedding::TableLayout& t : storage.layout().tables) any = any || t.dynamic;
  if (!any || g.replica == nullptr) return Status::Ok();
  const uint64_t d = DynamicDigest(storage);
  int64_t mm[2] = {static_cast<int64_t>(d >> 1), static_cast<int64_t>(~d >> 1)};
  SR_RETURN_IF_ERROR(g.replica->AllReduce(mm, mm, 2, DType::kInt64, comm::ReduceOp::kMax));
  Status local = Status::Ok();
  if (mm[0] != static_cast<int64_t>(d >> 1) || mm[1] != static_cast<int64_t>(~d >> 1))
    local = Status::InvalidUsage(
        "the replicas of this rank's dynamic shards differ (their keys, forward counters, "
        "last-seen steps, counts or scores): sync the mesh (shardrec_mesh_sync) after the last "
        "training step and after setting scores, before saving a 2D checkpoint");
  return Agree(*g.comm, local, "to find its replicas in agreement");
}

// Rank 0 publishes, in its own directory, a manifest naming every rank's file, each written into
// the directory its rank was given. Ranks given different directories (or one path that is not
// on a file system every rank shares) would publish a checkpoint that cannot load and then remove
// the previous one, so first every file must be here, of the size its rank wrote. A file too
// short or too long is another save's (of another directory) under the same name.
Status CheckRankFiles(FileSystem& fs, const std::string& dir, const std::vector<FileEntry>& files,
                      const std::vector<int>& ranks) {
  for (size_t i = 0; i < files.size(); ++i) {
    std::unique_ptr<ReadableFile> f;
    // A store snapshot's size is its MANIFEST's.
    const Status s = fs.OpenReadable(
        dir + "/" + files[i].name + (files[i].is_store ? StrCat("/", kStoreManifestName) : ""), &f);
    if (s.ok() && f->size() == files[i].size) continue;
    if (!s.ok() && s.code() != Code::kNotFound) return s;
    return Status::InvalidArgument(
        "rank ", ranks[i], "'s checkpoint file ", files[i].name,
        s.ok() ? StrCat(" in rank 0's directory ", dir, " is ", f->size(), " bytes, not the ",
                        files[i].size, " rank ", ranks[i], " wrote")
               : StrCat(" is not in rank 0's directory ", dir),
        ": is the directory shared by every rank? Every rank must save to the same directory; "
        "nothing was published, the previous checkpoint in ",
        dir, " is untouched");
  }
  return Status::Ok();
}

// Whether `name` is one a save gives its files, so that one no manifest names is a killed save's
// garbage: a store snapshot directory (g<G>-rank<R>-shard<L>.store), a rank file
// (g<G>-rank<R>.safetensors) or its temporary (.tmp), or the manifest's temporary
// (manifest.json.tmp.<pid>.<n>). Sets `*dir_tree` for a snapshot directory.
bool SaveFileName(const std::string& name, bool* dir_tree) {
  size_t at = 0;
  const auto number = [&](const char* before) {
    const size_t n = std::strlen(before);
    if (name.compare(at, n, before) != 0) return false;
    at += n;
    const size_t start = at;
    while (at < name.size() && name[at] >= '0' && name[at] <= '9') ++at;
    return at > start;
  };
  *dir_tree = false;
  if (number(StrCat(kManifestName, ".tmp.").c_str())) return number(".") && at == name.size();
  at = 0;
  if (!number("g") || !number("-rank")) return false;
  const std::string rest = name.substr(at);
  if (rest == ".safetensors" || rest == ".safetensors.tmp") return true;
  *dir_tree = true;
  return number("-shard") && name.substr(at) == ".store";
}

// Removes the files a save makes (SaveFileName) in `dir` that `named` (the published manifest's
// files) does not name: those of a save killed after it made them (of any generation and rank;
// the next save of the same generation replaces only its own names, and a save under another
// plan or world size makes other names). Best effort, as the removal of the previous
// generation's files.
void RemoveStrayFiles(FileSystem& fs, const std::string& dir, const std::set<std::string>& named) {
  std::vector<std::string> names;
  if (!fs.ListDir(dir, &names).ok()) return;
  for (const std::string& n : names) {
    bool tree = false;
    if (!SaveFileName(n, &tree) || named.count(n) != 0) continue;
    (void)(tree ? fs.RemoveTree(dir + "/" + n) : fs.Remove(dir + "/" + n));
  }
}

}  // namespace

Status Save(embedding::TableStorage& storage, const Group& g, FileSystem& fs,
            const std::string& dir, const SaveOptions& options) {
  SR_CHECK(g.comm != nullptr && g.replicas >= 1);
  comm::Communicator& comm = *g.comm;
  Status local = Status::Ok();
  // Replicas of a dynamic table hold the same keys only right after a sync.
  if (g.replicas > 1) SR_RETURN_IF_ERROR(CheckDynamicReplicas(storage, g));
  if (storage.input_dist_pending())
    local = Status::InvalidUsage("cannot save a checkpoint while an input distribution is pending");
  // 2D meshes refuse tiered tables (their replicas are not synced): so does their save.
  if (local.ok() && g.replicas > 1)
    local = embedding::RefuseTiered(storage, "a 2D checkpoint save");
  if (local.ok()) local = CheckDense(options.dense);
  std::vector<Source> sources;
  std::deque<std::vector<uint8_t>> owned;
  // A tiered shard's rows are its store's snapshot (hard links) where the file system is the
  // operating system's; else they are copied into the rank file.
  TieredShards tiered;
  if (local.ok()) sources = Select(storage, g, options.dense, &owned, fs.native(), &tiered);
  Manifest previous;
  int64_t generation = local.ok() ? CurrentGeneration(fs, dir, &previous) : 0;
  if (local.ok()) local = fs.CreateDir(dir);
  SR_RETURN_IF_ERROR(Agree(comm, local, "to prepare the checkpoint"));
  // Ranks may see different previous manifests (one was replaced meanwhile): the largest wins.
  SR_RETURN_IF_ERROR(
      comm.AllReduce(&generation, &generation, 1, DType::kInt64, comm::ReduceOp::kMax));
  ++generation;

  std::vector<FileEntry> entries;
  std::vector<std::string> made;
  local = TakeSnapshots(storage, fs, dir, generation, comm, tiered, &sources, &entries, &made);
  if (local.ok() && !sources.empty()) {
    FileEntry entry;
    const std::string name = StrCat("g", generation, "-rank", comm.Rank(), ".safetensors");
    local = WriteRankFile(fs, dir, name, &sources, generation, &entry, comm);
    entries.insert(entries.begin(), std::move(entry));
  }
  local = Agree(comm, local, "to write its checkpoint file");
  if (!local.ok()) {
    // Nothing names them: the previous checkpoint in `dir` is the one that holds.
    for (const std::string& p : made) (void)fs.RemoveTree(p);
    return local;
  }

  // Every rank's file descriptions (one a line) reach rank 0 (an all-gather: the communicator's
  // primitive).
  std::string mine;
  for (const FileEntry& e : entries) mine += (mine.empty() ? "" : "\n") + FileEntryToJson(e);
  std::vector<uint8_t> all;
  std::vector<size_t> sizes;
  SR_RETURN_IF_ERROR(comm::AllGatherBytes(comm, mine.data(), mine.size(), &all, &sizes));

  local = Status::Ok();
  std::set<std::string> named;  // rank 0: the files the published manifest names
  if (comm.Rank() == 0) {
    Manifest m = Describe(storage, g, generation);
    std::vector<int> writers;  // the rank of each file
    size_t pos = 0;
    for (int r = 0; r < comm.Size() && local.ok(); ++r) {
      const std::string lines(reinterpret_cast<const char*>(all.data()) + pos, sizes[r]);
      for (size_t at = 0; at < lines.size() && local.ok();) {
        const size_t end = std::min(lines.find('\n', at), lines.size());
        FileEntry f;
        local = FileEntryFromJson(lines.substr(at, end - at), &f);
        m.files.push_back(std::move(f));
        writers.push_back(r);
        at = end + 1;
      }
      pos += sizes[r];
    }
    if (local.ok()) local = CheckRankFiles(fs, dir, m.files, writers);
    if (local.ok()) {
      const std::string text = ManifestToJson(m);
      local = WriteAtomically(fs, dir, kManifestName, {{text.data(), text.size()}});
      for (const FileEntry& f : m.files) named.insert(f.name);
    }
  }
  // Rank 0 has published (or failed to) before this agreement, so a peer lost in it (killed,
  // aborted, timed out) leaves the ranks unable to agree on the outcome: each says what it knows,
  // and the directory holds one complete checkpoint, the previous or the new one.
  const bool published = comm.Rank() == 0 && local.ok();
  const Status agreed = Agree(comm, local, "to publish the checkpoint manifest");
  if (!agreed.ok() && comm::IsExchangeFailure(agreed)) {
    return Status(agreed.code(),
                  StrCat(agreed.message(),
                         published ? StrCat(" (after rank 0 published the new checkpoint, "
                                            "generation ",
                                            generation, ": it is the one ", dir, " holds now)")
                                   : StrCat(" (rank 0 may have published the new checkpoint "
                                            "before this failure: ",
                                            dir,
                                            " holds the previous or the new one, complete; load "
                                            "it to learn which)")));
  }
  SR_RETURN_IF_ERROR(agreed);
  if (comm.Rank() == 0 && previous.generation != 0 && previous.generation != generation) {
    // The previous checkpoint's files are garbage now; a failure to remove them only leaves
    // them behind (the new manifest does not name them).
    for (const FileEntry& f : previous.files)
      (void)(f.is_store ? fs.RemoveTree(dir + "/" + f.name) : fs.Remove(dir + "/" + f.name));
  }
  if (comm.Rank() == 0) RemoveStrayFiles(fs, dir, named);
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
