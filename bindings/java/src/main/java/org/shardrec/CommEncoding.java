// How the floats of a collection's embedding collectives travel (shardrec/embedding_options.h).
package org.shardrec;

/**
 * How the floats of a collection's embedding collectives travel between ranks
 * (shardrec_comm_encoding_t in shardrec/embedding_options.h, which documents the error of each).
 */
public enum CommEncoding {
  /** Exact fp32 (the default). */
  FP32(0),
  /** IEEE half: relative error at most 2^-11, saturates beyond +-65504. */
  FP16(1),
  /** bfloat16: relative error at most 2^-8, fp32's range. */
  BF16(2),
  /**
   * OCP FP8 E4M3 in 32-value blocks with a shared power-of-two scale: error at most
   * max(2^-4 |x|, 2^-17 times the block's largest magnitude).
   */
  FP8_E4M3(3),
  /** OCP FP8 E5M2, the same blocks: error at most max(2^-3 |x|, 2^-31 times the block's largest). */
  FP8_E5M2(4);

  private final int code;

  CommEncoding(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static CommEncoding of(int code) {
    for (CommEncoding v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no CommEncoding has code " + code);
  }
}
