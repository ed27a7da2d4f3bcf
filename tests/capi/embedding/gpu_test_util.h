// Shared pieces of the GPU collection C API tests, which run on the CPU through the fake
// embedding plugin (SHARDREC_CUDA_PLUGIN, set by ctest) and on a GPU through the real plugin:
// whether they can run here, the plan constants, the collection options, a host and a GPU
// collection of one plan, bit equality of outputs and snapshots, tensor views, and the fake's
// hooks and counters (gpu_test_util.cc).
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/device.h"
#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {

inline constexpr int32_t kDP = SHARDREC_SHARDING_DATA_PARALLEL;
inline constexpr int32_t kTW = SHARDREC_SHARDING_TABLE_WISE;
inline constexpr int32_t kRW = SHARDREC_SHARDING_ROW_WISE;
inline constexpr int32_t kCW = SHARDREC_SHARDING_COLUMN_WISE;
inline constexpr int32_t kTRW = SHARDREC_SHARDING_TABLE_ROW_WISE;
inline constexpr int32_t kGrid = SHARDREC_SHARDING_GRID;
inline constexpr int32_t kSum = SHARDREC_POOLING_SUM;
inline constexpr int32_t kMean = SHARDREC_POOLING_MEAN;
inline constexpr int32_t kNone = SHARDREC_POOLING_NONE;
inline constexpr int32_t kSgd = SHARDREC_OPTIMIZER_SGD;
inline constexpr int32_t kRowAdagrad = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
inline constexpr int32_t kAdam = SHARDREC_OPTIMIZER_ADAM;
inline constexpr int32_t kAdagrad = SHARDREC_OPTIMIZER_ADAGRAD;
inline constexpr int32_t kPartialAdam = SHARDREC_OPTIMIZER_PARTIAL_ROWWISE_ADAM;
inline constexpr int32_t kLamb = SHARDREC_OPTIMIZER_LAMB;
inline constexpr int32_t kF32 = SHARDREC_DTYPE_FLOAT32;
inline constexpr int32_t kF16 = SHARDREC_DTYPE_FLOAT16;
inline constexpr int32_t kBf16 = SHARDREC_DTYPE_BFLOAT16;

inline bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

inline shardrec_embedding_options_t Options(const Scenario& s, bool cuda,
                                            int32_t device_index = 0) {
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.seed = s.seed;
  if (cuda) {
    o.device_type = SHARDREC_DEVICE_CUDA;
    o.device_index = device_index;
  }
  return o;
}

// A symbol of the fake plugin the library loaded, or null when the loaded plugin (if any) is not
// the fake. The library loads the plugin on the first GPU request.
inline void* FakeSymbol(const char* name) {
  (void)shardrec_device_check(SHARDREC_DEVICE_CUDA, 0);
  const char* path = std::getenv("SHARDREC_CUDA_PLUGIN");
  void* h = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (h == nullptr) return nullptr;
  void* sym = dlsym(h, name);
  dlclose(h);  // NOLOAD: the library's reference keeps it loaded
  return sym;
}

inline bool FakeLoaded() { return FakeSymbol("shardrec_fake_embedding_calls") != nullptr; }

// Makes the fake's next host/device copy after `n` successful ones fail (-1 disarms); false when
// the fake is not loaded.
inline bool FakeFailCopyAfter(int64_t n) {
  auto fn = reinterpret_cast<void (*)(int64_t)>(FakeSymbol("shardrec_fake_fail_copy_after"));
  if (fn == nullptr) return false;
  fn(n);
  return true;
}

// Makes the fake's next host wait (stream_wait, emb_read_status) after `n` successful ones fail
// and leave the stream's work queued (-1 disarms); false when the fake is not loaded.
inline bool FakeFailWaitAfter(int64_t n) {
  auto fn = reinterpret_cast<void (*)(int64_t)>(FakeSymbol("shardrec_fake_fail_wait_after"));
  if (fn == nullptr) return false;
  fn(n);
  return true;
}

class FakeDeviceBlock;

// A side stream a caller wrote its device batch on, destroyed (after its work) with the object:
// the fake's own (as the plugin's stream_create makes; its copies land, under
// SHARDREC_FAKE_DEFER_COPIES, only when something waits for the stream), or on a real GPU a
// non-blocking CUDA stream from the runtime the test opens itself, whose copies are queued behind
// a host function that holds the stream for kRealUploadDelayMs, so a reader that does not wait
// for the stream finds the destination as it was. Null when neither is there.
class FakeSideStream {
 public:
  static constexpr int kRealUploadDelayMs = 200;
  FakeSideStream();
  ~FakeSideStream();
  FakeSideStream(const FakeSideStream&) = delete;
  FakeSideStream& operator=(const FakeSideStream&) = delete;
  void* get() const { return stream_; }
  // Queues a copy of `bytes` host bytes into device memory on the stream (the source is copied
  // first: it may go at once); false when the copy was refused.
  bool Upload(void* device_dst, const void* host_src, size_t bytes);

 private:
  void* stream_ = nullptr;
  bool real_ = false;
  void (*destroy_)(void*) = nullptr;
  int32_t (*upload_)(void*, const void*, size_t, void*) = nullptr;
  // Real GPU: the uploads' sources in managed memory, kept until the stream has finished.
  std::vector<std::unique_ptr<FakeDeviceBlock>> sources_;
};

// Pinned allocations the fake made through host_alloc, which names no device; -1 when the fake
// is not loaded.
inline int64_t FakeHostAllocsWithoutDevice() {
  auto fn = reinterpret_cast<int64_t (*)()>(FakeSymbol("shardrec_fake_host_allocs_without_device"));
  return fn != nullptr ? fn() : -1;
}

// Empty when the tests can run: the fake is loaded, or another plugin (the real one: the gpu
// registration) with a usable device. SHARDREC_TEST_EXPECT_FAKE (the CPU registration) demands
// the fake.
inline std::string WhyNotRunnable() {
  if (FakeLoaded()) return "";
  if (std::getenv("SHARDREC_TEST_EXPECT_FAKE") != nullptr)
    return "SHARDREC_CUDA_PLUGIN does not name the fake embedding plugin (run through ctest)";
  if (shardrec_device_check(SHARDREC_DEVICE_CUDA, 0) != SHARDREC_OK)
    return std::string("no usable CUDA device: ") + shardrec_last_error();
  return "";
}

// What a test of scenario `s` trains on: every step's batch and output gradient per rank, the
// plan (null, with a test failure, when it is refused) and the optimizer in C form.
struct TrainingSetup {
  explicit TrainingSetup(const Scenario& s);
  std::vector<std::vector<RefBatch>> batches;
  std::vector<std::vector<std::vector<float>>> grads;
  PlanPtr plan;
  shardrec_optimizer_config_t opt;
};

// Floats of a forward's output for batch `rb`: a row per id for a sequence plan (`seq`), a row
// per sample otherwise, `dim` wide.
inline size_t OutputLen(const RefBatch& rb, bool seq, int64_t dim) {
  return static_cast<size_t>(seq ? static_cast<int64_t>(rb.ids.size()) : rb.batch_size) *
         static_cast<size_t>(dim);
}

using Tensors = std::vector<std::vector<float>>;  // what Snapshot returns

// `a` and `b` tensor by tensor, bit for bit; failures name `what` and the tensor.
void ExpectSameTensors(const Tensors& a, const Tensors& b, const std::string& what);

// A host and a GPU collection of `plan` on rank `rank` of a group of `world` (fatal failure,
// with the library's message, when either is refused).
void CreateHostAndGpu(const shardrec_plan_t* plan, int32_t world, int32_t rank,
                      const shardrec_optimizer_config_t& opt,
                      const shardrec_embedding_options_t& host_options,
                      const shardrec_embedding_options_t& gpu_options, CollPtr* host, CollPtr* gpu);

// A float32 [rows, dim] view of `data` (rows = n / dim) on `device_type`, index 0.
shardrec_tensor_view_t FloatView(float* data, size_t n, int64_t dim, int32_t device_type);
inline shardrec_tensor_view_t View(std::vector<float>* data, int64_t dim, int32_t device_type) {
  return FloatView(data->data(), data->size(), dim, device_type);
}
inline shardrec_tensor_view_t DeviceView(float* data, size_t n, int64_t dim) {
  return FloatView(data, n, dim, SHARDREC_DEVICE_CUDA);
}

// Every file of a directory (name -> bytes).
std::map<std::string, std::string> ReadDir(const std::string& dir);

// The fake's calls of its kernel entries (shardrec_fake_embedding_calls); -1 each when the fake
// is not the plugin. The fake's device memory is host memory, so only these counts show that a
// GPU collection ran its kernels through the plugin rather than host kernels on device pointers.
enum FakeCall {
  kLookup = 0,
  kGroupRows,
  kAggregate,
  kFused,
  kPartial,
  kApply,
  kRoute,
  kMeanDivide,
  kUnpack,
  kCheckFinite,
  kPackGrads,
  kDpStep,
  kRowPhaseCounted,
  kGroupRowsGated,
  kSumSources,
  kNumFakeCalls
};
std::array<int64_t, kNumFakeCalls> FakeCalls();

// The fake's runtime counters (shardrec_fake_runtime_calls): host synchronisations, copies up
// and down, device and pinned allocations; -1 each when the fake is not the plugin.
enum Counter { kSync = 0, kUp, kDown, kDeviceAlloc, kHostAlloc, kNumCounters };
using Counts = std::array<int64_t, kNumCounters>;
Counts Runtime();
Counts Delta(const Counts& before, const Counts& after);
// Streams the fake handed out through stream_create and that were not destroyed yet; -1 when the
// fake is not the plugin.
int64_t LiveStreams();

// Whether FakeDeviceBlock can give device memory: the fake's, or on a real GPU (the real plugin
// and a usable cuda:0) managed memory from the CUDA runtime the test opens itself.
bool DeviceBuffersAvailable();

// A block of device memory the test may read and write directly from the host, freed on
// destruction: the fake's (host memory it tracks as device memory), or on a real GPU managed
// memory (cudaMallocManaged); empty (null) when neither is there or `bytes` is 0.
class FakeDeviceBlock {
 public:
  explicit FakeDeviceBlock(size_t bytes);
  ~FakeDeviceBlock();
  FakeDeviceBlock(const FakeDeviceBlock&) = delete;
  FakeDeviceBlock& operator=(const FakeDeviceBlock&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Before the host reads a managed block the device wrote: waits for the device (nothing for
  // the fake's blocks, whose readers rely on the collection's synchronisation points).
  void Settle() const;

 private:
  bool real_ = false;  // managed memory of the real runtime
  void* handle_ = nullptr;
  void (*free_)(void*) = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// `n` floats of the fake's device memory.
class FakeDeviceFloats : public FakeDeviceBlock {
 public:
  explicit FakeDeviceFloats(size_t n) : FakeDeviceBlock(n * sizeof(float)) {}
  float* data() const { return static_cast<float*>(FakeDeviceBlock::data()); }
  std::vector<float> ToVector() const {
    Settle();
    return std::vector<float>(data(), data() + bytes() / sizeof(float));
  }
};

// A copy of `v` in the fake's device memory.
class FakeDeviceCopy : public FakeDeviceBlock {
 public:
  template <class T>
  explicit FakeDeviceCopy(const std::vector<T>& v) : FakeDeviceBlock(v.size() * sizeof(T)) {
    if (data() != nullptr) std::memcpy(data(), v.data(), v.size() * sizeof(T));
  }
};

// The arrays of a host KJT copied into the fake's device memory, and a view of them declared on
// cuda:0.
class DeviceKjt {
 public:
  explicit DeviceKjt(const shardrec_kjt_view_t& host)
      : lengths_(std::vector<int32_t>(host.lengths, host.lengths + host.num_lengths)),
        values_(Bytes(host.values,
                      host.num_values * (host.values_dtype == SHARDREC_DTYPE_INT32 ? 4 : 8))),
        weights_(std::vector<float>(host.weights, host.weights + host.num_weights)) {
    view_ = host;
    view_.lengths = static_cast<const int32_t*>(lengths_.data());
    view_.values = values_.data();
    view_.weights = static_cast<const float*>(weights_.data());
    view_.device_type = SHARDREC_DEVICE_CUDA;
    view_.device_index = 0;
  }
  const shardrec_kjt_view_t* view() const { return &view_; }

 private:
  static std::vector<uint8_t> Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + n);
  }
  FakeDeviceCopy lengths_, values_, weights_;
  shardrec_kjt_view_t view_;
};

}  // namespace shardrec::testing

// At the start of every test: fails where the fake should be loaded and is not, skips where
// there is no device.
#define REQUIRE_DEVICE()                                                                          \
  do {                                                                                            \
    const std::string why = ::shardrec::testing::WhyNotRunnable();                                \
    if (!why.empty() && std::getenv("SHARDREC_TEST_EXPECT_FAKE") == nullptr) GTEST_SKIP() << why; \
    ASSERT_TRUE(why.empty()) << why;                                                              \
  } while (0)

// At the start of a test that reads the fake's counters: fails where the fake should be loaded
// and is not, skips elsewhere (the real plugin has no counters).
#define REQUIRE_FAKE()                                                            \
  do {                                                                            \
    if (::shardrec::testing::Runtime()[::shardrec::testing::kSync] < 0) {         \
      if (std::getenv("SHARDREC_TEST_EXPECT_FAKE") != nullptr)                    \
        FAIL() << "SHARDREC_CUDA_PLUGIN does not name the fake embedding plugin"; \
      GTEST_SKIP() << "the counters are the fake embedding plugin's";             \
    }                                                                             \
  } while (0)
