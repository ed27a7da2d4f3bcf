#include "tests/capi/embedding/gpu_test_util.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace shardrec::testing {

namespace {

// A handle on the loaded plugin if it is the fake (dlclose it), else null.
void* FakeHandle() {
  (void)shardrec_device_check(SHARDREC_DEVICE_CUDA, 0);  // loads the plugin
  const char* path = std::getenv("SHARDREC_CUDA_PLUGIN");
  return path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
}

}  // namespace

TrainingSetup::TrainingSetup(const Scenario& s) {
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  batches = MakeBatches(s, ref);
  grads = MakeGrads(s, batches, ref.output_dim());
  plan = MakePlan(s);
  EXPECT_NE(plan, nullptr) << shardrec_last_error();
  opt = ToCOptimizer(s.optimizer);
}

void ExpectSameTensors(const Tensors& a, const Tensors& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(BitEqual(a[i], b[i])) << what << " tensor " << i;
}

void CreateHostAndGpu(const shardrec_plan_t* plan, int32_t world, int32_t rank,
                      const shardrec_optimizer_config_t& opt,
                      const shardrec_embedding_options_t& host_options,
                      const shardrec_embedding_options_t& gpu_options, CollPtr* host,
                      CollPtr* gpu) {
  shardrec_embedding_t* h = nullptr;
  shardrec_embedding_t* d = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&h, plan, GroupComm(world, rank), &opt, &host_options),
            SHARDREC_OK)
      << "host: " << shardrec_last_error();
  host->reset(h);
  ASSERT_EQ(shardrec_embedding_create(&d, plan, GroupComm(world, rank), &opt, &gpu_options),
            SHARDREC_OK)
      << "gpu: " << shardrec_last_error();
  gpu->reset(d);
}

shardrec_tensor_view_t FloatView(float* data, size_t n, int64_t dim, int32_t device_type) {
  shardrec_tensor_view_t v{};
  v.data = data;
  v.dtype = SHARDREC_DTYPE_FLOAT32;
  v.device_type = device_type;
  v.ndim = 2;
  v.shape[0] = dim == 0 ? 0 : static_cast<int64_t>(n) / dim;
  v.shape[1] = dim;
  return v;
}

std::map<std::string, std::string> ReadDir(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream f(e.path(), std::ios::binary);
    out[e.path().filename().string()] =
        std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  return out;
}

std::array<int64_t, kNumFakeCalls> FakeCalls() {
  std::array<int64_t, kNumFakeCalls> out{};
  out.fill(-1);
  void* h = FakeHandle();
  if (h == nullptr) return out;
  auto fn = reinterpret_cast<int64_t (*)(int32_t)>(dlsym(h, "shardrec_fake_embedding_calls"));
  for (int i = 0; fn != nullptr && i < kNumFakeCalls; ++i) out[i] = fn(i);
  dlclose(h);  // NOLOAD: the library's reference keeps it loaded
  return out;
}

Counts Runtime() {
  Counts out{};
  out.fill(-1);
  void* h = FakeHandle();
  if (h == nullptr) return out;
  auto fn = reinterpret_cast<int64_t (*)(int32_t)>(dlsym(h, "shardrec_fake_runtime_calls"));
  for (int i = 0; fn != nullptr && i < kNumCounters; ++i) out[i] = fn(i);
  dlclose(h);
  return out;
}

Counts Delta(const Counts& before, const Counts& after) {
  Counts d{};
  for (int i = 0; i < kNumCounters; ++i) d[i] = after[i] - before[i];
  return d;
}

int64_t LiveStreams() {
  void* h = FakeHandle();
  if (h == nullptr) return -1;
  auto fn = reinterpret_cast<int64_t (*)(int32_t)>(dlsym(h, "shardrec_fake_runtime_calls"));
  const int64_t n = fn != nullptr ? fn(kNumCounters) : -1;
  dlclose(h);
  return n;
}

namespace {

// The CUDA runtime of a real GPU run (the real plugin loaded, device 0 usable), opened by the
// tests themselves: managed memory is device memory the library may use on cuda:0 and that the
// test reads and writes from the host, as it does the fake's blocks. Loaded once; all null when
// there is no runtime or no usable device.
struct RealCuda {
  int (*malloc_managed)(void**, size_t, unsigned) = nullptr;  // cudaMallocManaged
  int (*free)(void*) = nullptr;                               // cudaFree
  int (*synchronize)() = nullptr;                             // cudaDeviceSynchronize
  // Side streams (FakeSideStream): cudaStreamCreateWithFlags, cudaStreamDestroy,
  // cudaStreamSynchronize, cudaMemcpyAsync, cudaLaunchHostFunc.
  int (*stream_create)(void**, unsigned) = nullptr;
  int (*stream_destroy)(void*) = nullptr;
  int (*stream_synchronize)(void*) = nullptr;
  int (*memcpy_async)(void*, const void*, size_t, int, void*) = nullptr;
  int (*launch_host_func)(void*, void (*)(void*), void*) = nullptr;
  bool ok() const { return malloc_managed != nullptr && free != nullptr && synchronize != nullptr; }
  bool streams() const {
    return stream_create != nullptr && stream_destroy != nullptr && stream_synchronize != nullptr &&
           memcpy_async != nullptr && launch_host_func != nullptr;
  }
};

template <class Fn>
void Find(void* h, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(h, name));
}

const RealCuda& Real() {
  static const RealCuda real = [] {
    RealCuda r;
    if (FakeLoaded() || shardrec_device_check(SHARDREC_DEVICE_CUDA, 0) != SHARDREC_OK) return r;
    for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"}) {
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);  // kept open for the process
      if (h == nullptr) continue;
      r.malloc_managed =
          reinterpret_cast<int (*)(void**, size_t, unsigned)>(dlsym(h, "cudaMallocManaged"));
      r.free = reinterpret_cast<int (*)(void*)>(dlsym(h, "cudaFree"));
      r.synchronize = reinterpret_cast<int (*)()>(dlsym(h, "cudaDeviceSynchronize"));
      Find(h, "cudaStreamCreateWithFlags", &r.stream_create);
      Find(h, "cudaStreamDestroy", &r.stream_destroy);
      Find(h, "cudaStreamSynchronize", &r.stream_synchronize);
      Find(h, "cudaMemcpyAsync", &r.memcpy_async);
      Find(h, "cudaLaunchHostFunc", &r.launch_host_func);
      if (r.ok()) break;
      r = RealCuda{};
    }
    return r;
  }();
  return real;
}

constexpr unsigned kCudaMemAttachGlobal = 1;
constexpr unsigned kCudaStreamNonBlocking = 1;
constexpr int kCudaMemcpyDefault = 4;

// Holds a real side stream for a while (cudaLaunchHostFunc: the stream's later work waits for it;
// it calls no CUDA function, as a host function must not).
void HoldStream(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(FakeSideStream::kRealUploadDelayMs));
}

}  // namespace

bool DeviceBuffersAvailable() { return FakeLoaded() || Real().ok(); }

FakeDeviceBlock::FakeDeviceBlock(size_t bytes) {
  const char* path = std::getenv("SHARDREC_CUDA_PLUGIN");
  handle_ = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (bytes == 0) return;
  if (handle_ != nullptr) {
    auto alloc = reinterpret_cast<void* (*)(size_t)>(dlsym(handle_, "shardrec_fake_device_alloc"));
    free_ = reinterpret_cast<void (*)(void*)>(dlsym(handle_, "shardrec_fake_device_free"));
    if (alloc != nullptr && free_ != nullptr) data_ = alloc(bytes);
  }
  if (data_ == nullptr && Real().ok()) {
    void* p = nullptr;
    if (Real().malloc_managed(&p, bytes, kCudaMemAttachGlobal) == 0) {
      data_ = p;
      real_ = true;
    }
  }
  bytes_ = data_ != nullptr ? bytes : 0;
}

FakeDeviceBlock::~FakeDeviceBlock() {
  if (data_ != nullptr) {
    if (real_) {
      (void)Real().synchronize();  // no queued work may still use it
      (void)Real().free(data_);
    } else {
      free_(data_);
    }
  }
  if (handle_ != nullptr) dlclose(handle_);
}

void FakeDeviceBlock::Settle() const {
  if (real_) (void)Real().synchronize();
}

FakeSideStream::FakeSideStream() {
  auto make = reinterpret_cast<void* (*)()>(FakeSymbol("shardrec_fake_stream_create"));
  destroy_ = reinterpret_cast<void (*)(void*)>(FakeSymbol("shardrec_fake_stream_destroy"));
  upload_ = reinterpret_cast<int32_t (*)(void*, const void*, size_t, void*)>(
      FakeSymbol("shardrec_fake_upload_async"));
  if (make != nullptr && destroy_ != nullptr && upload_ != nullptr) {
    stream_ = make();
    return;
  }
  if (Real().ok() && Real().streams()) {
    void* s = nullptr;
    if (Real().stream_create(&s, kCudaStreamNonBlocking) == 0) {
      stream_ = s;
      real_ = true;
    }
  }
}

FakeSideStream::~FakeSideStream() {
  if (stream_ == nullptr) return;
  if (!real_) {
    destroy_(stream_);
    return;
  }
  (void)Real().stream_synchronize(stream_);  // the sources stay until their copies are done
  sources_.clear();
  (void)Real().stream_destroy(stream_);
}

bool FakeSideStream::Upload(void* device_dst, const void* host_src, size_t bytes) {
  if (stream_ == nullptr) return false;
  if (!real_) return upload_(device_dst, host_src, bytes, stream_) == 0;
  if (bytes == 0) return true;
  // Device to device from a managed copy of the source: a copy out of pageable memory may be
  // synchronous with respect to the host, which would hide the stream's delay.
  auto src = std::make_unique<FakeDeviceBlock>(bytes);
  if (src->data() == nullptr) return false;
  std::memcpy(src->data(), host_src, bytes);
  if (Real().launch_host_func(stream_, &HoldStream, nullptr) != 0) return false;
  if (Real().memcpy_async(device_dst, src->data(), bytes, kCudaMemcpyDefault, stream_) != 0)
    return false;
  sources_.push_back(std::move(src));
  return true;
}

}  // namespace shardrec::testing
