// A store snapshot read as a rank file (snapshot_file.h).
#include "impl/checkpoint/snapshot_file.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/core/check.h"
#include "impl/store/format.h"
#include "impl/store/row_store.h"

namespace shardrec::checkpoint {
namespace {

// Rows asked of the store at once by one read.
constexpr int64_t kReadBatch = 1024;

Status ReadManifest(FileSystem& fs, const std::string& path, std::vector<uint8_t>* bytes) {
  const std::string file = path + "/" + kStoreManifestName;
  std::unique_ptr<ReadableFile> f;
  const Status s = fs.OpenReadable(file, &f);
  if (s.code() == Code::kNotFound)
    return Status::Corrupt("checkpoint store snapshot ", path, " named by the manifest is missing",
                           " (no ", file, ")");
  SR_RETURN_IF_ERROR(s);
  bytes->resize(f->size());
  if (!bytes->empty()) SR_RETURN_IF_ERROR(f->ReadAt(0, bytes->data(), bytes->size()));
  return Status::Ok();
}

class SnapshotFile final : public ReadableFile {
 public:
  SnapshotFile(std::string path, const FileEntry& e, std::unique_ptr<store::RowStore> store)
      : path_(std::move(path)), records_(e.records), store_(std::move(store)) {
    std::sort(records_.begin(), records_.end(),
              [](const Record& a, const Record& b) { return a.offset < b.offset; });
    for (const Record& r : records_) size_ = std::max(size_, r.offset + r.nbytes);
  }

  uint64_t size() const override { return size_; }

  Status ReadAt(uint64_t offset, void* out, size_t n) const override {
    auto* dst = static_cast<uint8_t*>(out);
    std::vector<int64_t> keys;
    std::vector<uint8_t> values;
    std::unique_ptr<bool[]> found(new bool[kReadBatch]);
    const size_t vb = store_->value_bytes();
    while (n > 0) {
      const Record* r = nullptr;
      for (const Record& c : records_)
        if (offset >= c.offset && offset - c.offset < c.nbytes) r = &c;
      if (r == nullptr)
        return Status::Corrupt("checkpoint store snapshot ", path_, ": bytes ", offset, "+", n,
                               " lie outside its records");
      const uint64_t rb = r->row_bytes();
      const uint64_t in = offset - r->offset;  // record-relative bytes [in, in + take)
      const uint64_t take = std::min<uint64_t>(n, r->nbytes - in);
      const int64_t first = static_cast<int64_t>(in / rb);
      const int64_t end = static_cast<int64_t>((in + take - 1) / rb) + 1;
      for (int64_t b0 = first; b0 < end; b0 += kReadBatch) {
        const int64_t b1 = std::min(end, b0 + kReadBatch);
        keys.clear();
        for (int64_t k = b0; k < b1; ++k) keys.push_back(k);
        values.resize(keys.size() * vb);
        const Status s = store_->Get(keys.data(), keys.size(), values.data(), found.get());
        if (!s.ok())
          return Status(s.code(), StrCat("checkpoint store snapshot ", path_, ": record ", r->key,
                                         ": ", s.message()));
        for (int64_t k = b0; k < b1; ++k) {
          const size_t i = static_cast<size_t>(k - b0);
          if (!found[i])
            return Status::Corrupt("checkpoint store snapshot ", path_, ": record ", r->key,
                                   " row ", k, " is not in the snapshot");
          // This row's bytes of the record, clipped to the bytes asked for.
          const uint64_t lo = std::max<uint64_t>(in, static_cast<uint64_t>(k) * rb);
          const uint64_t hi = std::min<uint64_t>(in + take, static_cast<uint64_t>(k + 1) * rb);
          std::memcpy(dst + (lo - in),
                      values.data() + i * vb + static_cast<size_t>(r->store_offset) +
                          (lo - static_cast<uint64_t>(k) * rb),
                      hi - lo);
        }
      }
      dst += take;
      offset += take;
      n -= take;
    }
    return Status::Ok();
  }

 private:
  std::string path_;
  std::vector<Record> records_;
  std::unique_ptr<store::RowStore> store_;
  uint64_t size_ = 0;
};

}  // namespace

Status DescribeStoreSnapshot(FileSystem& fs, const std::string& path, uint64_t* size,
                             StoreRef* out) {
  std::vector<uint8_t> bytes;
  SR_RETURN_IF_ERROR(ReadManifest(fs, path, &bytes));
  store::Manifest m;
  SR_RETURN_IF_ERROR(
      store::DecodeManifest(bytes.data(), bytes.size(), "store snapshot " + path, &m));
  *size = bytes.size();
  out->identity = m.identity;
  out->value_bytes = m.value_bytes;
  out->manifest_xxh3 = Checksum(bytes.data(), bytes.size());
  return Status::Ok();
}

Status OpenStoreSnapshot(FileSystem& fs, const std::string& path, const FileEntry& e,
                         std::unique_ptr<ReadableFile>* out) {
  if (!fs.native())
    return Status::Unsupported("checkpoint store snapshot ", path,
                               ": snapshots are read from the operating system's files, not "
                               "through this file system");
  std::vector<uint8_t> bytes;
  SR_RETURN_IF_ERROR(ReadManifest(fs, path, &bytes));
  if (bytes.size() != e.size || Checksum(bytes.data(), bytes.size()) != e.store.manifest_xxh3)
    return Status::Corrupt("checkpoint store snapshot ", path, ": its ", kStoreManifestName, " (",
                           bytes.size(), " bytes) does not match the checkpoint's manifest (",
                           e.size, " bytes and its checksum): replaced or damaged");
  store::StoreOptions o;
  o.dir = path;
  o.identity = e.store.identity;
  o.value_bytes = static_cast<size_t>(e.store.value_bytes);
  o.read_only = true;
  // Through the page cache: serving's row cache and a load's chunked reads both reread pages.
  o.direct_io = false;
  std::unique_ptr<store::RowStore> st;
  const Status s = store::OpenRowStore(o, &st);
  if (!s.ok()) {
    const Code code = s.code() == Code::kNotFound ? Code::kCorrupt : s.code();
    return Status(code, StrCat("checkpoint store snapshot ", path, ": ", s.message()));
  }
  *out = std::make_unique<SnapshotFile>(path, e, std::move(st));
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
