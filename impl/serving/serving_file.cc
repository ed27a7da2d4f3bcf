// The serving file: a fixed prefix (magic, header length, header checksum), a JSON header that
// places every block, then the blocks, each 64-byte aligned and checksummed per 1 MiB chunk.
// Opened by mmap, so the tables are read in place from pages the page cache shares.
#include "impl/serving/serving_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "impl/checkpoint/format.h"
#include "impl/checkpoint/fs.h"
#include "impl/checkpoint/json_int.h"
#include "impl/core/check.h"
#include "impl/core/fp8.h"

namespace shardrec::serving {
namespace {

using checkpoint::JsonInt;
using checkpoint::JsonInts;
using nlohmann::json;

constexpr char kMagic[8] = {'S', 'R', 'S', 'E', 'R', 'V', 'E', '1'};
constexpr uint64_t kPrefixBytes = 24;  // magic, header length, header XXH3
constexpr uint64_t kChunk = checkpoint::kChunkBytes;

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

json Checksums(const uint8_t* data, uint64_t nbytes) {
  json sums = json::array();
  for (uint64_t o = 0; o < nbytes; o += kChunk)
    sums.push_back(checkpoint::Checksum(data + o, std::min(kChunk, nbytes - o)));
  return sums;
}

// One block of the file: where it goes and what it holds.
struct Block {
  const uint8_t* data;
  uint64_t nbytes;
  uint64_t offset = 0;
};

Status Bad(const std::string& path, const std::string& what) {
  return Status::Corrupt("serving file ", path, ": ", what);
}

// Checks a block entry against the file and its chunk checksums; returns its data.
Status CheckBlock(const std::string& path, const std::string& what, const json& e,
                  const uint8_t* base, uint64_t size, uint64_t nbytes, const uint8_t** data) {
  const uint64_t offset = JsonInt<uint64_t>(e.at("offset"));
  const uint64_t claimed = JsonInt<uint64_t>(e.at("nbytes"));
  if (claimed != nbytes)
    return Bad(path, what + " has " + std::to_string(claimed) + " bytes, its shape needs " +
                         std::to_string(nbytes));
  if (offset % kAlign != 0 || offset > size || nbytes > size - offset)
    return Bad(path, what + " lies outside the file or is misaligned (truncated?)");
  const json& sums = e.at("xxh3");
  if (sums.size() != (nbytes + kChunk - 1) / kChunk)
    return Bad(path, what + " has the wrong number of checksums");
  for (uint64_t k = 0; k * kChunk < nbytes; ++k) {
    const uint64_t n = std::min(kChunk, nbytes - k * kChunk);
    if (checkpoint::Checksum(base + offset + k * kChunk, n) != JsonInt<uint64_t>(sums[k]))
      return Bad(path, what + " chunk " + std::to_string(k) + " (bytes " +
                           std::to_string(offset + k * kChunk) + ".." +
                           std::to_string(offset + k * kChunk + n) +
                           ") does not match its checksum");
  }
  *data = nbytes == 0 ? nullptr : base + offset;
  return Status::Ok();
}

// Every FP8 row's scale is one the encoder writes (fp8.h): a checksum-clean file whose writer
// stored another (0, negative, not a power of two, out of range) would decode wrong or overflow.
// A dynamic table's trailing zero row (scale 0) reads as zeros and is allowed.
Status CheckFp8Scales(const std::string& path, const Table& t, uint64_t stored_rows) {
  for (uint64_t r = 0; r < stored_rows; ++r) {
    float scale;
    std::memcpy(&scale, t.data + r * t.row_bytes, sizeof(scale));
    const bool zero_row = r == static_cast<uint64_t>(t.rows) && scale == 0.0f;
    if (!zero_row && !IsValidFp8Scale(scale))
      return Bad(path, "table " + t.name + " row " + std::to_string(r) + " has scale " +
                           std::to_string(scale) +
                           ", not a power of two in [2^-126, 2^111] as FP8 rows carry");
  }
  return Status::Ok();
}

struct Mapping {
  void* addr = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) ::munmap(addr, size);
  }
};

Status Map(const std::string& path, std::shared_ptr<Mapping>* out) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, for ever; the type
  // is checked right after.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("serving file ", path, " does not exist");
    return Status::Io("cannot open ", path, ": ", std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::Io("cannot stat ", path, ": ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Bad(path, S_ISDIR(st.st_mode) ? "a directory, not a serving file"
                                         : "not a regular file (a device, pipe or socket)");
  }
  auto m = std::make_shared<Mapping>();
  m->size = static_cast<size_t>(st.st_size);
  if (m->size < kPrefixBytes) {
    ::close(fd);
    return Bad(path, "only " + std::to_string(m->size) + " bytes: not a serving file (truncated?)");
  }
  m->addr = ::mmap(nullptr, m->size, PROT_READ, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (m->addr == MAP_FAILED) return Status::Io("cannot map ", path, ": ", std::strerror(e));
  *out = std::move(m);
  return Status::Ok();
}

// A dynamic table's ids block (ascending int64, one per row): copied out and indexed, and its
// zero row checked, since every unknown id reads it.
Status ParseIds(const std::string& path, const json& e, const uint8_t* base, uint64_t size,
                Table* t) {
  const uint8_t* data = nullptr;
  SR_RETURN_IF_ERROR(CheckBlock(path, "ids of table " + t->name, e.at("ids"), base, size,
                                static_cast<uint64_t>(t->rows) * sizeof(int64_t), &data));
  auto d = std::make_shared<DynamicIds>();
  d->ids.resize(static_cast<size_t>(t->rows));
  if (t->rows > 0) std::memcpy(d->ids.data(), data, d->ids.size() * sizeof(int64_t));
  for (size_t i = 1; i < d->ids.size(); ++i)
    if (d->ids[i - 1] >= d->ids[i]) return Bad(path, "ids of table " + t->name + " not ascending");
  const uint8_t* zero = t->data + static_cast<uint64_t>(t->rows) * t->row_bytes;
  for (uint64_t b = 0; b < t->row_bytes; ++b)
    if (zero[b] != 0) return Bad(path, "table " + t->name + ": its zero row is not zero");
  SR_RETURN_IF_ERROR(IdIndex::Build(d->ids.data(), t->rows, t->name, &d->index));
  t->dynamic = std::move(d);
  return Status::Ok();
}

Status Parse(const std::string& path, const uint8_t* base, uint64_t size, Bounds bounds,
             Model* model) {
  if (std::memcmp(base, kMagic, sizeof(kMagic)) != 0)
    return Bad(path, "bad magic: not a libshardrec serving file");
  uint64_t hlen = 0, hsum = 0;
  std::memcpy(&hlen, base + 8, 8);
  std::memcpy(&hsum, base + 16, 8);
  if (hlen > size - kPrefixBytes) return Bad(path, "header runs past the end (truncated?)");
  if (checkpoint::Checksum(base + kPrefixBytes, hlen) != hsum)
    return Bad(path, "header does not match its checksum");
  const json h = json::parse(base + kPrefixBytes, base + kPrefixBytes + hlen);
  const int format_version = JsonInt<int>(h.at("format_version"));
  if (h.at("format").get<std::string>() != "shardrec-serving" || format_version < 1 ||
      format_version > kServingFormatVersion)
    return Bad(path, "unknown format or format_version");
  const uint64_t file_size = JsonInt<uint64_t>(h.at("file_size"));
  if (file_size != size)
    return Bad(path, "is " + std::to_string(size) + " bytes, its header says " +
                         std::to_string(file_size) + " (truncated or extended)");
  model->bounds = bounds;
  model->features = h.at("features").get<std::vector<std::string>>();
  for (const json& e : h.at("tables")) {
    Table t;
    t.name = e.at("name").get<std::string>();
    t.rows = JsonInt<int64_t>(e.at("rows"));
    t.dim = JsonInt<int32_t>(e.at("dim"));
    const bool dynamic = format_version >= 2 && e.value("dynamic", false);
    const int32_t pooling = JsonInt<int32_t>(e.at("pooling"));
    if (pooling < 0 || pooling > 2 || t.rows < (dynamic ? 0 : 1) || t.dim < 1 ||
        t.rows > (int64_t{1} << 48) ||
        !StorageFromName(e.at("storage").get<std::string>(), &t.storage))
      return Bad(path, "record of table " + t.name + " has a bad shape, pooling or storage");
    t.pooling = static_cast<Pooling>(pooling);
    t.features = JsonInts<int32_t>(e.at("features"));
    t.row_bytes = RowBytes(t.storage, t.dim);
    if (JsonInt<uint64_t>(e.at("row_bytes")) != t.row_bytes)
      return Bad(path, "record of table " + t.name + " has the wrong row size");
    // A dynamic table's block ends with its zero row.
    const uint64_t stored_rows = static_cast<uint64_t>(t.rows) + (dynamic ? 1 : 0);
    // Rows up to 2^48 times a row of up to 2^33 bytes can wrap 64 bits (to 0 for 2^48 x 2^16,
    // which a block of 0 bytes would then pass): a table larger than the file lies outside it.
    if (stored_rows > size / t.row_bytes)
      return Bad(path, "table " + t.name + " is larger than the file (truncated?)");
    SR_RETURN_IF_ERROR(
        CheckBlock(path, "table " + t.name, e, base, size, stored_rows * t.row_bytes, &t.data));
    if (t.storage == Storage::kFp8E4M3 || t.storage == Storage::kFp8E5M2)
      SR_RETURN_IF_ERROR(CheckFp8Scales(path, t, stored_rows));
    if (dynamic) SR_RETURN_IF_ERROR(ParseIds(path, e, base, size, &t));
    model->tables.push_back(std::move(t));
  }
  for (const json& e : h.at("dense")) {
    const std::string name = e.at("name").get<std::string>();
    const uint64_t count = JsonInt<uint64_t>(e.at("count"));
    if (count > (uint64_t{1} << 48)) return Bad(path, "dense tensor " + name + " is too large");
    const uint8_t* data = nullptr;
    SR_RETURN_IF_ERROR(CheckBlock(path, "dense tensor " + name, e, base, size, count * 4, &data));
    model->dense[name] = Dense{reinterpret_cast<const float*>(data), static_cast<size_t>(count)};
  }
  Status s = model->Finish();
  if (!s.ok()) return Bad(path, s.message());
  return Status::Ok();
}

}  // namespace

Status SaveServingFile(const Model& m, const std::string& path) {
  std::vector<Block> blocks;
  json h;
  bool any_dynamic = false;
  for (const Table& t : m.tables) {
    any_dynamic = any_dynamic || t.dynamic != nullptr;
    if (t.tiered)
      return Status::Unsupported("cannot save ", path, ": table ", t.name,
                                 " is served from the checkpoint's files (tiers) and is not in "
                                 "memory to write; open the checkpoint without tiers to convert "
                                 "it");
  }
  h["format"] = "shardrec-serving";
  // Files without a dynamic table stay version 1, which older readers open.
  h["format_version"] = any_dynamic ? kServingFormatVersion : 1;
  h["features"] = m.features;
  // The header entries, built first, then the blocks each entry places (its "offset").
  json tables = json::array();
  for (const Table& t : m.tables) {
    const uint64_t nbytes = (static_cast<uint64_t>(t.rows) + (t.dynamic ? 1 : 0)) * t.row_bytes;
    json e = {{"name", t.name},
              {"rows", t.rows},
              {"dim", t.dim},
              {"pooling", static_cast<int32_t>(t.pooling)},
              {"storage", StorageName(t.storage)},
              {"features", t.features},
              {"row_bytes", t.row_bytes},
              {"nbytes", nbytes},
              {"xxh3", Checksums(t.data, nbytes)}};
    if (t.dynamic) {
      const auto* ids = reinterpret_cast<const uint8_t*>(t.dynamic->ids.data());
      const uint64_t id_bytes = t.dynamic->ids.size() * sizeof(int64_t);
      e["dynamic"] = true;
      e["ids"] = {{"nbytes", id_bytes}, {"xxh3", Checksums(ids, id_bytes)}};
    }
    tables.push_back(std::move(e));
  }
  json dense = json::array();
  for (const auto& [name, d] : m.dense) {
    const uint64_t nbytes = d.count * sizeof(float);
    dense.push_back({{"name", name},
                     {"count", d.count},
                     {"nbytes", nbytes},
                     {"xxh3", Checksums(reinterpret_cast<const uint8_t*>(d.data), nbytes)}});
  }
  // Block order: each table's rows, then its ids when dynamic; then the dense tensors.
  std::vector<json*> entries;
  for (size_t i = 0; i < m.tables.size(); ++i) {
    const Table& t = m.tables[i];
    blocks.push_back({t.data, tables[i]["nbytes"].get<uint64_t>()});
    entries.push_back(&tables[i]);
    if (t.dynamic) {
      blocks.push_back({reinterpret_cast<const uint8_t*>(t.dynamic->ids.data()),
                        t.dynamic->ids.size() * sizeof(int64_t)});
      entries.push_back(&tables[i]["ids"]);
    }
  }
  for (const auto& kv : m.dense)
    blocks.push_back({reinterpret_cast<const uint8_t*>(kv.second.data), kv.second.count * 4});
  for (json& e : dense) entries.push_back(&e);
  // The header's size depends on the offsets it holds, so offsets are placed after a header
  // whose numbers are at their widest (20 digits each), and the header is padded to that room.
  auto place = [&](uint64_t start) {
    uint64_t at = start;
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks[i].offset = at;
      (*entries[i])["offset"] = at;
      at = AlignUp(at + blocks[i].nbytes);
    }
    return at;
  };
  place(UINT64_MAX / 2);
  h["tables"] = tables;
  h["dense"] = dense;
  h["file_size"] = UINT64_MAX / 2;
  const uint64_t room = h.dump().size();
  const uint64_t data_start = AlignUp(kPrefixBytes + room);
  const uint64_t file_size = place(data_start);
  h["tables"] = tables;
  h["dense"] = dense;
  h["file_size"] = file_size;
  std::string text = h.dump();
  if (text.size() > room) return Status::Internal("serving file header outgrew its room");
  text.resize(room, ' ');
  const uint64_t hlen = text.size();
  const uint64_t hsum = checkpoint::Checksum(text.data(), text.size());
  std::string prefix(kMagic, sizeof(kMagic));
  prefix.append(reinterpret_cast<const char*>(&hlen), 8);
  prefix.append(reinterpret_cast<const char*>(&hsum), 8);
  static const uint8_t zeros[kAlign] = {};
  std::vector<std::pair<const void*, size_t>> pieces = {{prefix.data(), prefix.size()},
                                                        {text.data(), text.size()}};
  uint64_t at = kPrefixBytes + hlen;
  for (const Block& b : blocks) {
    if (b.offset > at) pieces.push_back({zeros, static_cast<size_t>(b.offset - at)});
    if (b.nbytes > 0) pieces.push_back({b.data, static_cast<size_t>(b.nbytes)});
    at = b.offset + b.nbytes;
  }
  if (file_size > at) pieces.push_back({zeros, static_cast<size_t>(file_size - at)});
  static const std::shared_ptr<checkpoint::FileSystem> fs = checkpoint::PosixFileSystem();
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty()) return Status::InvalidArgument("serving file path ", path, " names no file");
  return checkpoint::WriteAtomically(*fs, dir.empty() ? "/" : dir, name, pieces);
}

Status OpenServingFile(const std::string& path, Bounds bounds, std::shared_ptr<Model>* out) {
  std::shared_ptr<Mapping> map;
  SR_RETURN_IF_ERROR(Map(path, &map));
  auto model = std::make_shared<Model>();
  const auto* base = static_cast<const uint8_t*>(map->addr);
  try {
    SR_RETURN_IF_ERROR(Parse(path, base, map->size, bounds, model.get()));
  } catch (const std::exception& e) {  // nlohmann's errors and JsonInt's
    return Bad(path, std::string("malformed header: ") + e.what());
  }
  model->backing.push_back(std::move(map));
  *out = std::move(model);
  return Status::Ok();
}

}  // namespace shardrec::serving
