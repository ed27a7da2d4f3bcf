// libFuzzer target over inference requests: a fuzzed KJT (sizes, lengths that do not add up,
// negative and huge ids, NaN/Inf weights, int32 or int64 ids, wrong feature counts and output
// sizes) goes to one of three handles opened from a small checkpoint (fp32 + int4 with the ERROR
// bounds policy, int8 with CLAMP, bf16 with SKIP). Checked on every input:
//  - no crash, hang or sanitizer report;
//  - every lookup returns OK or SHARDREC_EINVAL (never anything else), and a plain lookup is
//    refused exactly when the request breaks a documented rule (MustRefuse);
//  - an accepted request answers the same bits through a pinned snapshot, and finite weights give
//    finite outputs.
// A flags byte with its top bit set makes the request a VBE view instead (fuzzed batch sizes per
// feature, some negative or huge, lengths that may not add up, inverse indices in or out of
// range, a wrong view version): the VBE lookup also returns OK or SHARDREC_EINVAL only, writes
// nothing when it refuses, agrees with its output length and its snapshot, and with inverse
// indices equals the plain lookup of the expanded batch bit for bit.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr int kFeatures = 3;

struct Handles {
  shardrec_inference_t* inf[3] = {nullptr, nullptr, nullptr};
};

// A world-1 collection of two tables (MEAN "small" 5 x 4 read by features a and c, SUM "wide"
// 40 x 8 read by b), saved once; the handles are opened from it.
Handles* Setup() {
  shardrec_comm_t* comm = nullptr;
  FUZZ_CHECK(shardrec_comm_create_local_group(&comm, 1, nullptr) == SHARDREC_OK);
  const char* fnames[kFeatures] = {"a", "b", "c"};
  shardrec_feature_config_t features[kFeatures];
  for (int f = 0; f < kFeatures; ++f) {
    shardrec_feature_config_init(&features[f], SHARDREC_FEATURE_CONFIG_VERSION);
    features[f].name = fnames[f];
  }
  const int32_t small_features[] = {0, 2};
  const int32_t wide_features[] = {1};
  shardrec_table_config_t tables[2];
  for (auto& t : tables) shardrec_table_config_init(&t, SHARDREC_TABLE_CONFIG_VERSION);
  tables[0].name = "small";
  tables[0].rows = 5;
  tables[0].dim = 4;
  tables[0].pooling = SHARDREC_POOLING_MEAN;
  tables[0].features = small_features;
  tables[0].num_features = 2;
  tables[1].name = "wide";
  tables[1].rows = 40;
  tables[1].dim = 8;
  tables[1].features = wide_features;
  tables[1].num_features = 1;
  shardrec_topology_t topo;
  shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION);
  topo.world_size = 1;
  shardrec_plan_t* plan = nullptr;
  FUZZ_CHECK(shardrec_plan_create(&plan, tables, 2, features, kFeatures, &topo, nullptr, 0) ==
             SHARDREC_OK);
  shardrec_embedding_t* coll = nullptr;
  FUZZ_CHECK(shardrec_embedding_create(&coll, plan, comm, nullptr, nullptr) == SHARDREC_OK);
  char dir[] = "/tmp/shardrec_fuzz_inference_XXXXXX";
  FUZZ_CHECK(::mkdtemp(dir) != nullptr);
  FUZZ_CHECK(shardrec_checkpoint_save(coll, dir, nullptr) == SHARDREC_OK);
  shardrec_embedding_destroy(coll);
  shardrec_plan_destroy(plan);
  shardrec_comm_destroy(comm);
  auto* h = new Handles;
  shardrec_table_storage_t wide_int4 = SHARDREC_TABLE_STORAGE_INIT;
  wide_int4.table = "wide";
  wide_int4.storage = SHARDREC_SERVING_INT4;
  const int32_t storage[3] = {SHARDREC_SERVING_FP32, SHARDREC_SERVING_INT8, SHARDREC_SERVING_BF16};
  const int32_t bounds[3] = {SHARDREC_BOUNDS_ERROR, SHARDREC_BOUNDS_CLAMP, SHARDREC_BOUNDS_SKIP};
  for (int i = 0; i < 3; ++i) {
    shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
    o.default_storage = storage[i];
    o.bounds_policy = bounds[i];
    if (i == 0) {
      o.table_storage = &wide_int4;
      o.num_table_storage = 1;
    }
    FUZZ_CHECK(shardrec_inference_open(dir, &o, &h->inf[i]) == SHARDREC_OK);
  }
  const std::string rm = std::string("rm -rf '") + dir + "'";
  FUZZ_CHECK(std::system(rm.c_str()) == 0);  // the handles hold their own copies
  return h;
}

struct Reader : shardrec::fuzz::ByteReader {
  int32_t Small() { return static_cast<int8_t>(Byte()); }
  float Float() {
    const uint8_t b = Byte();
    if ((b & 0x0f) == 0) return NAN;
    if ((b & 0x0f) == 1) return -INFINITY;
    return static_cast<float>(static_cast<int8_t>(Byte())) / 8.0f;
  }
};

// The VBE request that the rest of the input describes, run through the VBE lookups.
int FuzzVbe(shardrec_inference_t* inf, Reader& in, uint8_t flags) {
  std::vector<int64_t> sizes(kFeatures);
  int64_t largest = 0;
  size_t bags = 0;
  for (auto& bf : sizes) {
    const uint8_t b = in.Byte();
    bf = b == 0xff ? -1 : b == 0xfe ? int64_t{1} << 50 : b % 5;
    if (bf >= 0 && bf < 5) {
      largest = std::max(largest, bf);
      bags += static_cast<size_t>(bf);
    }
  }
  const uint8_t vflags = in.Byte();
  const bool inverse = (vflags & 1) != 0;
  int64_t B = inverse ? in.Byte() % 6 : largest;
  if (vflags & 2) B += 1;  // not the largest B_f without inverse indices
  std::vector<int32_t> lengths(bags + ((vflags & 4) ? 1 : 0));
  size_t total = 0;
  for (auto& len : lengths) {
    len = in.Small() % 5;
    if (len > 0) total += static_cast<size_t>(len);
  }
  std::vector<int64_t> ids(total + ((flags & 1) ? in.Byte() % 2 : 0));
  for (auto& id : ids) {
    const int32_t v = in.Small();
    id = (flags & 2) && v < -90 ? int64_t{1} << 40 : v / 3;
  }
  std::vector<float> weights(ids.size());
  bool finite = true;
  for (auto& w : weights) {
    w = in.Float();
    finite = finite && std::isfinite(w);
  }
  std::vector<int64_t> inv(inverse ? kFeatures * static_cast<size_t>(B) : 0);
  for (size_t k = 0; k < inv.size(); ++k) {
    const int32_t v = in.Small();
    inv[k] = (vflags & 8) ? v % 6 : std::abs(v) % std::max<int64_t>(1, sizes[k / B]);
  }
  shardrec_kjt_vbe_view_t v = SHARDREC_KJT_VBE_VIEW_INIT;
  if (vflags & 16) v.version = SHARDREC_KJT_VBE_VIEW_VERSION + 1;
  v.kjt.batch_size = B;
  v.kjt.num_features = (flags & 8) ? kFeatures - 1 : kFeatures;
  v.kjt.lengths = lengths.empty() ? nullptr : lengths.data();
  v.kjt.num_lengths = lengths.size();
  v.kjt.values = ids.empty() ? nullptr : ids.data();
  v.kjt.num_values = ids.size();
  if (flags & 32) {
    v.kjt.weights = weights.data();
    v.kjt.num_weights = weights.size();
  }
  v.feature_batch_sizes = sizes.data();
  v.num_feature_batch_sizes = sizes.size();
  if (inverse) {
    v.inverse_indices = inv.empty() ? nullptr : inv.data();
    v.num_inverse_indices = inv.size();
  }
  size_t need = 0;
  const shardrec_status_t size_rc = shardrec_inference_vbe_output_len(inf, &v, &need);
  FUZZ_CHECK(size_rc == SHARDREC_OK || size_rc == SHARDREC_EINVAL);
  if (size_rc != SHARDREC_OK || need > (size_t{1} << 20)) need = in.Byte() % 64;
  const size_t out_len = need + ((flags & 64) ? 1 : 0);
  std::vector<float> out(out_len + 1, 7.0f), again(out_len + 1);
  const shardrec_status_t rc = shardrec_inference_lookup_vbe(inf, &v, out.data(), out_len, nullptr);
  FUZZ_CHECK(rc == SHARDREC_OK || rc == SHARDREC_EINVAL);
  if (rc != SHARDREC_OK) {
    for (float x : out) FUZZ_CHECK(x == 7.0f);  // nothing written on error
    return 0;
  }
  FUZZ_CHECK(size_rc == SHARDREC_OK && out_len == need);
  shardrec_inference_version_t* ver = nullptr;
  FUZZ_CHECK(shardrec_inference_pin(inf, &ver) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_inference_snapshot_lookup_vbe(ver, &v, again.data(), out_len) == SHARDREC_OK);
  shardrec_inference_unpin(ver);
  FUZZ_CHECK(std::memcmp(out.data(), again.data(), out_len * sizeof(float)) == 0);
  if (finite || v.kjt.weights == nullptr)
    for (size_t i = 0; i < out_len; ++i) FUZZ_CHECK(std::isfinite(out[i]));
  if (!inverse) return 0;
  // The expanded plain batch: sample b of feature f reads bag inv[f * B + b].
  std::vector<int32_t> e_lengths;
  std::vector<int64_t> e_ids;
  std::vector<float> e_weights;
  size_t first_bag = 0, first_value = 0;
  for (size_t f = 0; f < kFeatures; ++f) {
    std::vector<size_t> start(static_cast<size_t>(sizes[f]));
    size_t pos = first_value;
    for (size_t k = 0; k < start.size(); ++k) {
      start[k] = pos;
      pos += static_cast<size_t>(lengths[first_bag + k]);
    }
    for (int64_t b = 0; b < B; ++b) {
      const auto k = static_cast<size_t>(inv[f * static_cast<size_t>(B) + b]);
      const int32_t len = lengths[first_bag + k];
      e_lengths.push_back(len);
      for (size_t i = start[k]; i < start[k] + static_cast<size_t>(len); ++i) {
        e_ids.push_back(ids[i]);
        e_weights.push_back(weights[i]);
      }
    }
    first_bag += start.size();
    first_value = pos;
  }
  shardrec_kjt_view_t p = v.kjt;
  p.lengths = e_lengths.empty() ? nullptr : e_lengths.data();
  p.num_lengths = e_lengths.size();
  p.values = e_ids.empty() ? nullptr : e_ids.data();
  p.num_values = e_ids.size();
  if (p.weights != nullptr) {
    p.weights = e_weights.data();
    p.num_weights = e_weights.size();
  }
  std::vector<float> plain(out_len + 1);
  FUZZ_CHECK(shardrec_inference_lookup(inf, &p, plain.data(), out_len, nullptr) == SHARDREC_OK);
  FUZZ_CHECK(std::memcmp(out.data(), plain.data(), out_len * sizeof(float)) == 0);
  return 0;
}

// The rules of a plain lookup (shardrec/tensor.h, shardrec_inference_lookup), written out again
// as the oracle: whether a lookup of `v` into `out_len` floats must be refused by a handle whose
// bounds policy is ERROR (`strict`) or CLAMP / SKIP. A request that breaks none must be answered.
bool MustRefuse(const shardrec_kjt_view_t& v, size_t out_len, int64_t dim, bool strict) {
  // Features a and c read "small" (5 rows), b reads "wide" (40); a batch of more than 6 samples
  // comes without lengths.
  const int64_t rows[kFeatures] = {5, 40, 5};
  return shardrec::fuzz::KjtBreaksRules(v, kFeatures, 6, strict ? rows : nullptr) ||
         out_len != static_cast<size_t>(v.batch_size * dim);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Handles* h = Setup();
  Reader in{{data, size}};
  const uint8_t head = in.Byte();
  shardrec_inference_t* inf = h->inf[head % 3];
  int64_t B = (head >> 2) % 7;
  if ((head & 0xe0) == 0xe0) B = (head & 0x10) ? (int64_t{1} << 61) : -2;  // absurd sizes
  std::vector<int32_t> lengths(kFeatures * static_cast<size_t>(B > 0 && B < 7 ? B : 0));
  size_t total = 0;
  for (auto& len : lengths) {
    len = in.Small() % 5;
    if (len > 0) total += static_cast<size_t>(len);
  }
  const uint8_t flags = in.Byte();
  if (flags & 128) return FuzzVbe(inf, in, flags);
  const size_t num_values = total + ((flags & 1) ? in.Byte() % 2 : 0);
  std::vector<int64_t> ids64(num_values);
  std::vector<int32_t> ids32(num_values);
  for (size_t i = 0; i < num_values; ++i) {
    const int32_t v = in.Small();
    ids64[i] = (flags & 2) && v < -90 ? int64_t{1} << 40 : v / 3;
    ids32[i] = static_cast<int32_t>(v / 3);
  }
  std::vector<float> weights(num_values + ((flags & 4) ? 1 : 0));
  bool finite = true;
  for (auto& w : weights) {
    w = in.Float();
    finite = finite && std::isfinite(w);
  }
  shardrec_kjt_view_t v = SHARDREC_KJT_VIEW_INIT;
  v.batch_size = B;
  v.num_features = (flags & 8) ? kFeatures - 1 : kFeatures;
  v.lengths = lengths.empty() ? nullptr : lengths.data();
  v.num_lengths = lengths.size();
  v.values_dtype = (flags & 16) ? SHARDREC_DTYPE_INT32 : SHARDREC_DTYPE_INT64;
  v.values = (flags & 16) ? static_cast<const void*>(ids32.data()) : ids64.data();
  if (num_values == 0) v.values = nullptr;
  v.num_values = num_values;
  if (flags & 32) {
    v.weights = weights.data();
    v.num_weights = weights.size();
  }
  int64_t dim = 0;
  FUZZ_CHECK(shardrec_inference_output_dim(inf, &dim) == SHARDREC_OK);
  const size_t rows = B > 0 && B < 7 ? static_cast<size_t>(B) : 0;
  size_t out_len = rows * static_cast<size_t>(dim) + ((flags & 64) ? 1 : 0);
  std::vector<float> out(out_len + 1), again(out_len + 1);
  const shardrec_status_t rc = shardrec_inference_lookup(inf, &v, out.data(), out_len, nullptr);
  FUZZ_CHECK(rc == SHARDREC_OK || rc == SHARDREC_EINVAL);
  // Handle 0 has the ERROR bounds policy; 1 and 2 CLAMP and SKIP.
  FUZZ_CHECK((rc != SHARDREC_OK) == MustRefuse(v, out_len, dim, head % 3 == 0));
  if (rc != SHARDREC_OK) return 0;
  shardrec_inference_version_t* ver = nullptr;
  FUZZ_CHECK(shardrec_inference_pin(inf, &ver) == SHARDREC_OK);
  FUZZ_CHECK(shardrec_inference_snapshot_lookup(ver, &v, again.data(), out_len) == SHARDREC_OK);
  shardrec_inference_unpin(ver);
  FUZZ_CHECK(std::memcmp(out.data(), again.data(), out_len * sizeof(float)) == 0);
  if (finite || v.weights == nullptr)
    for (size_t i = 0; i < out_len; ++i) FUZZ_CHECK(std::isfinite(out[i]));
  return 0;
}
