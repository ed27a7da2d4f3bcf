// libFuzzer target over the creation path a new user writes first: fuzzed table (every weight
// dtype, FP8 included), feature, optimizer and topology configs go to shardrec_plan_create, and
// fuzzed collection options, tiered tables among them (shardrec_table_tier_t: a scratch directory
// per input, bad paths, caches of 0, 1, huge and negative bytes), to shardrec_embedding_create
// (world 1). Checked on every input:
//  - no crash, hang or sanitizer report;
//  - every call returns OK or a documented rejection (EINVAL, ENOMEM, EUNSUPPORTED, ENODEVICE,
//    ENOTFOUND; EIO for a tier directory that cannot be made), never EINTERNAL, and a rejection
//    leaves *out untouched;
//  - what was created works: one forward and backward of a valid batch succeed (a tier whose
//    cache cannot hold the batch's rows refuses the forward, then the backward, changing no
//    weight), and the plan survives a JSON round trip with the same hash;
//  - the weight accessors keep their promise with hostile values (NaN, infinities, 1e30,
//    subnormals): set_weights then get_weights gives values that set_weights stores unchanged
//    (so a second round trip keeps every bit), NaN where NaN was set and nowhere else.
// Memory stays bounded by giving the planner a 64 MiB rank: larger tables must be refused by it.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/capi/plan/config_v1.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr int kMaxTables = 4;
constexpr int kMaxFeatures = 5;

bool Documented(shardrec_status_t rc) {
  return rc == SHARDREC_EINVAL || rc == SHARDREC_ENOMEM || rc == SHARDREC_EUNSUPPORTED ||
         rc == SHARDREC_ENODEVICE || rc == SHARDREC_ENOTFOUND;
}

// The scratch directory of one input (tiers' stores), removed when the input is done; it holds
// a regular file, "file", for the tiers whose directory is a file or lies under one.
struct Scratch {
  std::filesystem::path root;
  Scratch() {
    // The process's directory, removed when it exits.
    static const struct Base {
      std::filesystem::path path;
      ~Base() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
      }
    } base{[] {
      std::string tmpl = (std::filesystem::temp_directory_path() / "fuzz_create.XXXXXX").string();
      FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr);
      return std::filesystem::path(tmpl);
    }()};
    static uint64_t run = 0;
    root = base.path / std::to_string(run++);
    std::filesystem::create_directories(root);
    FILE* f = std::fopen((root / "file").c_str(), "w");
    FUZZ_CHECK(f != nullptr);
    std::fclose(f);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
};

// The tiers of an input and the storage their strings point into.
struct Tiers {
  std::vector<shardrec_table_tier_t> tiers;
  std::vector<std::string> dirs;
  bool any = false;  // a tier given: a forward may be refused for the cache
};

// Reads bytes off the fuzz input; past the end it yields zeros (so short inputs are defaults).
struct Reader : shardrec::fuzz::ByteReader {
  // Mostly small valid values, sometimes the edges a careless caller passes.
  int64_t Count(int64_t typical) {
    const uint8_t b = Byte();
    switch (b >> 5) {
      case 0:
        return 0;
      case 1:
        return -static_cast<int64_t>(b & 31) - 1;
      case 2:
        return INT64_MAX - (b & 3);
      case 3:
        return int64_t{1} << (20 + (b & 31));
      default:
        return 1 + (b % typical);
    }
  }
  int32_t Enum(int32_t valid) {
    const uint8_t b = Byte();
    if (b < 224) return static_cast<int32_t>(b % valid);
    return b & 1 ? -1 - (b & 7) : valid + (b & 7);
  }
  float Float(float typical) {
    const uint8_t b = Byte();
    switch (b & 0x0f) {
      case 0:
        return NAN;
      case 1:
        return INFINITY;
      case 2:
        return -1.0f;
      case 3:
        return 0.0f;
      case 4:
        return 1e30f;
      default:
        return typical * static_cast<float>(b >> 4) / 8.0f;
    }
  }
};

const char* kNames[] = {"t0", "t1", "t2", "t3", "t0", "", nullptr};
const char* kFeatureNames[] = {"f0", "f1", "f2", "f3", "f4", "f0", "", nullptr};

shardrec_optimizer_config_t Optimizer(Reader& in) {
  shardrec_optimizer_config_t o;
  FUZZ_CHECK(shardrec_optimizer_config_init(&o, SHARDREC_OPTIMIZER_CONFIG_VERSION) == SHARDREC_OK);
  const uint8_t which = in.Byte();
  o.type = in.Enum(6);
  if (which & 1) o.learning_rate = in.Float(0.1f);
  if (which & 2) o.eps = in.Float(1e-6f);
  if (which & 4) o.beta1 = in.Float(0.9f);
  if (which & 8) o.beta2 = in.Float(0.99f);
  if (which & 16) o.weight_decay = in.Float(0.01f);
  if (which & 32) o.weight_decay_mode = in.Enum(3);
  if (which & 64) o.stochastic_rounding = in.Byte() & 1;
  if (which == 0xff) o.version = 77;
  return o;
}

struct Configs {
  std::vector<shardrec_feature_config_t> features;
  std::vector<shardrec_table_config_t> tables;
  std::vector<std::vector<int32_t>> feature_lists;
  std::vector<std::vector<const char*>> name_lists;
  std::vector<shardrec_optimizer_config_t> optimizers;
  shardrec_topology_t topology;
  // Table-wise for every table, when asked: the planner would make small tables data-parallel,
  // which no tier takes.
  std::vector<shardrec_table_constraints_t> constraints;
  // The tables in the version-1 layout, when they were filled for version 1: a caller built
  // against that header passes an array of the shorter struct.
  std::vector<old_table_config_v1_t> v1_tables;

  const shardrec_table_config_t* TablesArg() {
    if (tables.empty()) return nullptr;
    if (tables[0].version != 1) return tables.data();
    v1_tables.resize(tables.size());
    // Version 1's fields are the prefix of today's struct.
    for (size_t i = 0; i < tables.size(); ++i)
      std::memcpy(&v1_tables[i], &tables[i], sizeof(old_table_config_v1_t));
    return reinterpret_cast<const shardrec_table_config_t*>(v1_tables.data());
  }
};

void Decode(Reader& in, Configs* c) {
  const int num_features = static_cast<int>(in.Byte() % (kMaxFeatures + 1));
  const int num_tables = static_cast<int>(in.Byte() % (kMaxTables + 1));
  c->features.resize(static_cast<size_t>(num_features));
  for (auto& f : c->features) {
    FUZZ_CHECK(shardrec_feature_config_init(&f, SHARDREC_FEATURE_CONFIG_VERSION) == SHARDREC_OK);
    const uint8_t b = in.Byte();
    f.name = kFeatureNames[b % 8];
    if (b & 0x80) f.pooling_factor = in.Float(20.0f);
    if ((b & 0x78) == 0x78) f.version = 9;
  }
  c->tables.resize(static_cast<size_t>(num_tables));
  c->feature_lists.resize(c->tables.size());
  c->name_lists.resize(c->tables.size());
  c->optimizers.resize(c->tables.size());
  for (size_t t = 0; t < c->tables.size(); ++t) {
    shardrec_table_config_t& tc = c->tables[t];
    // Every element of an array has the version of the first (the array's stride); 0xff on
    // any element makes that one claim a version this library does not know.
    const uint8_t version = in.Byte();
    const uint32_t array_version = t == 0 ? (version & 1 ? 1u : 2u) : c->tables[0].version;
    FUZZ_CHECK(shardrec_table_config_init(&tc, array_version == 1 ? 1u : 2u) == SHARDREC_OK);
    if (version == 0xff) tc.version = 3;
    tc.name = kNames[in.Byte() % 7];
    tc.rows = in.Count(300);
    tc.dim = static_cast<int32_t>(in.Count(130));  // INT64_MAX etc. truncate to odd dims
    tc.pooling = in.Enum(3);
    tc.dtype = in.Enum(6);
    // FP8 rows (E4M3, E5M2) from the version byte, so the older corpus keeps its meaning.
    if ((version & 0x06) == 0x06 && version != 0xff)
      tc.dtype = version & 8 ? SHARDREC_DTYPE_FP8_E5M2 : SHARDREC_DTYPE_FP8_E4M3;
    const uint8_t reads = in.Byte();
    const size_t count = reads % 4;
    // The arrays are exactly as long as the counts say (a caller that lies about a length
    // cannot be detected by any C API); bit 7 adds a NULL name or an out-of-range index.
    if (reads & 0x40 && tc.version >= 2) {
      for (size_t k = 0; k < count; ++k) c->name_lists[t].push_back(kFeatureNames[in.Byte() % 8]);
      if (reads & 0x80) c->name_lists[t].push_back(nullptr);
      tc.feature_names = c->name_lists[t].empty() ? nullptr : c->name_lists[t].data();
      tc.num_feature_names = c->name_lists[t].size();
    } else {
      for (size_t k = 0; k < count; ++k)
        c->feature_lists[t].push_back(static_cast<int32_t>(in.Byte() % 8) - 1);
      if (reads & 0x80) c->feature_lists[t].push_back(kMaxFeatures + 3);
      tc.features = c->feature_lists[t].empty() ? nullptr : c->feature_lists[t].data();
      tc.num_features = c->feature_lists[t].size();
      if (tc.features == nullptr && (reads & 0x20)) tc.num_features = 2;  // NULL with a count
    }
    const uint8_t init = in.Byte();
    tc.init_kind = in.Enum(4);
    if (init & 1) tc.init_low = in.Float(-0.5f);
    if (init & 2) tc.init_high = in.Float(0.5f);
    if ((init & 4) && tc.version >= 2) {
      c->optimizers[t] = Optimizer(in);
      tc.optimizer = &c->optimizers[t];
    }
  }
  shardrec_topology_t& topo = c->topology;
  FUZZ_CHECK(shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION) == SHARDREC_OK);
  topo.memory_bytes = uint64_t{64} << 20;
  const uint8_t tb = in.Byte();
  if (tb & 1) topo.world_size = static_cast<int32_t>(in.Count(3));  // the collection needs 1
  if (tb & 2) topo.ranks_per_node = static_cast<int32_t>(in.Count(2));
  if (tb & 4) topo.batch_size = static_cast<int32_t>(in.Count(4096));
  topo.optimizer = in.Enum(6);
  if (tb & 8) topo.reserved_fraction = in.Float(0.5f);
  if (tb & 16) topo.per_id_cost = in.Float(1e-7f);
  if (tb & 32) topo.collective_latency = in.Float(1e-5f);
  if (tb & 64) topo.device_type = in.Enum(2);
  if (tb == 0xff) topo.version = 0;
  if ((tb & 0x80) && tb != 0xff) {
    c->constraints.resize(c->tables.size());
    for (size_t t = 0; t < c->tables.size(); ++t) {
      FUZZ_CHECK(shardrec_table_constraints_init(
                     &c->constraints[t], SHARDREC_TABLE_CONSTRAINTS_VERSION) == SHARDREC_OK);
      c->constraints[t].table = c->tables[t].name;
      c->constraints[t].sharding_types = 1u << SHARDREC_SHARDING_TABLE_WISE;
    }
  }
}

// Tiered tables (options version 5): up to three, naming plan tables, unknown or duplicate
// ones, with directories good or bad and caches from none to huge.
void DecodeTiers(Reader& in, const Scratch& scratch, Tiers* t) {
  const uint8_t b = in.Byte();
  const size_t n = b % 4;
  t->dirs.resize(n);
  t->tiers.resize(n);
  for (size_t i = 0; i < n; ++i) {
    shardrec_table_tier_t& tier = t->tiers[i];
    FUZZ_CHECK(shardrec_table_tier_init(&tier, SHARDREC_TABLE_TIER_VERSION) == SHARDREC_OK);
    tier.table = kNames[in.Byte() % 7];
    const uint8_t d = in.Byte();
    switch (d % 8) {
      case 0:
      case 1:
        t->dirs[i] = (scratch.root / ("tier" + std::to_string(i))).string();
        break;
      case 2:
        t->dirs[i] = scratch.root.string();  // shared by every tier that picks it
        break;
      case 3:
        t->dirs[i] = (scratch.root / "file").string();  // a regular file
        break;
      case 4:
        t->dirs[i] = (scratch.root / "file" / "sub").string();  // under a file
        break;
      case 5:
        t->dirs[i] = (scratch.root / std::string(300, 'd') / std::string(300, 'e')).string();
        break;
      case 6:
        t->dirs[i] = "/proc/shardrec-fuzz";  // cannot be made
        break;
      default:
        t->dirs[i] = "";
        break;
    }
    tier.dir = (d & 0x80) && (d % 8) == 7 ? nullptr : t->dirs[i].c_str();
    switch (in.Byte() % 8) {
      case 0:
        tier.cache_bytes = 0;
        break;
      case 1:
        tier.cache_bytes = 1;
        break;
      case 2:
        tier.cache_bytes = INT64_MAX;
        break;
      case 3:
        tier.cache_bytes = -4096;
        break;
      case 4:
        tier.cache_bytes = int64_t{1} << 40;  // more than the machine: capped at the rows
        break;
      default:
        tier.cache_bytes = int64_t{256} << (in.Byte() % 12);  // 256 B .. 512 KiB
        break;
    }
    if ((d & 0x70) == 0x70) tier.version = 2;
  }
  t->any = n > 0;
}

shardrec_embedding_options_t Options(Reader& in, const Scratch& scratch, Tiers* tiers) {
  shardrec_embedding_options_t o;
  const uint8_t v = in.Byte();
  const uint32_t version = 1 + v % SHARDREC_EMBEDDING_OPTIONS_VERSION;
  FUZZ_CHECK(shardrec_embedding_options_init(&o, version) == SHARDREC_OK);
  if (v & 0x10) o.bounds_policy = in.Enum(3);
  if (v & 0x20) o.num_threads = static_cast<int32_t>(in.Count(3));
  if (v & 0x40) o.device_type = in.Enum(2);
  if (version >= 2) {
    o.non_finite = in.Enum(2);
    o.table_memory = in.Enum(2);
  }
  if (version >= 3) {
    o.forward_comm_encoding = in.Enum(3);
    o.backward_comm_encoding = in.Enum(3);
  }
  if (version >= 4) {
    // Capacity hints: small ones, negative ones (rejected), huge ones (ignored on the host).
    o.max_batch_size = in.Count(8);
    o.max_ids_per_batch = in.Count(64);
  }
  if (version >= 5) {
    DecodeTiers(in, scratch, tiers);
    o.tiers = tiers->tiers.empty() ? nullptr : tiers->tiers.data();
    o.num_tiers = tiers->tiers.size();
    if (tiers->tiers.empty() && (v & 0x80)) o.num_tiers = 2;  // NULL with a count
  }
  if (v == 0xff) o.version = 99;
  return o;
}

// A valid batch for whatever features the plan has: ids inside each feature's table. With
// tiers the cache may be too small for the batch's rows: then the forward is refused, the
// backward too, and no weight changes.
void TrainOnce(shardrec_embedding_t* coll, shardrec_plan_t* plan, bool tiered, Reader& in) {
  size_t num_features = 0, num_tables = 0;
  FUZZ_CHECK(shardrec_plan_num_features(plan, &num_features) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_plan_num_tables(plan, &num_tables) == SHARDREC_OK);
  int64_t min_rows = INT64_MAX;
  for (size_t t = 0; t < num_tables; ++t) {
    int64_t rows = 0;
    FUZZ_CHECK(shardrec_plan_table_rows(plan, t, &rows) == SHARDREC_OK && rows > 0);
    if (rows < min_rows) min_rows = rows;
  }
  const int64_t batch = 1 + in.Byte() % 4;
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  for (size_t f = 0; f < num_features; ++f) {
    for (int64_t s = 0; s < batch; ++s) {
      const int32_t len = in.Byte() % 4;
      lengths.push_back(len);
      for (int32_t k = 0; k < len; ++k) ids.push_back(in.Byte() % min_rows);
    }
  }
  shardrec_kjt_view_t view = SHARDREC_KJT_VIEW_INIT;
  view.batch_size = batch;
  view.num_features = num_features;
  view.lengths = lengths.data();
  view.num_lengths = lengths.size();
  view.values = ids.empty() ? nullptr : ids.data();
  view.values_dtype = SHARDREC_DTYPE_INT64;
  view.num_values = ids.size();
  int64_t dim = 0;
  FUZZ_CHECK(shardrec_embedding_output_dim(coll, &dim) == SHARDREC_OK);
  int32_t sequence = 0;
  FUZZ_CHECK(shardrec_embedding_is_sequence(coll, &sequence) == SHARDREC_OK);
  const size_t rows = sequence ? ids.size() : static_cast<size_t>(batch);
  std::vector<float> out(rows * static_cast<size_t>(dim));
  const char* table0 = nullptr;
  int64_t rows0 = 0;
  int32_t dim0 = 0;
  FUZZ_CHECK(shardrec_plan_table_name(plan, 0, &table0) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_plan_table_rows(plan, 0, &rows0) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_plan_table_dim(plan, 0, &dim0) == SHARDREC_OK);
  // The 64 MiB rank bounds rows x dim; a copy of table 0 is read only when it is small.
  const size_t weights0 = static_cast<size_t>(rows0) * static_cast<size_t>(dim0);
  const bool small0 = weights0 <= (size_t{1} << 16);
  std::vector<float> before(small0 ? weights0 : 0);
  if (small0)
    FUZZ_CHECK(shardrec_embedding_get_weights(coll, table0, before.data(), before.size()) ==
               SHARDREC_OK);
  const shardrec_status_t rc =
      shardrec_embedding_forward(coll, &view, out.data(), out.size(), nullptr);
  std::vector<float> grad(out.size(), 0.01f);
  if (rc != SHARDREC_OK) {
    FUZZ_CHECK(tiered && rc == SHARDREC_EINVAL && std::strlen(shardrec_last_error()) > 0);
    FUZZ_CHECK(shardrec_embedding_backward(coll, grad.data(), grad.size(), nullptr) ==
               SHARDREC_EUSAGE);
    std::vector<float> after(before.size());
    if (small0)
      FUZZ_CHECK(shardrec_embedding_get_weights(coll, table0, after.data(), after.size()) ==
                 SHARDREC_OK);
    FUZZ_CHECK(before.empty() || std::memcmp(before.data(), after.data(), before.size() * 4) == 0);
  } else {
    FUZZ_CHECK(shardrec_embedding_backward(coll, grad.data(), grad.size(), nullptr) == SHARDREC_OK);
  }
  if (!small0) return;
  // Hostile weights through the accessors: whatever set_weights stores, get_weights returns
  // values that it stores unchanged (every dtype rounds its own values to themselves).
  std::vector<float> w(weights0);
  for (auto& x : w) {
    const uint8_t b = in.Byte();
    switch (b & 7) {
      case 0:
        x = NAN;
        break;
      case 1:
        x = (b & 8) ? INFINITY : -INFINITY;
        break;
      case 2:
        x = (b & 8) ? 1e30f : -3e38f;
        break;
      case 3:
        x = (b & 8) ? 1e-45f : -1e-40f;  // subnormals
        break;
      default:
        x = static_cast<float>(static_cast<int8_t>(b)) / 8.0f;
        break;
    }
  }
  FUZZ_CHECK(shardrec_embedding_set_weights(coll, table0, w.data(), w.size()) == SHARDREC_OK);
  std::vector<float> got(w.size()), again(w.size());
  FUZZ_CHECK(shardrec_embedding_get_weights(coll, table0, got.data(), got.size()) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_embedding_set_weights(coll, table0, got.data(), got.size()) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_embedding_get_weights(coll, table0, again.data(), again.size()) ==
             SHARDREC_OK);
  FUZZ_CHECK(std::memcmp(got.data(), again.data(), got.size() * 4) == 0);
  for (size_t i = 0; i < w.size(); ++i) {
    // A NaN stays NaN in every dtype; a finite value stays finite except where a 16-bit
    // dtype overflows.
    FUZZ_CHECK(std::isnan(w[i]) == std::isnan(got[i]));
  }
}

shardrec_comm_t* Comm() {
  static shardrec_comm_t* comm = [] {
    shardrec_comm_t* c[1] = {nullptr};
    FUZZ_CHECK(shardrec_comm_create_local_group(c, 1, nullptr) == SHARDREC_OK);
    return c[0];
  }();
  return comm;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader in{{data, size}};
  Configs c;
  Decode(in, &c);
  shardrec_plan_t* sentinel = reinterpret_cast<shardrec_plan_t*>(&c);
  shardrec_plan_t* plan = sentinel;
  shardrec_status_t rc = shardrec_plan_create(
      &plan, c.TablesArg(), c.tables.size(), c.features.empty() ? nullptr : c.features.data(),
      c.features.size(), &c.topology, c.constraints.empty() ? nullptr : c.constraints.data(),
      c.constraints.size());
  if (rc != SHARDREC_OK) {
    FUZZ_CHECK(Documented(rc));
    FUZZ_CHECK(plan == sentinel);
    FUZZ_CHECK(std::strlen(shardrec_last_error()) > 0);
    return 0;
  }
  // The plan survives its own JSON: same hash.
  char* text = nullptr;
  size_t len = 0;
  FUZZ_CHECK(shardrec_plan_to_json(plan, &text, &len) == SHARDREC_OK);
  shardrec_plan_t* again = nullptr;
  FUZZ_CHECK(shardrec_plan_from_json(&again, text, len) == SHARDREC_OK);
  shardrec_free(text);
  uint64_t h1 = 0, h2 = 0;
  FUZZ_CHECK(shardrec_plan_hash(plan, &h1) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_plan_hash(again, &h2) == SHARDREC_OK && h1 == h2);
  shardrec_plan_destroy(again);

  const uint8_t which = in.Byte();
  shardrec_optimizer_config_t opt = Optimizer(in);
  const Scratch scratch;
  Tiers tiers;
  shardrec_embedding_options_t options = Options(in, scratch, &tiers);
  shardrec_embedding_t* coll_sentinel = reinterpret_cast<shardrec_embedding_t*>(&options);
  shardrec_embedding_t* coll = coll_sentinel;
  rc = shardrec_embedding_create(&coll, plan, Comm(), which & 1 ? &opt : nullptr,
                                 which & 2 ? &options : nullptr);
  if (rc != SHARDREC_OK) {
    FUZZ_CHECK(Documented(rc) || (tiers.any && rc == SHARDREC_EIO));
    FUZZ_CHECK(coll == coll_sentinel);
    FUZZ_CHECK(std::strlen(shardrec_last_error()) > 0);
  } else {
    TrainOnce(coll, plan, tiers.any && (which & 2), in);
    shardrec_embedding_destroy(coll);
  }
  shardrec_plan_destroy(plan);
  return 0;
}
