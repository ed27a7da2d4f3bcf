// Update rules of the fused optimizer (SHARDREC_OPTIMIZER_*, shardrec/config.h).
package org.shardrec;

/** Update rules of the fused optimizer (SHARDREC_OPTIMIZER_*, shardrec/config.h). */
public enum OptimizerType {
  SGD(0),
  ADAGRAD(1),
  ROWWISE_ADAGRAD(2),
  ADAM(3),
  PARTIAL_ROWWISE_ADAM(4),
  LAMB(5);

  private final int code;

  OptimizerType(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static OptimizerType of(int code) {
    for (OptimizerType v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no OptimizerType has code " + code);
  }
}
