// Element types (SHARDREC_DTYPE_*, shardrec/common.h).
package org.shardrec;

import org.shardrec.swig.Native;

/** Element types (SHARDREC_DTYPE_*, shardrec/common.h). */
public enum DType {
  FLOAT32(0),
  FLOAT16(1),
  BFLOAT16(2),
  FLOAT64(3),
  INT32(4),
  INT64(5),
  UINT8(6),
  /** Table weight storage only: OCP E4M3 rows with a per-row scale (size() is 0). */
  FP8_E4M3(7),
  /** Table weight storage only: OCP E5M2 rows with a per-row scale (size() is 0). */
  FP8_E5M2(8);

  private final int code;

  DType(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** Size in bytes of one element (shardrec_dtype_size). */
  public int size() {
    return (int) Native.dtype_size(code);
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static DType of(int code) {
    for (DType v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no DType has code " + code);
  }
}
