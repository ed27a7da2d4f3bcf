// Where buffers live (SHARDREC_DEVICE_*, shardrec/common.h).
package org.shardrec;

/** Where buffers live (SHARDREC_DEVICE_*, shardrec/common.h). */
public enum DeviceType {
  /** Host memory; operations are synchronous. */
  HOST(0),
  /** CUDA device memory. */
  CUDA(1);

  private final int code;

  DeviceType(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static DeviceType of(int code) {
    for (DeviceType v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no DeviceType has code " + code);
  }
}
