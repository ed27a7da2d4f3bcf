// libFuzzer target over the disk store's readers (impl/store/format.h): the manifest decoder, the
// segment-header decoder, and a whole store directory (a fuzzed MANIFEST beside a fuzzed segment
// file) opened read-only, scanned and read. Bits of the first byte re-seal the manifest's and the
// header's checksums, so the fuzzer gets past them to the structure behind. Every input must
// end in a status, never a crash, a hang or a read out of bounds. Input: a mode byte, the
// manifest's length (4 bytes), the MANIFEST, then the segment file. The seeds
// (tests/fuzz/corpus/store_format) are one store made by OpenRowStore (identity "fuzz", 40-byte
// records, 8 keys put and one erased, flushed), in modes 0, 4 and 7.
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "impl/store/format.h"
#include "impl/store/row_store.h"

namespace {

using namespace shardrec::store;

constexpr char kIdentity[] = "fuzz";
constexpr size_t kValueBytes = 40;

// Never destroyed (the exit handler removing it runs after static destructors).
const std::string& Dir() {
  static const std::string* dir = [] {
    char tmpl[] = "/tmp/fuzz_store_XXXXXX";
    const char* d = mkdtemp(tmpl);
    auto* made = new std::string(d ? d : "");
    std::atexit([] {
      if (Dir().empty()) return;
      std::error_code ec;
      std::filesystem::remove_all(Dir(), ec);
    });
    return made;
  }();
  return *dir;
}

void WriteFile(const std::string& path, const uint8_t* p, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  const uint8_t mode = data[0];
  uint32_t manifest_len = 0;
  std::memcpy(&manifest_len, data + 1, 4);
  data += 5;
  size -= 5;
  manifest_len = static_cast<uint32_t>(std::min<size_t>(manifest_len, size));
  std::vector<uint8_t> manifest(data, data + manifest_len);
  std::vector<uint8_t> segment(data + manifest_len, data + size);

  if ((mode & 1) && manifest.size() >= 16) {
    const uint64_t sum =
        XXH3_64bits_withSeed(manifest.data(), manifest.size() - 8, IdentityHash(kIdentity));
    std::memcpy(manifest.data() + manifest.size() - 8, &sum, 8);
  }
  if ((mode & 2) && segment.size() >= kPageBytes) {
    const uint64_t sum = XXH3_64bits(segment.data(), kPageBytes - 8);
    std::memcpy(segment.data() + kPageBytes - 8, &sum, 8);
  }

  Manifest m;
  (void)DecodeManifest(manifest.data(), manifest.size(), "fuzz", &m);
  SegmentHeader h;
  (void)DecodeSegmentHeader(segment.data(), segment.size(), "fuzz", &h);
  if (segment.size() >= kPageBytes + kValueBytes + kRecordOverhead) {
    int64_t key = 0;
    (void)DecodeRecord(IdentityHash(kIdentity), 1, 0, segment.data() + kPageBytes, kValueBytes,
                       &key);
  }
  if ((mode & 4) == 0) return 0;

  // The store: read-only, so the fuzzed files are never rewritten or removed by the open.
  const std::string& dir = Dir();
  if (dir.empty()) return 0;
  WriteFile(dir + "/MANIFEST", manifest.data(), manifest.size());
  WriteFile(dir + "/seg-00000001.dat", segment.data(), segment.size());
  StoreOptions o;
  o.dir = dir;
  o.identity = kIdentity;
  o.value_bytes = kValueBytes;
  o.read_only = true;
  o.direct_io = false;
  o.queue_depth = 4;
  std::unique_ptr<RowStore> store;
  if (!OpenRowStore(o, &store).ok()) return 0;
  int64_t cursor = 0;
  std::vector<int64_t> keys;
  std::vector<uint8_t> values;
  for (int calls = 0; cursor != -1 && calls < 64; ++calls) {
    if (!store->Scan(&cursor, 16, &keys, &values).ok()) break;
  }
  int64_t probe[8] = {0, 1, 2, 3, -1, 100, INT64_MIN, INT64_MAX};
  std::vector<uint8_t> out(8 * kValueBytes);
  bool found[8];
  (void)store->Get(probe, 8, out.data(), found);
  (void)store->stats();
  return 0;
}
