// libFuzzer target over deltas applied to an inference handle (shardrec_inference_apply_delta_ext):
// a delta may come over a network from a trainer, so its table name, flags, ids (repeated, out
// of range, the int64 extremes), rows (NaN, infinities, values beyond fp16, bf16 or fp32 ranges,
// subnormals) and tombstones are fuzzed, against a handle opened from a small checkpoint whose
// tables are served as fp32, int8, int4, FP8 E4M3, bf16 and fp16, plus a dynamic fp32 and a
// dynamic int8 table. Checked on every input:
//  - the apply returns OK, EINVAL or ENOTFOUND with a message, never anything else, a crash or a
//    sanitizer report;
//  - a refused delta changes nothing: the version, each table's rows and every probed row (each
//    row of a fixed table, the pool's ids of a dynamic one) read the same bits;
//  - an accepted delta makes one version, and its fp32 tables then read the rows it gave exactly
//    (tombstoned ids, and with SHARDREC_DELTA_FULL every id it did not give, read zeros), and
//    the new version saves as a serving file that opens again and reads the same bits.
// After an accepted delta the handle is opened afresh, so each input starts from the same model.
#include <stdlib.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_files.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using shardrec::fuzz::ScratchDir;

constexpr int kTables = 8;
constexpr const char* kNames[kTables] = {"f32", "i8", "i4", "e4", "bf", "hf", "dyn", "dq"};
constexpr bool kDynamic[kTables] = {false, false, false, false, false, false, true, true};
constexpr int64_t kPool[] = {0,
                             1,
                             2,
                             3,
                             5,
                             -1,
                             -9,
                             100,
                             int64_t{1} << 40,
                             std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max()};
constexpr size_t kPoolSize = sizeof(kPool) / sizeof(kPool[0]);

struct Reader : shardrec::fuzz::ByteReader {
  int64_t Id() { return kPool[Byte() % kPoolSize]; }
  float Float() {
    static const float kEdge[] = {NAN,     INFINITY, -INFINITY, 65504.0f, 65520.0f, -7e4f,
                                  3.4e38f, -3.4e38f, 1e-40f,    448.0f,   500.0f,   57344.0f,
                                  1e38f,   -1e38f,   0.0f,      -0.0f};
    const uint8_t b = Byte();
    if (b >= 0xf0) return kEdge[b & 0x0f];
    return static_cast<float>(static_cast<int8_t>(Byte())) / 8.0f;
  }
};

struct Fixture {
  std::string dir, ckpt;
  shardrec_inference_t* inf = nullptr;
  int32_t dims[kTables] = {};
  int64_t offsets[kTables] = {};  // each table's columns in the output (feature i reads table i)
  int64_t output_dim = 0;

  Fixture() {
    dir = ScratchDir("delta");  // fuzz_files.h: in memory where there is a tmpfs
    ckpt = dir + "/ckpt";
    shardrec_comm_t* comm = nullptr;
    FUZZ_CHECK(shardrec_comm_create_local_group(&comm, 1, nullptr) == SHARDREC_OK);
    shardrec::fuzz::OneTablePerFeature cfg(kNames, kTables);
    shardrec_dynamic_table_config_t dyn;
    shardrec_dynamic_table_config_init(&dyn, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
    for (int i = 0; i < kTables; ++i) {
      cfg.table(i).rows = kDynamic[i] ? 8 : 3 + i % 4;
      cfg.table(i).dim = 2 + i % 3;
      if (kDynamic[i]) cfg.table(i).dynamic = &dyn;
    }
    cfg.table(1).pooling = SHARDREC_POOLING_MEAN;
    cfg.table(3).dtype = SHARDREC_DTYPE_FP8_E4M3;
    shardrec_plan_t* plan = cfg.Plan();
    shardrec_embedding_t* coll = nullptr;
    FUZZ_CHECK(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr) == SHARDREC_OK);
    // Each dynamic table admits three ids of the pool in one forward.
    std::vector<int32_t> lengths(kTables, 1);
    lengths[6] = lengths[7] = 3;
    std::vector<int64_t> ids = {0, 1, 2, 0, 1, 2, -1, 5, int64_t{1} << 40, 0, 100, -9};
    shardrec::fuzz::TrainOneSample(coll, lengths.data(), kTables, ids.data(), ids.size(), 0.25f);
    FUZZ_CHECK(shardrec_embedding_output_dim(coll, &output_dim) == SHARDREC_OK);
    FUZZ_CHECK(shardrec_checkpoint_save(coll, ckpt.c_str(), nullptr) == SHARDREC_OK);
    shardrec_embedding_destroy(coll);
    shardrec_plan_destroy(plan);
    shardrec_comm_destroy(comm);
    for (int i = 0; i < kTables; ++i) {
      dims[i] = cfg.table(i).dim;
      offsets[i] = i == 0 ? 0 : offsets[i - 1] + dims[i - 1];
    }
    Reopen();
  }
  ~Fixture() {
    shardrec_inference_destroy(inf);
    (void)std::system(("rm -rf '" + dir + "'").c_str());
  }

  void Reopen() {
    shardrec_inference_destroy(inf);
    inf = nullptr;
    static const int32_t storage[kTables] = {SHARDREC_SERVING_FP32, SHARDREC_SERVING_INT8,
                                             SHARDREC_SERVING_INT4, SHARDREC_SERVING_AS_TRAINED,
                                             SHARDREC_SERVING_BF16, SHARDREC_SERVING_FP16,
                                             SHARDREC_SERVING_FP32, SHARDREC_SERVING_INT8};
    shardrec_table_storage_t ts[kTables];
    for (int i = 0; i < kTables; ++i) {
      ts[i] = SHARDREC_TABLE_STORAGE_INIT;
      ts[i].table = kNames[i];
      ts[i].storage = storage[i];
    }
    shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
    o.table_storage = ts;
    o.num_table_storage = kTables;
    FUZZ_CHECK(shardrec_inference_open(ckpt.c_str(), &o, &inf) == SHARDREC_OK);
  }

  int64_t Rows(int table, const shardrec_inference_t* h = nullptr) const {
    int64_t rows = 0;
    FUZZ_CHECK(shardrec_inference_table_info(h ? h : inf, static_cast<size_t>(table), nullptr,
                                             &rows, nullptr, nullptr) == SHARDREC_OK);
    return rows;
  }

  // The row table `table` reads for `id` (a one-id bag of its feature; a MEAN of one id is it).
  std::vector<float> Row(int table, int64_t id, const shardrec_inference_t* h = nullptr) const {
    std::vector<int32_t> lengths(kTables, 0);
    lengths[static_cast<size_t>(table)] = 1;
    shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
    v.batch_size = 1;
    v.num_features = kTables;
    v.lengths = lengths.data();
    v.num_lengths = lengths.size();
    v.values = &id;
    v.values_dtype = SHARDREC_DTYPE_INT64;
    v.num_values = 1;
    std::vector<float> out(static_cast<size_t>(output_dim));
    FUZZ_CHECK(shardrec_inference_lookup(h ? h : inf, &v, out.data(), out.size(), nullptr) ==
               SHARDREC_OK);
    return std::vector<float>(out.begin() + offsets[table],
                              out.begin() + offsets[table] + dims[table]);
  }

  // Every table's rows count and probed rows, as bits.
  std::vector<uint32_t> Probe(const shardrec_inference_t* h = nullptr) const {
    std::vector<uint32_t> bits;
    for (int t = 0; t < kTables; ++t) {
      const int64_t rows = Rows(t, h);
      bits.push_back(static_cast<uint32_t>(rows));
      auto add = [&](int64_t id) {
        for (float x : Row(t, id, h)) {
          uint32_t b;
          std::memcpy(&b, &x, 4);
          bits.push_back(b);
        }
      };
      if (kDynamic[t]) {
        for (int64_t id : kPool) add(id);
      } else {
        for (int64_t id = 0; id < rows; ++id) add(id);
      }
    }
    return bits;
  }
};

// Equal values (a SUM of one id reads -0 as +0; the rows compared are finite).
bool SameValues(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  Reader in{{data, size}};
  const uint8_t pick = in.Byte();
  const int table = pick % kTables;
  const char* name = (pick & 0xf8) == 0xf8 ? "nope" : kNames[table];
  const uint8_t fb = in.Byte();
  uint32_t flags = (fb & 1) ? SHARDREC_DELTA_FULL : 0;
  if ((fb & 0xe0) == 0xe0) flags |= 1u << (1 + fb % 31);  // a bit no release defines
  const size_t n = in.Byte() % 6;
  std::vector<int64_t> ids(n);
  for (int64_t& id : ids) id = in.Id();
  std::vector<float> rows(n * static_cast<size_t>(fx.dims[table]));
  for (float& x : rows) x = in.Float();
  std::vector<int64_t> tomb(in.Byte() % 3);
  for (int64_t& id : tomb) id = in.Id();
  const uint8_t nulls = in.Byte();
  const int64_t* ids_p = (nulls & 0x0f) == 0x0f ? nullptr : ids.data();
  const float* rows_p = (nulls & 0xf0) == 0xf0 ? nullptr : rows.data();

  uint64_t before = 0, after = 0, reported = 0;
  FUZZ_CHECK(shardrec_inference_version(fx.inf, &before) == SHARDREC_OK);
  const std::vector<uint32_t> probe = fx.Probe();
  const shardrec_status_t rc = shardrec_inference_apply_delta_ext(
      fx.inf, name, ids_p, rows_p, n, tomb.empty() ? nullptr : tomb.data(), tomb.size(), flags,
      &reported);
  FUZZ_CHECK(rc == SHARDREC_OK || rc == SHARDREC_EINVAL || rc == SHARDREC_ENOTFOUND);
  FUZZ_CHECK(rc == SHARDREC_OK || std::strlen(shardrec_last_error()) > 0);
  FUZZ_CHECK(shardrec_inference_version(fx.inf, &after) == SHARDREC_OK);
  if (rc != SHARDREC_OK) {
    FUZZ_CHECK(after == before);
    FUZZ_CHECK(fx.Probe() == probe);
    return 0;
  }
  FUZZ_CHECK(after == before + 1 && reported == after);
  const bool fp32 =
      std::strcmp(kNames[table], "f32") == 0 || std::strcmp(kNames[table], "dyn") == 0;
  if (fp32) {
    const size_t dim = static_cast<size_t>(fx.dims[table]);
    const std::vector<float> zeros(dim, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      const std::vector<float> want(rows.begin() + static_cast<int64_t>(i * dim),
                                    rows.begin() + static_cast<int64_t>((i + 1) * dim));
      FUZZ_CHECK(SameValues(fx.Row(table, ids[i]), want));
    }
    if (kDynamic[table]) {
      for (int64_t id : tomb) FUZZ_CHECK(SameValues(fx.Row(table, id), zeros));
      if (flags & SHARDREC_DELTA_FULL) {
        FUZZ_CHECK(fx.Rows(table) == static_cast<int64_t>(n));
        for (int64_t id : kPool) {
          bool given = false;
          for (int64_t g : ids) given = given || g == id;
          if (!given) FUZZ_CHECK(SameValues(fx.Row(table, id), zeros));
        }
      }
    }
  }
  // The new version saves as a serving file that opens again and reads the same bits.
  const std::string saved = fx.dir + "/saved.srserve";
  FUZZ_CHECK(shardrec_inference_save(fx.inf, saved.c_str()) == SHARDREC_OK);
  shardrec_inference_t* reopened = nullptr;
  FUZZ_CHECK(shardrec_inference_open(saved.c_str(), nullptr, &reopened) == SHARDREC_OK);
  FUZZ_CHECK(fx.Probe(reopened) == fx.Probe());
  shardrec_inference_destroy(reopened);
  fx.Reopen();
  return 0;
}
