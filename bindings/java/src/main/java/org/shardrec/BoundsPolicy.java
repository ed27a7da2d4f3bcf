// What a collection does with an id outside its table (shardrec/embedding_options.h).
package org.shardrec;

/** What a collection does with an id outside its table (shardrec/embedding_options.h). */
public enum BoundsPolicy {
  /** Reject the batch with SHARDREC_EINVAL (default). */
  ERROR(0),
  /** Use row 0 instead. */
  CLAMP(1),
  /** Drop the id from its bag (it counts for nothing, MEAN too). */
  SKIP(2);

  private final int code;

  BoundsPolicy(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static BoundsPolicy of(int code) {
    for (BoundsPolicy v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no BoundsPolicy has code " + code);
  }
}
