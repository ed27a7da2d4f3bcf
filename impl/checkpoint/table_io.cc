// Export and import of one full table as a safetensors file (for serving, or to start from
// pretrained embeddings): tensors "weights" [rows, dim] and, optionally, each optimizer state by
// its name ([rows] for row-wise states, else [rows, dim]). A GPU collection exports through its
// accessors (which copy through the host). An import is staged like a checkpoint load
// (staged_load.h): nothing changes unless every rank has read its rows.
#include <deque>
#include <map>
#include <span>

#include "impl/checkpoint/checkpoint.h"
#include "impl/checkpoint/copy.h"
#include "impl/checkpoint/format.h"
#include "impl/checkpoint/keyed_table_io.h"
#include "impl/checkpoint/staged_load.h"
#include "impl/comm/agree.h"
#include "impl/core/config.h"

namespace shardrec::checkpoint {
namespace {

// Splits "dir/name" (a bare name lives in ".").
void SplitPath(const std::string& path, std::string* dir, std::string* name) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    *dir = ".";
    *name = path;
  } else {
    *dir = slash == 0 ? "/" : path.substr(0, slash);
    *name = path.substr(slash + 1);
  }
}

// Every rank must name the same table and the same with_state: an export's gathers are sized by
// them, an import's reads fill what they name (one replica of a data-parallel table importing its
// state and another not would leave the replicas different), and a dynamic table takes another
// path than a fixed one. One all-reduce, before anything else; an unknown name counts as a table
// of its own (when every rank names it, the calls go on to refuse it as before).
Status AgreeOnTable(embedding::TableStorage& storage, const std::string& table, bool with_state,
                    const char* call) {
  const int64_t same[] = {storage.plan().TableIndex(table), with_state ? 1 : 0};
  return comm::AgreeOnArguments(
      storage.comm(), Status::Ok(), StrCat("table ", call), same,
      StrCat("they named different tables or with_optimizer_state values (this rank: '", table,
             "', ", with_state ? 1 : 0, "); every rank must give the same"));
}

}  // namespace

Status ExportTable(embedding::TableStorage& storage, FileSystem& fs, const std::string& path,
                   const std::string& table, bool with_state) {
  SR_RETURN_IF_ERROR(AgreeOnTable(storage, table, with_state, "export"));
  const int32_t index = storage.plan().TableIndex(table);
  if (index >= 0 && storage.plan().tables[index].dynamic.enabled)
    return ExportKeyedTable(storage, fs, path, index, with_state);
  comm::Communicator& comm = storage.comm();
  std::vector<embedding::StateInfo> states;
  Status local = storage.TableStates(table, &states);  // kNotFound for an unknown table
  if (local.ok() && path.empty()) local = Status::InvalidArgument("path must not be empty");
  SR_RETURN_IF_ERROR(Agree(comm, local, "to start the export"));
  // TableStates found the table (index >= 0).
  const int64_t rows = storage.plan().tables[index].rows, dim = storage.plan().tables[index].dim;
  // The accessors gather the full table on every rank (collective).
  std::vector<std::vector<float>> data(1, std::vector<float>(static_cast<size_t>(rows * dim)));
  std::vector<Record> recs(1);
  recs[0].key = "weights";
  SR_RETURN_IF_ERROR(storage.GetWeights(table, data[0].data(), data[0].size()));
  if (with_state) {
    for (const auto& s : states) {
      data.emplace_back(static_cast<size_t>(s.row_wise ? rows : rows * dim));
      SR_RETURN_IF_ERROR(storage.GetState(table, s.name, data.back().data(), data.back().size()));
      Record r;
      r.key = s.name;
      r.vector = s.row_wise;
      recs.push_back(r);
    }
  }
  for (size_t i = 0; i < recs.size(); ++i) {
    Record& r = recs[i];
    r.rows = rows;
    r.cols = r.vector ? 1 : dim;
    r.nbytes = data[i].size() * sizeof(float);
  }
  if (comm.Rank() == 0) {
    const std::string header =
        SafetensorsHeader(&recs, {{"format", "shardrec-table"},
                                  {"table", table},
                                  {"library_version", SHARDREC_VERSION_STRING}});
    std::vector<std::pair<const void*, size_t>> pieces{{header.data(), header.size()}};
    for (size_t i = 0; i < recs.size(); ++i) pieces.push_back({data[i].data(), recs[i].nbytes});
    std::string dir, name;
    SplitPath(path, &dir, &name);
    local = WriteAtomically(fs, dir, name, pieces);
  }
  return Agree(comm, local, "to write the exported table");
}

Status ImportTable(embedding::TableStorage& storage, FileSystem& fs, const std::string& path,
                   const std::string& table, bool with_state, uint64_t staging_limit) {
  SR_RETURN_IF_ERROR(AgreeOnTable(storage, table, with_state, "import"));
  const int32_t index = storage.plan().TableIndex(table);
  if (index >= 0 && storage.plan().tables[index].dynamic.enabled)
    return ImportKeyedTable(storage, fs, path, index, with_state);
  comm::Communicator& comm = storage.comm();
  std::unique_ptr<ReadableFile> file;
  struct Copy {
    Target dst;
    Device device;  // where dst.data lives
    Record rec;
  };
  std::vector<Copy> copies;
  // FP8 weights (handed out as fp32 rows, collection_storage.cc): their rows land in fp32 here
  // first and are encoded into the table after the commit, each row as set_weights encodes it.
  std::vector<embedding::ShardTensor> fp8_tensors;
  std::deque<std::vector<float>> fp8_rows;
  StagedLoad staged(staging_limit);
  Status local = [&]() -> Status {
    if (storage.input_dist_pending())
      return Status::InvalidUsage("cannot import a table while an input distribution is pending");
    SR_RETURN_IF_ERROR(embedding::RefuseTiered(storage, "a table import"));
    std::vector<embedding::StateInfo> states;
    SR_RETURN_IF_ERROR(storage.TableStates(table, &states));
    // TableStates found the table (index >= 0).
    const int64_t rows = storage.plan().tables[index].rows, dim = storage.plan().tables[index].dim;
    SR_RETURN_IF_ERROR(fs.OpenReadable(path, &file));
    file = StopOnAbort(std::move(file), comm);
    std::vector<Record> recs;
    SR_RETURN_IF_ERROR(ReadSafetensors(*file, path, &recs, nullptr));
    std::map<std::string, Record> by_key;
    for (Record& r : recs) {
      if (r.dtype != DType::kFloat32 && r.dtype != DType::kFloat16 && r.dtype != DType::kBFloat16)
        return Status::InvalidArgument(path, ": tensor ", r.key, " is ", DTypeName(r.dtype),
                                       "; import reads F32, F16 or BF16");
      by_key[r.key] = r;
    }
    auto weights = by_key.find("weights");
    if (weights == by_key.end())
      return Status::InvalidArgument(path, " has no tensor named \"weights\"");
    if (weights->second.vector || weights->second.rows != rows || weights->second.cols != dim)
      return Status::InvalidArgument(path, ": \"weights\" is ", weights->second.rows, " x ",
                                     weights->second.cols, ", table ", table, " is ", rows, " x ",
                                     dim);
    for (const embedding::ShardTensor& t : storage.ShardTensors()) {
      if (t.table_name != table || t.rows == 0 || t.cols == 0) continue;
      const bool is_weights = t.kind == embedding::ParamKind::kWeights;
      if (!is_weights && !with_state) continue;
      auto it = by_key.find(is_weights ? std::string("weights") : t.name);
      if (it == by_key.end()) continue;  // a state the file does not have stays as it is
      const Record& r = it->second;
      if (r.rows != t.full_rows || r.cols != t.full_cols)
        return Status::InvalidArgument(path, ": state ", t.name, " is ", r.rows, " x ", r.cols,
                                       ", the table's is ", t.full_rows, " x ", t.full_cols);
      if (t.streamed) {  // FP8 weights (tiered tables were refused above)
        fp8_tensors.push_back(t);
        std::vector<float>& rows_f = fp8_rows.emplace_back(static_cast<size_t>(t.rows * t.cols));
        copies.push_back({Target{DType::kFloat32, t.row_offset, t.col_offset, t.rows, t.cols,
                                 rows_f.data(), t.cols},
                          Device::Host(), r});
        continue;
      }
      copies.push_back(
          {Target{t.dtype, t.row_offset, t.col_offset, t.rows, t.cols, t.data, t.row_stride},
           t.device, r});
    }
    // All-or-nothing, as a checkpoint load: every rank reads its rows into host staging first.
    for (const Copy& c : copies)
      SR_RETURN_IF_ERROR(staged.Add(c.device, c.dst, {{file.get(), path, &c.rec}}));
    return Status::Ok();
  }();
  SR_RETURN_IF_ERROR(Agree(comm, local, "to read the table file"));
  int32_t can_fail = staged.commit_can_fail() ? 1 : 0;
  SR_RETURN_IF_ERROR(comm.AllReduce(&can_fail, &can_fail, 1, DType::kInt32, comm::ReduceOp::kMax));
  local = staged.Commit();
  for (size_t i = 0; i < fp8_tensors.size() && local.ok(); ++i) {
    const embedding::ShardTensor& t = fp8_tensors[i];
    local = storage.WriteTieredRows(t.local, t.state, 0, t.rows, fp8_rows[i].data());
  }
  if (can_fail == 0) return local;  // host memory copies only: nothing to wait for
  if (!local.ok())
    local = Status(local.code(), StrCat(local.message(),
                                        " (while committing: the table is partly imported, "
                                        "import again)"));
  return Agree(comm, local, "to import the table");
}

}  // namespace shardrec::checkpoint
