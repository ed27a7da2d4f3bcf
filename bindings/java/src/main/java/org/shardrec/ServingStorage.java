// How an inference handle stores a table's rows (SHARDREC_SERVING_*, shardrec/inference.h).
package org.shardrec;

/**
 * How an inference handle stores a table's rows (shardrec/inference.h has the error bounds).
 * INT8 and INT4 are row-wise: a row reads back within scale / 2 of its trained values, with
 * scale = (row max - row min) / (2^bits - 1). FP8_E4M3 and FP8_E5M2 store an fp32 power-of-two
 * scale per row and one FP8 code per value: a value x reads back within max(2^-4 |x|, 2^-10 scale)
 * (E4M3) or max(2^-3 |x|, 2^-17 scale) (E5M2).
 */
public enum ServingStorage {
  /** The checkpoint's dtype (fp32, fp16 or bf16): lookups equal the training forward bit for bit. */
  AS_TRAINED(0),
  /** 4 bytes per value. */
  FP32(1),
  /** IEEE half, rounded to nearest even. */
  FP16(2),
  /** bfloat16, rounded to nearest even. */
  BF16(3),
  /** Row-wise 8-bit: 1 byte per value plus an fp32 scale and bias per row. */
  INT8(4),
  /** Row-wise 4-bit: 2 values per byte plus an fp32 scale and bias per row. */
  INT4(5),
  /** FP8 E4M3: 1 byte per value plus an fp32 power-of-two scale per row. */
  FP8_E4M3(6),
  /** FP8 E5M2: 1 byte per value plus an fp32 power-of-two scale per row. */
  FP8_E5M2(7);

  private final int code;

  ServingStorage(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static ServingStorage of(int code) {
    for (ServingStorage v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no ServingStorage has code " + code);
  }
}
