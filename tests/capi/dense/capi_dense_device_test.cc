// The device fields of shardrec_mlp_options_t (version 2) through libshardrec.so: defaults,
// version-1 callers, refused combinations, and on a machine without a usable GPU a clean
// "no device" for a CUDA MLP. Runs on every machine.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "shardrec/common.h"
#include "shardrec/dense.h"
#include "shardrec/device.h"

namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const int64_t kOuts[] = {4, 1};

shardrec_mlp_options_t Options() {
  shardrec_mlp_options_t o;
  EXPECT_EQ(shardrec_mlp_options_init(&o, SHARDREC_MLP_OPTIONS_VERSION), SHARDREC_OK);
  o.in_features = 3;
  o.out_features = kOuts;
  o.num_layers = 2;
  o.seed = 7;
  return o;
}

TEST(CapiDenseDevice, Version2DefaultsAreHostFp32DefaultStream) {
  shardrec_mlp_options_t o;
  std::memset(&o, 0x5a, sizeof(o));
  ASSERT_EQ(shardrec_mlp_options_init(&o, 2), SHARDREC_OK);
  EXPECT_EQ(o.version, 2u);
  EXPECT_EQ(o.device_type, SHARDREC_DEVICE_HOST);
  EXPECT_EQ(o.device_index, 0);
  EXPECT_EQ(o.math, SHARDREC_DENSE_MATH_FP32);
  EXPECT_EQ(o.stream, nullptr);
  const shardrec_mlp_options_t m = SHARDREC_MLP_OPTIONS_INIT;
  EXPECT_EQ(m.device_type, SHARDREC_DEVICE_HOST);
  EXPECT_EQ(m.math, SHARDREC_DENSE_MATH_FP32);
}

// A caller built against the version-1 header has a shorter struct: init must not write past
// it, and create must not read the version-2 fields.
TEST(CapiDenseDevice, Version1CallersNeverTouchTheNewFields) {
  shardrec_mlp_options_t o;
  std::memset(&o, 0x5a, sizeof(o));
  ASSERT_EQ(shardrec_mlp_options_init(&o, 1), SHARDREC_OK);
  EXPECT_EQ(o.version, 1u);
  int32_t poison;
  std::memset(&poison, 0x5a, sizeof(poison));
  EXPECT_EQ(o.device_type, poison) << "init wrote past the version-1 struct";
  EXPECT_EQ(o.math, poison);
  o.in_features = 3;
  o.out_features = kOuts;
  o.num_layers = 2;
  shardrec_mlp_t* mlp = nullptr;
  ASSERT_EQ(shardrec_mlp_create(&mlp, &o), SHARDREC_OK) << shardrec_last_error();
  int32_t type = -1, index = -1;
  ASSERT_EQ(shardrec_mlp_device(mlp, &type, &index), SHARDREC_OK);
  EXPECT_EQ(type, SHARDREC_DEVICE_HOST);
  EXPECT_EQ(index, 0);
  shardrec_mlp_destroy(mlp);
}

TEST(CapiDenseDevice, ReducedPrecisionOnTheHostIsRefused) {
  for (int32_t math : {SHARDREC_DENSE_MATH_TF32, SHARDREC_DENSE_MATH_BF16}) {
    shardrec_mlp_options_t o = Options();
    o.math = math;
    shardrec_mlp_t* mlp = reinterpret_cast<shardrec_mlp_t*>(&o);  // sentinel: must become NULL
    EXPECT_EQ(shardrec_mlp_create(&mlp, &o), SHARDREC_EINVAL);
    EXPECT_EQ(mlp, nullptr);
    EXPECT_TRUE(Contains(shardrec_last_error(), "needs device_type SHARDREC_DEVICE_CUDA"))
        << shardrec_last_error();
  }
}

TEST(CapiDenseDevice, UnknownDeviceMathAndIndexAreRefused) {
  shardrec_mlp_options_t o = Options();
  shardrec_mlp_t* mlp = nullptr;
  o.device_type = 5;
  EXPECT_EQ(shardrec_mlp_create(&mlp, &o), SHARDREC_EINVAL);
  EXPECT_TRUE(Contains(shardrec_last_error(), "device type 5")) << shardrec_last_error();
  o = Options();
  o.math = 9;
  EXPECT_EQ(shardrec_mlp_create(&mlp, &o), SHARDREC_EINVAL);
  EXPECT_TRUE(Contains(shardrec_last_error(), "math mode 9")) << shardrec_last_error();
  o = Options();
  o.device_type = SHARDREC_DEVICE_CUDA;
  o.device_index = -1;
  EXPECT_EQ(shardrec_mlp_create(&mlp, &o), SHARDREC_EINVAL);
  EXPECT_TRUE(Contains(shardrec_last_error(), "device_index -1")) << shardrec_last_error();
  EXPECT_EQ(mlp, nullptr);
}

// A device past the last one (on this machine: cuda:0, as it has none) is the documented
// "no device"; a build without CUDA says so instead. Repeated, to show failure leaves nothing
// behind that breaks the next call.
TEST(CapiDenseDevice, CudaMlpWithoutADeviceIsNoDevice) {
  int32_t count = -1;
  ASSERT_EQ(shardrec_device_count(&count), SHARDREC_OK);
  for (int32_t math :
       {SHARDREC_DENSE_MATH_FP32, SHARDREC_DENSE_MATH_TF32, SHARDREC_DENSE_MATH_BF16}) {
    for (int round = 0; round < 3; ++round) {
      shardrec_mlp_options_t o = Options();
      o.device_type = SHARDREC_DEVICE_CUDA;
      o.device_index = count;
      o.math = math;
      shardrec_mlp_t* mlp = reinterpret_cast<shardrec_mlp_t*>(&o);
      const shardrec_status_t rc = shardrec_mlp_create(&mlp, &o);
      EXPECT_EQ(mlp, nullptr);
#if SHARDREC_TEST_HAVE_CUDA
      EXPECT_EQ(rc, SHARDREC_ENODEVICE) << shardrec_last_error();
      EXPECT_TRUE(Contains(shardrec_last_error(), "cuda:" + std::to_string(count)))
          << shardrec_last_error();
#else
      EXPECT_EQ(rc, SHARDREC_EUNSUPPORTED) << shardrec_last_error();
#endif
    }
  }
}

TEST(CapiDenseDevice, MlpDeviceQueryChecksItsHandle) {
  EXPECT_EQ(shardrec_mlp_device(nullptr, nullptr, nullptr), SHARDREC_EINVAL);
  shardrec_mlp_options_t o = Options();
  shardrec_mlp_t* mlp = nullptr;
  ASSERT_EQ(shardrec_mlp_create(&mlp, &o), SHARDREC_OK) << shardrec_last_error();
  int32_t type = -1;
  EXPECT_EQ(shardrec_mlp_device(mlp, &type, nullptr), SHARDREC_OK);
  EXPECT_EQ(type, SHARDREC_DEVICE_HOST);
  shardrec_mlp_destroy(mlp);
}

}  // namespace
