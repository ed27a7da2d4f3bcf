// libFuzzer target over table import (shardrec_checkpoint_import_table): the input's first byte
// picks one of four tables of a one-rank collection (fp32 with row-wise Adagrad state, bf16, FP8
// E4M3, and a dynamic table keyed by id) and whether the optimizer state is imported; the rest
// is the safetensors file imported. Such a file comes from outside the library (pretrained
// embeddings) and carries no checksum, so its header and its bytes are all the reader has.
// Checked on every input:
//  - the import returns OK or a documented error (EINVAL, ECORRUPT, ENOTFOUND, EIO) with a
//    message, never EINTERNAL, a crash, a hang or a sanitizer report;
//  - a refused import changes nothing: every table exports the same bytes (weights and state,
//    the dynamic table's ids too) and the dynamic table's stats stay;
//  - an accepted import is a fixed point: the table's export imports again and exports the same
//    bytes.
// After an accepted import the collection is made afresh, so each input starts from the same
// tables. The corpus seeds (tests/fuzz/corpus/table_import) are the four tables' exports with
// their state, as SHARDREC_FUZZ_WRITE_SEED=<dir> writes them.
#include <stdlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shardrec/checkpoint.h"
#include "shardrec/dynamic.h"
#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_files.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using shardrec::fuzz::ScratchDir;
using shardrec::fuzz::Slurp;
using shardrec::fuzz::Spit;

constexpr int kTables = 4;
constexpr const char* kNames[kTables] = {"w", "h", "e", "k"};

struct Fixture {
  shardrec_comm_t* comm = nullptr;
  shardrec_plan_t* plan = nullptr;
  shardrec_embedding_t* coll = nullptr;
  std::string dir;
  std::string baseline[kTables];  // each table's export (with state) of a fresh collection
  shardrec_dynamic_table_stats_t baseline_stats;

  Fixture() {
    dir = ScratchDir("import");  // fuzz_files.h: in memory where there is a tmpfs
    FUZZ_CHECK(shardrec_comm_create_local_group(&comm, 1, nullptr) == SHARDREC_OK);
    const char* fnames[kTables] = {"fw", "fh", "fe", "fk"};
    shardrec::fuzz::OneTablePerFeature cfg(kNames, kTables, fnames);
    shardrec_dynamic_table_config_t dyn;
    shardrec_dynamic_table_config_init(&dyn, SHARDREC_DYNAMIC_TABLE_CONFIG_VERSION);
    const int64_t rows[kTables] = {6, 5, 4, 6};  // k: its capacity
    const int32_t dims[kTables] = {4, 3, 4, 2};
    const int32_t dtypes[kTables] = {SHARDREC_DTYPE_FLOAT32, SHARDREC_DTYPE_BFLOAT16,
                                     SHARDREC_DTYPE_FP8_E4M3, SHARDREC_DTYPE_FLOAT32};
    for (int i = 0; i < kTables; ++i) {
      cfg.table(i).rows = rows[i];
      cfg.table(i).dim = dims[i];
      cfg.table(i).dtype = dtypes[i];
    }
    cfg.table(3).dynamic = &dyn;
    plan = cfg.Plan(SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD);
    Reset();
    // Rows the dynamic table holds before any import (an import adds beside them), and weights
    // of every fixed table other than the init's.
    for (int i = 0; i < 3; ++i) {
      std::vector<float> w(static_cast<size_t>(rows[i] * dims[i]));
      for (size_t j = 0; j < w.size(); ++j) w[j] = static_cast<float>(j % 7) * 0.25f - 0.5f;
      FUZZ_CHECK(shardrec_embedding_set_weights(coll, kNames[i], w.data(), w.size()) ==
                 SHARDREC_OK);
    }
    const std::string seed = dir + "/seed.safetensors";
    for (int i = 0; i < kTables; ++i) {
      FUZZ_CHECK(shardrec_checkpoint_export_table(coll, kNames[i], seed.c_str(), 1) == SHARDREC_OK);
      baseline[i] = Slurp(seed);
    }
    // SHARDREC_FUZZ_WRITE_SEED=<dir> writes the seeds: each table's export behind its byte.
    if (const char* out = std::getenv("SHARDREC_FUZZ_WRITE_SEED")) {
      for (int i = 0; i < kTables; ++i) {
        std::string bytes(1, static_cast<char>(i | 4));
        bytes += baseline[i];
        Spit(std::string(out) + "/export_" + kNames[i],
             reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      }
    }
  }
  ~Fixture() {
    shardrec_embedding_destroy(coll);
    shardrec_plan_destroy(plan);
    shardrec_comm_destroy(comm);
    (void)std::system(("rm -rf '" + dir + "'").c_str());
  }

  // A fresh collection with the baseline's contents.
  void Reset() {
    shardrec_embedding_destroy(coll);
    coll = nullptr;
    FUZZ_CHECK(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr) == SHARDREC_OK);
    // The dynamic table holds three rows: two ids of the forward's batch are admitted (the
    // default admission threshold admits at first sight).
    const int32_t lengths[kTables] = {1, 1, 1, 3};
    const int64_t ids[] = {0, 1, 2, -5, 7, int64_t{1} << 53};
    shardrec::fuzz::TrainOneSample(coll, lengths, kTables, ids, 6);
    if (!baseline[0].empty()) {  // not the first: the fixed tables' weights as the baseline's
      for (int i = 0; i < 3; ++i) {
        const std::string path = dir + "/base_" + kNames[i] + ".safetensors";
        Spit(path, reinterpret_cast<const uint8_t*>(baseline[i].data()), baseline[i].size());
        FUZZ_CHECK(shardrec_checkpoint_import_table(coll, kNames[i], path.c_str(), 1) ==
                   SHARDREC_OK);
      }
    }
    baseline_stats = Stats();
  }

  shardrec_dynamic_table_stats_t Stats() {
    shardrec_dynamic_table_stats_t s;
    FUZZ_CHECK(shardrec_dynamic_table_stats_init(&s, SHARDREC_DYNAMIC_TABLE_STATS_VERSION) ==
               SHARDREC_OK);
    FUZZ_CHECK(shardrec_embedding_dynamic_stats(coll, "k", &s) == SHARDREC_OK);
    return s;
  }

  std::string Export(int table) {
    const std::string path = dir + "/out.safetensors";
    FUZZ_CHECK(shardrec_checkpoint_export_table(coll, kNames[table], path.c_str(), 1) ==
               SHARDREC_OK);
    return Slurp(path);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  const uint8_t choice = size > 0 ? data[0] : 0;
  const int table = choice % kTables;
  const int32_t with_state = (choice >> 2) & 1;
  const std::string path = fx.dir + "/in.safetensors";
  Spit(path, size > 0 ? data + 1 : data, size > 0 ? size - 1 : 0);
  const shardrec_status_t rc =
      shardrec_checkpoint_import_table(fx.coll, kNames[table], path.c_str(), with_state);
  FUZZ_CHECK(rc == SHARDREC_OK || rc == SHARDREC_EINVAL || rc == SHARDREC_ECORRUPT ||
             rc == SHARDREC_ENOTFOUND || rc == SHARDREC_EIO);
  if (rc != SHARDREC_OK) {
    FUZZ_CHECK(std::strlen(shardrec_last_error()) > 0);
    for (int i = 0; i < kTables; ++i) FUZZ_CHECK(fx.Export(i) == fx.baseline[i]);
    const shardrec_dynamic_table_stats_t s = fx.Stats();
    FUZZ_CHECK(s.size == fx.baseline_stats.size &&
               s.total_inserted == fx.baseline_stats.total_inserted &&
               s.total_evicted == fx.baseline_stats.total_evicted);
    return 0;
  }
  // Accepted: the table's export is what it holds now, and importing it changes nothing.
  const std::string once = fx.Export(table);
  const std::string again = fx.dir + "/again.safetensors";
  Spit(again, reinterpret_cast<const uint8_t*>(once.data()), once.size());
  FUZZ_CHECK(shardrec_checkpoint_import_table(fx.coll, kNames[table], again.c_str(), 1) ==
             SHARDREC_OK);
  FUZZ_CHECK(fx.Export(table) == once);
  fx.Reset();
  return 0;
}
