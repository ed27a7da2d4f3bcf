// Checkpoint load under any plan and world size: every rank checks the manifest against its
// collection, plans its reads (records overlapping its local shards) and reads and verifies them
// into host staging (staged_load.h); the ranks agree, and only then does anything change. With
// allow_partial_load each rank streams its overlaps chunk by chunk straight into place instead.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "impl/checkpoint/checkpoint.h"
#include "impl/checkpoint/copy.h"
#include "impl/checkpoint/fixed_rows.h"
#include "impl/checkpoint/format.h"
#include "impl/checkpoint/keyed_rows.h"
#include "impl/checkpoint/staged_copy.h"
#include "impl/core/check.h"
#include "impl/optim/optimizer.h"

namespace shardrec::checkpoint {
namespace {

using Read = FixedRead;

Status ReadManifest(FileSystem& fs, const std::string& dir, Manifest* m) {
  const std::string path = dir + "/" + kManifestName;
  std::unique_ptr<ReadableFile> f;
  Status s = fs.OpenReadable(path, &f);
  if (s.code() == Code::kNotFound)
    return Status::NotFound("no checkpoint in ", dir, ": ", kManifestName, " does not exist");
  SR_RETURN_IF_ERROR(s);
  std::string text(f->size(), '\0');
  SR_RETURN_IF_ERROR(f->ReadAt(0, text.data(), text.size()));
  return ManifestFromJson(text, path, m);
}

Status CheckTables(embedding::TableStorage& storage, const Manifest& m, const LoadOptions& o,
                   std::set<std::string>* reset) {
  const sharding::Plan& plan = storage.plan();
  std::map<std::string, const TableEntry*> saved;
  for (const TableEntry& t : m.tables) saved[t.name] = &t;
  for (size_t i = 0; i < plan.tables.size(); ++i) {
    const sharding::TableConfig& c = plan.tables[i];
    auto it = saved.find(c.name);
    if (it == saved.end())
      return Status::InvalidArgument("checkpoint mismatch: table ", c.name,
                                     " is not in the checkpoint");
    const TableEntry& t = *it->second;
    if (t.dynamic != c.dynamic.enabled)
      return Status::InvalidArgument("checkpoint mismatch: table ", c.name, " is ",
                                     t.dynamic ? "dynamic" : "fixed", " in the checkpoint and ",
                                     c.dynamic.enabled ? "dynamic" : "fixed", " in the collection");
    // A dynamic table's rows are its capacity, which may change: its rows move by id, and a
    // block that receives more rows than it has slots fails the load (keyed_rows.h).
    if ((!t.dynamic && t.rows != c.rows) || t.dim != c.dim)
      return Status::InvalidArgument("checkpoint mismatch: table ", c.name, " is ", t.rows, " x ",
                                     t.dim, " in the checkpoint and ", c.rows, " x ", c.dim,
                                     " in the collection");
    if (t.dtype != c.dtype && !o.allow_dtype_change)
      return Status::InvalidArgument("checkpoint mismatch: table ", c.name, " is stored as ",
                                     DTypeName(t.dtype), " in the checkpoint and ",
                                     DTypeName(c.dtype),
                                     " in the collection (allow_dtype_change converts)");
    const optim::OptimizerType mine = storage.table_optimizer(static_cast<int32_t>(i)).type;
    if (static_cast<int32_t>(mine) != t.optimizer) {
      if (!o.reset_optimizer_state)
        return Status::InvalidArgument(
            "checkpoint mismatch: table ", c.name, " was trained with optimizer ",
            optim::IsKnownOptimizerType(t.optimizer)
                ? optim::OptimizerName(static_cast<optim::OptimizerType>(t.optimizer))
                : "unknown",
            " and the collection uses ", optim::OptimizerName(mine),
            " (reset_optimizer_state loads the weights and starts the optimizer state from zero)");
      reset->insert(c.name);
    }
  }
  if (m.tables.size() != plan.tables.size()) {
    for (const TableEntry& t : m.tables) {
      if (plan.TableIndex(t.name) < 0)
        return Status::InvalidArgument("checkpoint mismatch: the checkpoint has table ", t.name,
                                       ", which the collection does not have");
    }
  }
  return Status::Ok();
}

// Finds the dense tensor records by name and checks their counts.
Status PlanDense(const Manifest& m, const std::vector<DenseTensor>& dense,
                 std::vector<std::pair<size_t, size_t>>* where) {
  for (const DenseTensor& d : dense) {
    bool found = false;
    for (size_t f = 0; f < m.files.size() && !found; ++f) {
      for (size_t r = 0; r < m.files[f].records.size(); ++r) {
        const Record& rec = m.files[f].records[r];
        if (!rec.table.empty() || rec.tensor != d.name) continue;
        if (static_cast<size_t>(rec.rows) != d.count || rec.dtype != DType::kFloat32)
          return Status::InvalidArgument("checkpoint mismatch: dense tensor ", d.name, " has ",
                                         rec.rows, " elements in the checkpoint, ", d.count,
                                         " given");
        if (d.data == nullptr && d.count > 0)
          return Status::InvalidArgument("dense tensor ", d.name, ": data is NULL");
        where->push_back({f, r});
        found = true;
        break;
      }
    }
    if (!found)
      return Status::InvalidArgument("checkpoint mismatch: dense tensor ", d.name,
                                     " is not in the checkpoint");
  }
  return Status::Ok();
}

// Opens the files the reads need and checks each against the manifest: size (truncation) and
// the safetensors header's record of every tensor.
Status OpenFiles(FileSystem& fs, const std::string& dir, const Manifest& m,
                 const std::vector<std::pair<size_t, size_t>>& needed,
                 const comm::Communicator& comm,
                 std::vector<std::unique_ptr<ReadableFile>>* files) {
  files->resize(m.files.size());
  for (const auto& [fi, ri] : needed) {
    (void)ri;
    if ((*files)[fi]) continue;
    const FileEntry& e = m.files[fi];
    const std::string path = dir + "/" + e.name;
    // A rank file or a store snapshot (version 4), checked against the manifest either way.
    SR_RETURN_IF_ERROR(OpenRankFile(fs, path, e, &(*files)[fi]));
    (*files)[fi] = StopOnAbort(std::move((*files)[fi]), comm);
  }
  return Status::Ok();
}

// Sets every element of the reset optimizer states to zero.
Status ZeroStates(embedding::TableStorage& storage, const std::vector<Read>& zero) {
  std::vector<uint8_t> unused;
  for (const Read& zr : zero) {
    const Target& z = zr.dst;
    if (zr.streamed) {
      SR_RETURN_IF_ERROR(WriteTieredRead(storage, zr, {}, &unused));
      continue;
    }
    if (!zr.device.is_host()) {
      SR_RETURN_IF_ERROR(ZeroOnDevice(zr.device, z));
      continue;
    }
    for (int64_t r = 0; r < z.rows; ++r)
      std::memset(static_cast<uint8_t*>(z.data) + r * z.row_stride * DTypeSize(z.dtype), 0,
                  static_cast<size_t>(z.cols) * DTypeSize(z.dtype));
  }
  return Status::Ok();
}

// Every rank must have read the same checkpoint: ranks given different directories (or one
// replaced between their reads) would each load their own, and the collection would end up a
// mix of them with every call returning OK. One all-reduce of the manifest's checksum and its
// complement (max): equal on every rank exactly when all checksums are.
Status AgreeSameManifest(comm::Communicator& comm, const Manifest& m) {
  const std::string json = ManifestToJson(m);
  const uint64_t h = Checksum(json.data(), json.size());
  int64_t w[2] = {static_cast<int64_t>(h), static_cast<int64_t>(~h)};
  SR_RETURN_IF_ERROR(comm.AllReduce(w, w, 2, DType::kInt64, comm::ReduceOp::kMax));
  if (static_cast<uint64_t>(w[0]) != h || ~static_cast<uint64_t>(w[1]) != h)
    return Status::InvalidArgument(
        "the ranks read different checkpoints (their manifests differ): every rank must load "
        "the same directory; no rank changed any state");
  return Status::Ok();
}

}  // namespace

Status Load(embedding::TableStorage& storage, const Group& g, FileSystem& fs,
            const std::string& dir, const LoadOptions& options) {
  SR_CHECK(g.comm != nullptr);
  Manifest m;
  std::set<std::string> reset;
  std::vector<Read> reads;
  std::vector<Read> zero;
  std::vector<std::pair<size_t, size_t>> dense_at;
  std::vector<std::unique_ptr<ReadableFile>> files;
  StagedLoad staged(options.staging_limit);
  KeyedLoad dynamic;  // staged in every mode: rows move between blocks by id
  auto sources = [&](const std::vector<std::pair<size_t, size_t>>& records) {
    std::vector<OverlapSource> out;
    for (const auto& [fi, ri] : records)
      out.push_back({files[fi].get(), dir + "/" + m.files[fi].name, &m.files[fi].records[ri]});
    return out;
  };
  Status local = [&]() -> Status {
    if (storage.input_dist_pending())
      return Status::InvalidUsage(
          "cannot load a checkpoint while an input distribution is "
          "pending");
    // Learns what queued device work found now (the commit's SetNumSteps then cannot fail).
    SR_RETURN_IF_ERROR(storage.Synchronize());
    SR_RETURN_IF_ERROR(ReadManifest(fs, dir, &m));
    SR_RETURN_IF_ERROR(CheckTables(storage, m, options, &reset));
    SR_RETURN_IF_ERROR(PlanDense(m, options.dense, &dense_at));
    SR_RETURN_IF_ERROR(PlanFixedReads(storage, m, reset, &reads, &zero));
    std::vector<std::pair<size_t, size_t>> needed = dense_at;
    for (const Read& r : reads) needed.insert(needed.end(), r.records.begin(), r.records.end());
    KeyedLoad::Needed(m, &needed);
    SR_RETURN_IF_ERROR(OpenFiles(fs, dir, m, needed, *g.comm, &files));
    SR_RETURN_IF_ERROR(dynamic.Read(storage, m, files, dir, reset));
    if (!options.allow_partial_load) {
      std::vector<uint8_t> scratch;
      for (const Read& rd : reads) {
        if (!rd.streamed) {
          SR_RETURN_IF_ERROR(staged.Add(rd.device, rd.dst, sources(rd.records)));
          continue;
        }
        // A tiered shard is not staged (it may not fit in memory): verified now, read again
        // chunk by chunk while committing.
        for (const OverlapSource& src : sources(rd.records))
          SR_RETURN_IF_ERROR(VerifyOverlap(*src.file, src.path, *src.rec, rd.dst, &scratch));
      }
      for (size_t i = 0; i < dense_at.size(); ++i) {
        const DenseTensor& d = options.dense[i];
        const Target dst{DType::kFloat32, 0, 0, static_cast<int64_t>(d.count), 1, d.data, 1};
        SR_RETURN_IF_ERROR(staged.Add(Device(), dst, sources({dense_at[i]})));
      }
      return Status::Ok();
    }
    if (!options.verify_first) return Status::Ok();
    std::vector<uint8_t> scratch;
    for (const Read& rd : reads) {
      for (const auto& [fi, ri] : rd.records)
        SR_RETURN_IF_ERROR(VerifyOverlap(*files[fi], dir + "/" + m.files[fi].name,
                                         m.files[fi].records[ri], rd.dst, &scratch));
    }
    for (size_t i = 0; i < dense_at.size(); ++i) {
      const auto& [fi, ri] = dense_at[i];
      const Target dst{DType::kFloat32, 0, 0, m.files[fi].records[ri].rows, 1, nullptr, 1};
      SR_RETURN_IF_ERROR(VerifyOverlap(*files[fi], dir + "/" + m.files[fi].name,
                                       m.files[fi].records[ri], dst, &scratch));
    }
    return Status::Ok();
  }();
  SR_RETURN_IF_ERROR(Agree(*g.comm, local, "to read and verify its part of the checkpoint"));
  SR_RETURN_IF_ERROR(AgreeSameManifest(*g.comm, m));

  if (!options.allow_partial_load) {
    // Every rank holds its verified part. A host commit is memory copies, which cannot fail:
    // then no rank waits for another (a peer lost now cannot turn a complete load into an error).
    // A peer lost during this all-reduce can end it on some ranks (they commit) and fail it on
    // others (they do not): nothing can prevent that, and the docs say what holds then
    // (checkpoint-format.md, "A peer lost during a load").
    int32_t can_fail = staged.commit_can_fail() ? 1 : 0;
    for (const Read& zr : zero) can_fail = can_fail || !zr.device.is_host() || zr.streamed;
    for (const Read& rd : reads) can_fail = can_fail || rd.streamed;
    can_fail = can_fail || dynamic.tiered();
    SR_RETURN_IF_ERROR(
        g.comm->AllReduce(&can_fail, &can_fail, 1, DType::kInt32, comm::ReduceOp::kMax));
    local = [&]() -> Status {
      SR_RETURN_IF_ERROR(staged.Commit());
      std::vector<uint8_t> buffer;
      for (const Read& rd : reads)
        if (rd.streamed)
          SR_RETURN_IF_ERROR(WriteTieredRead(storage, rd, sources(rd.records), &buffer));
      SR_RETURN_IF_ERROR(ZeroStates(storage, zero));
      SR_RETURN_IF_ERROR(dynamic.Commit(storage));
      return storage.SetNumSteps(reset.empty() ? m.step : 0);
    }();
    if (can_fail == 0) return local;
    if (!local.ok())
      local = Status(local.code(), StrCat(local.message(),
                                          " (while committing: the collection is partly loaded, "
                                          "load again)"));
    return Agree(*g.comm, local, "to commit its part of the checkpoint");
  }

  // allow_partial_load: each chunk is verified in `buffer` and then copied into place; the dense
  // tensors, small, reach the caller's buffers only once every rank has loaded.
  std::vector<uint8_t> buffer;
  std::vector<std::vector<float>> dense_values(dense_at.size());
  embedding::HostStaging staging;  // blocks of a GPU collection's shards, reused between them
  local = [&]() -> Status {
    for (const Read& rd : reads) {
      if (rd.streamed) {
        SR_RETURN_IF_ERROR(WriteTieredRead(storage, rd, sources(rd.records), &buffer));
        continue;
      }
      if (!rd.device.is_host()) {
        SR_RETURN_IF_ERROR(
            CopyOverlapsToDevice(rd.device, rd.dst, sources(rd.records), &staging, &buffer));
        continue;
      }
      Target live = rd.dst;
      live.live = true;
      for (const auto& [fi, ri] : rd.records)
        SR_RETURN_IF_ERROR(CopyOverlap(*files[fi], dir + "/" + m.files[fi].name,
                                       m.files[fi].records[ri], live, &buffer));
    }
    for (size_t i = 0; i < dense_at.size(); ++i) {
      const auto& [fi, ri] = dense_at[i];
      dense_values[i].resize(options.dense[i].count);
      const Target dst{
          DType::kFloat32,        0, 0, static_cast<int64_t>(dense_values[i].size()), 1,
          dense_values[i].data(), 1};
      SR_RETURN_IF_ERROR(CopyOverlap(*files[fi], dir + "/" + m.files[fi].name,
                                     m.files[fi].records[ri], dst, &buffer));
    }
    SR_RETURN_IF_ERROR(ZeroStates(storage, zero));
    SR_RETURN_IF_ERROR(dynamic.Commit(storage));
    return storage.SetNumSteps(reset.empty() ? m.step : 0);
  }();
  // The streamed copy wrote in place what it had verified before it failed: say so, as the
  // all-or-nothing path's commit does.
  if (!local.ok())
    local = Status(local.code(), StrCat(local.message(),
                                        " (allow_partial_load: the collection is partly loaded, "
                                        "load again)"));
  SR_RETURN_IF_ERROR(Agree(*g.comm, local, "to load its part of the checkpoint"));
  for (size_t i = 0; i < dense_at.size(); ++i)
    std::copy(dense_values[i].begin(), dense_values[i].end(), options.dense[i].data);
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
