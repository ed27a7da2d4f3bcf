// The registry of the dense layers' device allocations (what lets the host-only optimizers
// refuse a CUDA MLP's tensors): ranges are found from any interior pointer, not past their end,
// and forgotten once unregistered. Host buffers stand in for device memory: only addresses
// matter.
#include "impl/dense/device_registry.h"

#include <gtest/gtest.h>

#include <vector>

namespace shardrec::dense {
namespace {

TEST(DeviceRegistry, FindsInteriorPointersOnly) {
  std::vector<char> a(64), b(32), outside(16);
  RegisterDeviceRange(a.data(), a.size());
  RegisterDeviceRange(b.data(), b.size());
  EXPECT_TRUE(IsKnownDevicePointer(a.data()));
  EXPECT_TRUE(IsKnownDevicePointer(a.data() + 63));
  EXPECT_TRUE(IsKnownDevicePointer(b.data() + 31));
  EXPECT_FALSE(IsKnownDevicePointer(outside.data()));
  EXPECT_FALSE(IsKnownDevicePointer(nullptr));
  UnregisterDeviceRange(a.data());
  EXPECT_FALSE(IsKnownDevicePointer(a.data()));
  EXPECT_FALSE(IsKnownDevicePointer(a.data() + 10));
  EXPECT_TRUE(IsKnownDevicePointer(b.data()));
  UnregisterDeviceRange(b.data());
  EXPECT_FALSE(IsKnownDevicePointer(b.data()));
}

TEST(DeviceRegistry, OneBeyondTheEndIsNotInside) {
  std::vector<float> v(8);
  RegisterDeviceRange(v.data(), 4 * sizeof(float));
  EXPECT_TRUE(IsKnownDevicePointer(v.data() + 3));
  EXPECT_FALSE(IsKnownDevicePointer(v.data() + 4));
  UnregisterDeviceRange(v.data());
}

}  // namespace
}  // namespace shardrec::dense
