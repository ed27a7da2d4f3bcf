// libFuzzer target over checkpoint loading (shardrec_checkpoint_load): the input replaces the
// manifest of a valid one-rank checkpoint (whose rank file stays in place), and any manifest
// gives OK or a clear error (never EINTERNAL, a crash or a sanitizer report). The corpus seed is
// the manifest this target saves itself (tests/fuzz/corpus/checkpoint_manifest). That seed was
// written before manifests carried manifest_xxh3, and a manifest without the member is read as it
// is, so the mutations reach the parser behind the checksum instead of stopping at it; keep it
// so when refreshing the seed (drop the member's line).
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

struct Fixture {
  shardrec_comm_t* comm = nullptr;
  shardrec_plan_t* plan = nullptr;
  shardrec_embedding_t* coll = nullptr;
  std::string dir;

  Fixture() {
    char tmpl[] = "/tmp/shardrec_fuzz_ckpt_XXXXXX";
    FUZZ_CHECK(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    FUZZ_CHECK(shardrec_comm_create_local_group(&comm, 1, nullptr) == SHARDREC_OK);
    shardrec_feature_config_t f;
    shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION);
    f.name = "f";
    const int32_t features[] = {0};
    shardrec_table_config_t t[2];
    const char* names[] = {"a", "b"};
    for (int i = 0; i < 2; ++i) {
      shardrec_table_config_init(&t[i], SHARDREC_TABLE_CONFIG_VERSION);
      t[i].name = names[i];
      t[i].rows = 20 + i;
      t[i].dim = 4;
      t[i].features = features;
      t[i].num_features = 1;
    }
    t[1].dtype = SHARDREC_DTYPE_BFLOAT16;
    shardrec_topology_t topo;
    shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
    topo.world_size = 1;
    topo.optimizer = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
    FUZZ_CHECK(shardrec_plan_create(&plan, t, 2, &f, 1, &topo, nullptr, 0) == SHARDREC_OK);
    FUZZ_CHECK(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr) == SHARDREC_OK);
    float dense[3] = {1, 2, 3};
    shardrec_dense_tensor_t d = {"d", dense, 3};
    shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
    o.dense = &d;
    o.num_dense = 1;
    FUZZ_CHECK(shardrec_checkpoint_save(coll, dir.c_str(), &o) == SHARDREC_OK);
    // SHARDREC_FUZZ_WRITE_SEED=<path> copies the valid manifest out (to refresh the corpus).
    if (const char* seed = std::getenv("SHARDREC_FUZZ_WRITE_SEED")) {
      std::FILE* in = std::fopen((dir + "/manifest.json").c_str(), "rb");
      std::FILE* out = std::fopen(seed, "wb");
      FUZZ_CHECK(in && out);
      char buf[4096];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof(buf), in)) > 0) std::fwrite(buf, 1, n, out);
      std::fclose(in);
      std::fclose(out);
    }
  }
  ~Fixture() {
    shardrec_embedding_destroy(coll);
    shardrec_plan_destroy(plan);
    shardrec_comm_destroy(comm);
    (void)std::system(("rm -rf '" + dir + "'").c_str());
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fx;
  {
    std::FILE* f = std::fopen((fx.dir + "/manifest.json").c_str(), "wb");
    FUZZ_CHECK(f != nullptr);
    FUZZ_CHECK(std::fwrite(data, 1, size, f) == size);
    std::fclose(f);
  }
  float dense[3] = {0, 0, 0};
  shardrec_dense_tensor_t d = {"d", dense, 3};
  shardrec_checkpoint_options_t o = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  o.dense = &d;
  o.num_dense = 1;
  o.verify_first = size % 2;
  o.allow_dtype_change = (size / 2) % 2;
  const shardrec_status_t rc = shardrec_checkpoint_load(fx.coll, fx.dir.c_str(), &o);
  FUZZ_CHECK(rc == SHARDREC_OK || rc == SHARDREC_ECORRUPT || rc == SHARDREC_EINVAL ||
             rc == SHARDREC_ENOTFOUND || rc == SHARDREC_EUNSUPPORTED || rc == SHARDREC_EIO);
  if (rc != SHARDREC_OK) FUZZ_CHECK(std::strlen(shardrec_last_error()) > 0);
  return 0;
}
