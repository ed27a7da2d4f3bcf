// Reduction operators (SHARDREC_REDUCE_*, shardrec/comm.h).
package org.shardrec;

/** Reduction operators (SHARDREC_REDUCE_*, shardrec/comm.h). */
public enum ReduceOp {
  SUM(0),
  /** The sum divided by the number of ranks. */
  AVG(1),
  MAX(2),
  MIN(3);

  private final int code;

  ReduceOp(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static ReduceOp of(int code) {
    for (ReduceOp v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no ReduceOp has code " + code);
  }
}
