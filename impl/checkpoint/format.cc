// Manifest and safetensors (de)serialisation with nlohmann-json; checksums with XXH3.
#include "impl/checkpoint/format.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>

#include "impl/checkpoint/json_int.h"
#include "impl/checkpoint/snapshot_file.h"
#include "impl/core/check.h"
#include "impl/embedding/param_store.h"

// Debian's libxxhash picks the widest XXH3 kernel the CPU has at run time (SSE2, AVX2,
// AVX-512); the inlined header-only build would be fixed at SSE2 and halve load throughput.
#include <xxh_x86dispatch.h>
#include <xxhash.h>

namespace shardrec::checkpoint {
namespace {

using nlohmann::json;

const char* SafetensorsDType(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "F32";
    case DType::kFloat16:
      return "F16";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat64:
      return "F64";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kUInt8:
      return "U8";
    case DType::kFp8E4M3:  // FP8 records are U8 in the header (SafetensorsView)
    case DType::kFp8E5M2:
      return "?";
  }
  return "?";
}

bool DTypeFromSafetensors(const std::string& s, DType* out) {
  for (int v = 0; v <= 6; ++v) {
    if (s == SafetensorsDType(static_cast<DType>(v))) {
      *out = static_cast<DType>(v);
      return true;
    }
  }
  return false;
}

// Tables and records may name the FP8 storage types too (FP8 records: format.h).
bool DTypeFromName(const std::string& s, DType* out) {
  for (int v = 0; v <= kMaxDTypeValue; ++v) {
    if (s == DTypeName(static_cast<DType>(v))) {
      *out = static_cast<DType>(v);
      return true;
    }
  }
  return false;
}

json RecordJson(const Record& r) {
  json j;
  j["key"] = r.key;
  j["table"] = r.table;
  j["tensor"] = r.tensor;
  j["dtype"] = DTypeName(r.dtype);
  j["vector"] = r.vector;
  j["full_shape"] = {r.full_rows, r.full_cols};
  j["offsets"] = {r.row_offset, r.col_offset};
  j["shape"] = {r.rows, r.cols};
  j["byte_range"] = {r.offset, r.offset + r.nbytes};
  j["chunk_rows"] = r.chunk_rows;
  j["xxh3"] = r.checksums;
  if (r.store_offset >= 0) j["store_offset"] = r.store_offset;
  return j;
}

Record RecordFrom(const json& j) {
  Record r;
  r.key = j.at("key").get<std::string>();
  r.table = j.at("table").get<std::string>();
  r.tensor = j.at("tensor").get<std::string>();
  if (!DTypeFromName(j.at("dtype").get<std::string>(), &r.dtype))
    throw std::runtime_error("unknown dtype " + j.at("dtype").get<std::string>());
  r.vector = j.at("vector").get<bool>();
  r.full_rows = JsonInt<int64_t>(j.at("full_shape").at(0));
  r.full_cols = JsonInt<int64_t>(j.at("full_shape").at(1));
  r.row_offset = JsonInt<int64_t>(j.at("offsets").at(0));
  r.col_offset = JsonInt<int64_t>(j.at("offsets").at(1));
  r.rows = JsonInt<int64_t>(j.at("shape").at(0));
  r.cols = JsonInt<int64_t>(j.at("shape").at(1));
  r.offset = JsonInt<uint64_t>(j.at("byte_range").at(0));
  r.nbytes = JsonInt<uint64_t>(j.at("byte_range").at(1)) - r.offset;
  r.chunk_rows = JsonInt<int64_t>(j.at("chunk_rows"));
  r.checksums = JsonInts<uint64_t>(j.at("xxh3"));
  if (j.contains("store_offset")) {
    r.store_offset = JsonInt<int64_t>(j.at("store_offset"));
    if (r.store_offset < 0)
      throw std::runtime_error("record " + r.key + " has a negative store_offset");
  }
  // Signs and sizes first, so no later sum or product can overflow on a hostile manifest.
  const bool bad =
      r.rows < 0 || r.cols < 0 || r.row_offset < 0 || r.col_offset < 0 || r.full_rows < 0 ||
      r.full_cols < 0 || r.full_rows > (int64_t{1} << 48) || r.full_cols > (1 << 24) ||
      r.rows > r.full_rows || r.cols > r.full_cols || r.row_offset > r.full_rows - r.rows ||
      r.col_offset > r.full_cols - r.cols || r.chunk_rows <= 0 ||
      r.nbytes != static_cast<uint64_t>(r.rows) * r.row_bytes() ||
      r.checksums.size() !=
          (r.store_offset >= 0
               ? size_t{0}
               : static_cast<size_t>(r.rows == 0 ? 0 : (r.rows - 1) / r.chunk_rows + 1));
  if (bad) throw std::runtime_error("record " + r.key + " has inconsistent shape or offsets");
  // The key repeats the table, tensor and offsets (docs/checkpoint-format.md), and the rank file
  // is found by key while the loader places the record by its fields: a record whose fields say
  // otherwise (edited, with the manifest signed again) would load one tensor into another's
  // place, such as momentum1 into momentum2.
  const std::string key =
      r.table.empty() ? "dense/" + r.tensor
                      : StrCat(r.table, "/", r.tensor, "/r", r.row_offset, "_c", r.col_offset);
  if (r.key != key)
    throw std::runtime_error("record " + r.key + " says table '" + r.table + "', tensor '" +
                             r.tensor + "' and offsets [" + std::to_string(r.row_offset) + ", " +
                             std::to_string(r.col_offset) + "], whose key is " + key);
  return r;
}

json FileJson(const FileEntry& f) {
  json j;
  j["name"] = f.name;
  j["size"] = f.size;
  j["records"] = json::array();
  for (const Record& r : f.records) j["records"].push_back(RecordJson(r));
  if (f.is_store)
    j["store"] = {{"identity", f.store.identity},
                  {"value_bytes", f.store.value_bytes},
                  {"manifest_xxh3", f.store.manifest_xxh3}};
  return j;
}

FileEntry FileFrom(const json& j) {
  FileEntry f;
  f.name = j.at("name").get<std::string>();
  f.size = JsonInt<uint64_t>(j.at("size"));
  if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.')
    throw std::runtime_error("bad file name '" + f.name + "'");
  for (const json& r : j.at("records")) f.records.push_back(RecordFrom(r));
  f.is_store = j.contains("store");
  if (f.is_store) {
    const json& st = j.at("store");
    f.store.identity = st.at("identity").get<std::string>();
    f.store.value_bytes = JsonInt<uint64_t>(st.at("value_bytes"));
    f.store.manifest_xxh3 = JsonInt<uint64_t>(st.at("manifest_xxh3"));
    if (f.store.value_bytes == 0)
      throw std::runtime_error("store " + f.name + " has 0-byte values");
  }
  // A record belongs to a store snapshot exactly when its file entry is one, and lies in its
  // records' values.
  for (const Record& r : f.records) {
    if ((r.store_offset >= 0) != f.is_store ||
        (f.is_store &&
         (r.row_bytes() > f.store.value_bytes ||
          static_cast<uint64_t>(r.store_offset) > f.store.value_bytes - r.row_bytes())))
      throw std::runtime_error("record " + r.key + " does not fit file entry " + f.name);
  }
  return f;
}

// Whether a store snapshot in `m` holds records of a dynamic table (version 5).
bool DynamicStores(const Manifest& m) {
  std::set<std::string> dynamic;
  for (const TableEntry& t : m.tables)
    if (t.dynamic) dynamic.insert(t.name);
  for (const FileEntry& f : m.files)
    for (const Record& r : f.records)
      if (f.is_store && dynamic.count(r.table) > 0) return true;
  return false;
}

}  // namespace

int64_t ChunkRows(uint64_t row_bytes) {
  if (row_bytes == 0) return 1;
  return std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / row_bytes));
}

uint64_t Checksum(const void* data, size_t n) { return XXH3_64bits_dispatch(data, n); }

std::string ManifestToJson(const Manifest& m) {
  json j;
  j["format"] = "shardrec-checkpoint";
  bool dynamic = false, fp8 = false, store = false;
  for (const FileEntry& f : m.files) store = store || f.is_store;
  for (const TableEntry& t : m.tables) {
    dynamic = dynamic || t.dynamic;
    fp8 = fp8 || IsFp8DType(t.dtype);
  }
  j["format_version"] = DynamicStores(m) ? std::max(m.format_version, kDynamicStoreFormatVersion)
                        : store          ? std::max(m.format_version, kStoreFormatVersion)
                        : fp8            ? std::max(m.format_version, kFp8FormatVersion)
                        : dynamic        ? std::max(m.format_version, kDynamicFormatVersion)
                                         : m.format_version;
  j["library_version"] = m.library_version;
  j["generation"] = m.generation;
  j["step"] = m.step;
  j["world_size"] = m.world_size;
  j["shard_size"] = m.shard_size;
  j["tables"] = json::array();
  for (const TableEntry& t : m.tables) {
    json tj;
    tj["name"] = t.name;
    tj["rows"] = t.rows;
    tj["dim"] = t.dim;
    tj["dtype"] = DTypeName(t.dtype);
    tj["pooling"] = t.pooling;
    tj["features"] = t.features;
    tj["optimizer"] = json::parse(t.optimizer_json);
    tj["states"] = json::array();
    for (const StateEntry& s : t.states)
      tj["states"].push_back({{"name", s.name}, {"row_wise", s.row_wise}});
    if (t.dynamic) tj["dynamic"] = true;
    j["tables"].push_back(tj);
  }
  j["plan"] = json::parse(m.plan_json);
  j["files"] = json::array();
  for (const FileEntry& f : m.files) j["files"].push_back(FileJson(f));
  // The rank files' records carry checksums; this one covers the manifest itself (the step
  // counter, the plan, the optimizers' hyperparameters), over its compact form without this
  // member (objects keep their members sorted, so the form is canonical).
  const std::string canonical = j.dump();
  j[kManifestChecksumKey] = Checksum(canonical.data(), canonical.size());
  return j.dump(1);
}

namespace {

// A manifest written with a checksum (every one this library writes) must match it; one without
// (written before the member existed) is read as it is.
Status VerifyManifestChecksum(const json& j, const std::string& path) {
  if (!j.contains(kManifestChecksumKey)) return Status::Ok();
  const uint64_t stored = JsonInt<uint64_t>(j.at(kManifestChecksumKey));
  json rest = j;
  rest.erase(kManifestChecksumKey);
  const std::string text = rest.dump();
  const uint64_t actual = Checksum(text.data(), text.size());
  if (actual != stored)
    return Status::Corrupt(path, ": the manifest does not match its checksum (",
                           kManifestChecksumKey, " ", stored, ", content ", actual,
                           "): it was changed or damaged after it was written");
  return Status::Ok();
}

}  // namespace

Status ManifestFromJson(const std::string& text, const std::string& path, Manifest* out) {
  try {
    const json j = json::parse(text);
    if (j.at("format").get<std::string>() != "shardrec-checkpoint")
      return Status::Corrupt(path, " is not a libshardrec checkpoint manifest");
    Manifest m;
    m.format_version = JsonInt<int>(j.at("format_version"));
    if (m.format_version < kFormatVersion || m.format_version > kDynamicStoreFormatVersion)
      return Status::Unsupported(path, ": checkpoint format version ", m.format_version,
                                 " is newer than this library reads (versions ", kFormatVersion,
                                 " to ", kDynamicStoreFormatVersion,
                                 "): load it with a newer libshardrec");
    SR_RETURN_IF_ERROR(VerifyManifestChecksum(j, path));
    m.library_version = j.at("library_version").get<std::string>();
    m.generation = JsonInt<int64_t>(j.at("generation"));
    m.step = JsonInt<int64_t>(j.at("step"));
    if (m.step < 0) return Status::Corrupt(path, ": step counter ", m.step, " is negative");
    if (m.step > embedding::ParamStore::kMaxStep)
      return Status::Corrupt(path, ": step counter ", m.step, " exceeds the maximum, ",
                             embedding::ParamStore::kMaxStep, " (2^53)");
    m.world_size = JsonInt<int32_t>(j.at("world_size"));
    m.shard_size = JsonInt<int32_t>(j.at("shard_size"));
    m.plan_json = j.at("plan").dump();
    for (const json& tj : j.at("tables")) {
      TableEntry t;
      t.name = tj.at("name").get<std::string>();
      t.rows = JsonInt<int64_t>(tj.at("rows"));
      t.dim = JsonInt<int32_t>(tj.at("dim"));
      if (!DTypeFromName(tj.at("dtype").get<std::string>(), &t.dtype))
        return Status::Corrupt(path, ": table ", t.name, " has an unknown dtype");
      t.pooling = JsonInt<int32_t>(tj.at("pooling"));
      t.features = tj.at("features").get<std::vector<std::string>>();
      t.optimizer_json = tj.at("optimizer").dump();
      t.optimizer = JsonInt<int32_t>(tj.at("optimizer").at("type"));
      for (const json& s : tj.at("states"))
        t.states.push_back({s.at("name").get<std::string>(), s.at("row_wise").get<bool>()});
      t.dynamic = tj.contains("dynamic") && tj.at("dynamic").get<bool>();
      m.tables.push_back(std::move(t));
    }
    for (const json& f : j.at("files")) m.files.push_back(FileFrom(f));
    // Stamped lower, the manifest says a reader that takes its version reads it, which a
    // version-4 reader would not (it was written for store snapshots of fixed tables only).
    if (m.format_version < kDynamicStoreFormatVersion && DynamicStores(m))
      return Status::Corrupt(path, ": checkpoint format version ", m.format_version,
                             " has a store snapshot of a dynamic table (version ",
                             kDynamicStoreFormatVersion, " and later)");
    *out = std::move(m);
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Corrupt(path, " is not a valid checkpoint manifest: ", e.what());
  }
}

std::string FileEntryToJson(const FileEntry& f) { return FileJson(f).dump(); }

Status FileEntryFromJson(const std::string& text, FileEntry* out) {
  try {
    *out = FileFrom(json::parse(text));
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::Internal("a rank's file description does not parse: ", e.what());
  }
}

void SafetensorsView(const Record& r, DType* dtype, int64_t* cols) {
  const bool fp8 = IsFp8DType(r.dtype);
  *dtype = fp8 ? DType::kUInt8 : r.dtype;
  *cols = fp8 ? Fp8RowBytes(r.cols) : r.cols;
}

std::string SafetensorsHeader(std::vector<Record>* records,
                              const std::map<std::string, std::string>& metadata) {
  // Offsets in the header are relative to the data area; the records keep absolute ones, so
  // the header is laid out twice: once to learn its padded size.
  json j;
  if (!metadata.empty()) j["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (const Record& r : *records) {
    json t;
    DType dtype;
    int64_t cols;
    SafetensorsView(r, &dtype, &cols);
    t["dtype"] = SafetensorsDType(dtype);
    t["shape"] = r.vector ? json::array({r.rows}) : json::array({r.rows, cols});
    t["data_offsets"] = {pos, pos + r.nbytes};
    j[r.key] = t;
    pos += r.nbytes;
  }
  std::string text = j.dump();
  // The data area starts 8-byte aligned (the safetensors writer pads with spaces too).
  text.append((8 - (text.size() % 8)) % 8, ' ');
  const uint64_t len = text.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  out += text;
  uint64_t abs = out.size();
  for (Record& r : *records) {
    r.offset = abs;
    abs += r.nbytes;
  }
  return out;
}

namespace {

// The safetensors format's own rule: the data area is exactly its tensors back to back. A gap,
// an overlap or bytes after the last tensor are refused: a header length off by some bytes
// shifts every tensor that far (each still inside the file) and shows here as such bytes.
// Every writer of the library (SafetensorsHeader) lays its records out that way, and so does
// the safetensors package. Zero-byte tensors sit anywhere a tensor may begin or end.
Status CheckDataArea(const std::vector<Record>& records, uint64_t data_start, uint64_t file_size,
                     const std::string& path) {
  std::vector<const Record*> by_offset;
  for (const Record& r : records) by_offset.push_back(&r);
  std::sort(by_offset.begin(), by_offset.end(), [](const Record* a, const Record* b) {
    return std::tie(a->offset, a->nbytes) < std::tie(b->offset, b->nbytes);
  });
  uint64_t end = data_start;
  const Record* last = nullptr;
  for (const Record* r : by_offset) {
    if (r->offset != end)
      return Status::Corrupt(path, ": tensor ", r->key, " begins at data offset ",
                             r->offset - data_start,
                             r->offset > end ? ", after a gap of " : ", inside the bytes of ",
                             r->offset > end ? StrCat(r->offset - end, " bytes") : last->key,
                             ": the safetensors data area must be its tensors back to back");
    end = r->offset + r->nbytes;
    last = r;
  }
  if (end != file_size)
    return Status::Corrupt(path, ": the tensors end ", file_size - end,
                           file_size - end == 1 ? " byte" : " bytes",
                           " before the end of the file (", file_size,
                           " bytes): a wrong header length or bytes after the last tensor");
  return Status::Ok();
}

}  // namespace

Status ReadSafetensors(const ReadableFile& file, const std::string& path,
                       std::vector<Record>* records, std::map<std::string, std::string>* metadata) {
  uint8_t lenbuf[8];
  SR_RETURN_IF_ERROR(file.ReadAt(0, lenbuf, 8));
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(lenbuf[i]) << (8 * i);
  if (len > file.size() - 8 || len > (100u << 20))
    return Status::Corrupt(path, ": safetensors header length ", len, " exceeds the file (",
                           file.size(), " bytes)");
  std::string text(len, '\0');
  SR_RETURN_IF_ERROR(file.ReadAt(8, text.data(), len));
  const uint64_t data_start = 8 + len;
  try {
    const json j = json::parse(text);
    records->clear();
    for (const auto& [key, t] : j.items()) {
      if (key == "__metadata__") {
        if (metadata) *metadata = t.get<std::map<std::string, std::string>>();
        continue;
      }
      Record r;
      r.key = key;
      if (!DTypeFromSafetensors(t.at("dtype").get<std::string>(), &r.dtype))
        return Status::Corrupt(path, ": tensor ", key, " has an unsupported dtype");
      const auto shape = JsonInts<int64_t>(t.at("shape"));
      if (shape.empty() || shape.size() > 2)
        return Status::Corrupt(path, ": tensor ", key, " is not 1-D or 2-D");
      for (int64_t d : shape) {
        if (d < 0 || d > (int64_t{1} << 40))
          return Status::Corrupt(path, ": tensor ", key, " has an impossible shape");
      }
      r.vector = shape.size() == 1;
      r.rows = shape[0];
      r.cols = r.vector ? 1 : shape[1];
      r.full_rows = r.rows;
      r.full_cols = r.cols;
      const auto range = JsonInts<uint64_t>(t.at("data_offsets"));
      // rows x row bytes is compared only once it is known to fit the file (no overflow), and a
      // row of more than 2^40 elements is no table's (which keeps row_bytes from overflowing).
      const uint64_t rows = static_cast<uint64_t>(r.rows), row_bytes = r.row_bytes();
      if (r.rows < 0 || r.cols < 0 || r.cols > (int64_t{1} << 40) || range.size() != 2 ||
          range[1] < range[0] || range[1] > file.size() - data_start ||
          (rows > 0 && row_bytes > (file.size() - data_start) / rows) ||
          range[1] - range[0] != rows * row_bytes)
        return Status::Corrupt(path, ": tensor ", key,
                               " has data offsets that do not match its shape or the file size");
      r.offset = data_start + range[0];
      r.nbytes = range[1] - range[0];
      r.chunk_rows = ChunkRows(r.row_bytes());
      records->push_back(std::move(r));
    }
    return CheckDataArea(*records, data_start, file.size(), path);
  } catch (const std::exception& e) {
    return Status::Corrupt(path, ": safetensors header is not valid: ", e.what());
  }
}

Status CheckRankFile(const ReadableFile& file, const std::string& path, const FileEntry& e) {
  if (file.size() != e.size)
    return Status::Corrupt("checkpoint file ", path, " is ", file.size(),
                           " bytes, the manifest says ", e.size, " (truncated or replaced)");
  std::vector<Record> header;
  SR_RETURN_IF_ERROR(ReadSafetensors(file, path, &header, nullptr));
  std::map<std::string, const Record*> by_key;
  for (const Record& h : header) by_key[h.key] = &h;
  for (const Record& r : e.records) {
    auto it = by_key.find(r.key);
    DType dtype;
    int64_t cols;
    SafetensorsView(r, &dtype, &cols);
    if (it == by_key.end() || it->second->offset != r.offset || it->second->nbytes != r.nbytes ||
        it->second->dtype != dtype || it->second->rows != r.rows || it->second->cols != cols ||
        it->second->vector != r.vector)
      return Status::Corrupt("checkpoint file ", path, ": record ", r.key,
                             " does not match the manifest");
  }
  return Status::Ok();
}

Status OpenRankFile(FileSystem& fs, const std::string& path, const FileEntry& e,
                    std::unique_ptr<ReadableFile>* out) {
  if (e.is_store) return OpenStoreSnapshot(fs, path, e, out);
  std::unique_ptr<ReadableFile> f;
  Status s = fs.OpenReadable(path, &f);
  if (s.code() == Code::kNotFound)
    return Status::Corrupt("checkpoint file ", path, " named by the manifest is missing");
  SR_RETURN_IF_ERROR(s);
  SR_RETURN_IF_ERROR(CheckRankFile(*f, path, e));
  *out = std::move(f);
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
