// The MLP's device and math options through the Java binding: without a GPU at the requested
// ordinal a CUDA MLP is ENODEVICE, reduced precision on the host is EINVAL, and the math enum
// round-trips its C values.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class DenseDeviceTest {
  static final long[] WIDTHS = {4, 1};

  @Test
  void mathCodesRoundTrip() {
    for (DenseMath m : DenseMath.values()) assertEquals(m, DenseMath.of(m.code()));
    assertEquals(0, DenseMath.FP32.code());
    assertEquals(1, DenseMath.TF32.code());
    assertEquals(2, DenseMath.BF16.code());
    assertThrows(ShardrecException.class, () -> DenseMath.of(3));
  }

  @Test
  void cudaMlpOnAMissingDeviceIsNoDevice() {
    // Ordinal 1000 exists on no machine; on a CPU-only build the answer is EUNSUPPORTED.
    ShardrecException e = assertThrows(ShardrecException.class,
        () -> Mlp.create(3, WIDTHS, null, 7, "m", DeviceType.CUDA, 1000, DenseMath.TF32));
    assertTrue(e.code() == ShardrecException.ENODEVICE
               || e.code() == ShardrecException.EUNSUPPORTED, e.getMessage());
  }

  @Test
  void reducedPrecisionOnTheHostIsInvalid() {
    ShardrecException e = assertThrows(ShardrecException.class,
        () -> Mlp.create(3, WIDTHS, null, 7, "m", DeviceType.HOST, 0, DenseMath.BF16));
    assertEquals(ShardrecException.EINVAL, e.code());
    assertTrue(e.getMessage().contains("SHARDREC_DEVICE_CUDA"), e.getMessage());
  }

  @Test
  void hostMlpReportsHost() {
    try (Mlp m = Mlp.create(3, WIDTHS, null, 7, "m", DeviceType.HOST, 0, DenseMath.FP32)) {
      assertEquals(DeviceType.HOST, m.device());
    }
  }
}
