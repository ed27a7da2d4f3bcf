// shardrec_mlp_infer and shardrec_dcn_infer through libshardrec.so: bit-identical to the training
// forward, read-only on the handle (a later backward still sees the last forward), many threads
// at once on one handle equal to one thread, and the documented refusals. Runs under TSan.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/common.h"
#include "shardrec/dense.h"
#include "shardrec/device.h"

namespace {

struct MlpDel {
  void operator()(shardrec_mlp_t* m) const { shardrec_mlp_destroy(m); }
};
struct DcnDel {
  void operator()(shardrec_dcn_t* d) const { shardrec_dcn_destroy(d); }
};
using Mlp = std::unique_ptr<shardrec_mlp_t, MlpDel>;
using Dcn = std::unique_ptr<shardrec_dcn_t, DcnDel>;

// One BLAS thread, as a server runs each request on its own thread (and as the other dense tests
// do): OpenBLAS's own worker threads synchronise in ways ThreadSanitizer cannot see.
class OneBlasThread : public ::testing::Environment {
 public:
  void SetUp() override { ASSERT_EQ(shardrec_dense_set_blas_threads(1), SHARDREC_OK); }
};
const ::testing::Environment* const kOneBlasThread =
    ::testing::AddGlobalTestEnvironment(new OneBlasThread);

constexpr int64_t kIn = 13;
const int64_t kOuts[] = {64, 32, 1};

Mlp MakeMlp() {
  shardrec_mlp_options_t o;
  EXPECT_EQ(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION), SHARDREC_OK);
  o.in_features = kIn;
  o.out_features = kOuts;
  o.num_layers = 3;
  o.seed = 11;
  shardrec_mlp_t* m = nullptr;
  EXPECT_EQ(shardrec_mlp_create(&m, &o), SHARDREC_OK) << shardrec_last_error();
  return Mlp(m);
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CapiMlpInfer, EqualsTheTrainingForwardBitForBit) {
  Mlp mlp = MakeMlp();
  for (int64_t batch : {1, 7, 64, 257}) {
    const std::vector<float> x = Random(batch * kIn, static_cast<uint32_t>(batch));
    std::vector<float> fwd(batch), inf(batch, -1.0f);
    ASSERT_EQ(shardrec_mlp_forward(mlp.get(), x.data(), batch, fwd.data(), batch), SHARDREC_OK);
    ASSERT_EQ(shardrec_mlp_infer(mlp.get(), x.data(), batch, inf.data(), batch), SHARDREC_OK)
        << shardrec_last_error();
    EXPECT_TRUE(SameBits(fwd, inf)) << "batch " << batch;
  }
}

// Infer keeps nothing: the backward after it is the backward of the last *forward*, so training
// interleaved with serving calls gets the same gradients as training alone.
TEST(CapiMlpInfer, LeavesTheTrainingStateAlone) {
  Mlp a = MakeMlp(), b = MakeMlp();
  const std::vector<float> x = Random(8 * kIn, 1), other = Random(3 * kIn, 2);
  std::vector<float> y(8), dy(8, 0.25f), scratch(3);
  ASSERT_EQ(shardrec_mlp_forward(a.get(), x.data(), 8, y.data(), 8), SHARDREC_OK);
  ASSERT_EQ(shardrec_mlp_forward(b.get(), x.data(), 8, y.data(), 8), SHARDREC_OK);
  ASSERT_EQ(shardrec_mlp_infer(b.get(), other.data(), 3, scratch.data(), 3), SHARDREC_OK);
  ASSERT_EQ(shardrec_mlp_backward(a.get(), dy.data(), nullptr, nullptr, nullptr), SHARDREC_OK);
  ASSERT_EQ(shardrec_mlp_backward(b.get(), dy.data(), nullptr, nullptr, nullptr), SHARDREC_OK);
  size_t n = 0;
  ASSERT_EQ(shardrec_mlp_num_tensors(a.get(), &n), SHARDREC_OK);
  for (size_t i = 0; i < n; ++i) {
    shardrec_dense_param_t ta, tb;
    ASSERT_EQ(shardrec_mlp_tensor(a.get(), i, &ta), SHARDREC_OK);
    ASSERT_EQ(shardrec_mlp_tensor(b.get(), i, &tb), SHARDREC_OK);
    EXPECT_EQ(std::memcmp(ta.grad, tb.grad, sizeof(float) * ta.count), 0) << ta.name;
  }
}

// Each thread scores its own batches on the one handle, at once; every answer equals the
// single-threaded one. Under TSan this is also the proof that the read path shares nothing
// mutable.
TEST(CapiMlpInfer, ManyThreadsOnOneHandleEqualOneThread) {
  Mlp mlp = MakeMlp();
  constexpr int kThreads = 4, kRounds = 25;
  constexpr int64_t kBatch = 33;
  std::vector<std::vector<float>> xs(kThreads), want(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    xs[t] = Random(kBatch * kIn, 100 + t);
    want[t].resize(kBatch);
    ASSERT_EQ(shardrec_mlp_infer(mlp.get(), xs[t].data(), kBatch, want[t].data(), kBatch),
              SHARDREC_OK);
  }
  std::vector<int> mismatches(kThreads, 0), failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> y(kBatch);
      for (int r = 0; r < kRounds; ++r) {
        if (shardrec_mlp_infer(mlp.get(), xs[t].data(), kBatch, y.data(), kBatch) != SHARDREC_OK) {
          ++failures[t];
        } else if (!SameBits(y, want[t])) {
          ++mismatches[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t;
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  }
}

TEST(CapiMlpInfer, BadArgumentsAreRefusedAndTouchNothing) {
  Mlp mlp = MakeMlp();
  const std::vector<float> x = Random(4 * kIn, 3);
  std::vector<float> y(4, 5.0f);
  EXPECT_EQ(shardrec_mlp_infer(nullptr, x.data(), 4, y.data(), 4), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_infer(mlp.get(), x.data(), -1, y.data(), 4), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_infer(mlp.get(), nullptr, 4, y.data(), 4), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_mlp_infer(mlp.get(), x.data(), 4, y.data(), 3), SHARDREC_EINVAL);
  EXPECT_TRUE(Contains(shardrec_last_error(), "holds 3 floats")) << shardrec_last_error();
  for (float v : y) EXPECT_EQ(v, 5.0f);
  EXPECT_EQ(shardrec_mlp_infer(mlp.get(), nullptr, 0, nullptr, 0), SHARDREC_OK);
}

// On a GPU machine a CUDA MLP exists and its inference is refused (serving is host only); on a
// machine without one no CUDA MLP can be created, which the device test covers.
TEST(CapiMlpInfer, ACudaMlpIsRefusedWhereOneCanBeCreated) {
  shardrec_mlp_options_t o;
  ASSERT_EQ(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION), SHARDREC_OK);
  o.in_features = kIn;
  o.out_features = kOuts;
  o.num_layers = 3;
  o.device_type = SHARDREC_DEVICE_CUDA;
  shardrec_mlp_t* raw = nullptr;
  const shardrec_status_t rc = shardrec_mlp_create(&raw, &o);
  Mlp mlp(raw);
  if (rc != SHARDREC_OK) {
    EXPECT_TRUE(rc == SHARDREC_ENODEVICE || rc == SHARDREC_EUNSUPPORTED) << shardrec_last_error();
    EXPECT_EQ(raw, nullptr);
    return;
  }
  float x[kIn] = {0}, y[1];
  EXPECT_EQ(shardrec_mlp_infer(mlp.get(), x, 1, y, 1), SHARDREC_EUNSUPPORTED);
  EXPECT_TRUE(Contains(shardrec_last_error(), "SHARDREC_DEVICE_HOST")) << shardrec_last_error();
}

TEST(CapiDcnInfer, EqualsTheTrainingForwardAndIsReentrant) {
  constexpr int64_t kWidth = 24, kBatch = 19;
  shardrec_dcn_t* raw = nullptr;
  ASSERT_EQ(shardrec_dcn_create(&raw, kWidth, 3, 8, 5, nullptr), SHARDREC_OK);
  Dcn dcn(raw);
  const std::vector<float> x = Random(kBatch * kWidth, 9);
  std::vector<float> fwd(kBatch * kWidth), inf(kBatch * kWidth);
  ASSERT_EQ(shardrec_dcn_forward(dcn.get(), x.data(), kBatch, fwd.data(), fwd.size()), SHARDREC_OK);
  ASSERT_EQ(shardrec_dcn_infer(dcn.get(), x.data(), kBatch, inf.data(), inf.size()), SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_TRUE(SameBits(fwd, inf));
  std::vector<int> bad(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> y(kBatch * kWidth);
      for (int r = 0; r < 20; ++r) {
        if (shardrec_dcn_infer(dcn.get(), x.data(), kBatch, y.data(), y.size()) != SHARDREC_OK ||
            !SameBits(y, fwd)) {
          ++bad[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad[0] + bad[1], 0);
  EXPECT_EQ(shardrec_dcn_infer(dcn.get(), x.data(), kBatch, inf.data(), 5), SHARDREC_EINVAL);
  EXPECT_EQ(shardrec_dcn_infer(nullptr, x.data(), kBatch, inf.data(), inf.size()), SHARDREC_EINVAL);
}

}  // namespace
