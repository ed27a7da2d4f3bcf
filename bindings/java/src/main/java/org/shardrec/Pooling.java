// How a bag of rows becomes one output row (SHARDREC_POOLING_*, shardrec/config.h).
package org.shardrec;

/** How a bag of rows becomes one output row (SHARDREC_POOLING_*, shardrec/config.h). */
public enum Pooling {
  /** Sum of the rows of the bag. */
  SUM(0),
  /** Mean of the rows of the bag (0 for an empty bag). */
  MEAN(1),
  /** No pooling: one output row per id. */
  NONE(2);

  private final int code;

  Pooling(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static Pooling of(int code) {
    for (Pooling v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no Pooling has code " + code);
  }
}
