// What a collection does with non-finite inputs (shardrec/embedding_options.h).
package org.shardrec;

/** How a collection treats a NaN or infinite per-id weight or output gradient (shardrec_non_finite_policy_t). */
public enum NonFinitePolicy {
  /** Rejected like any bad input (EINVAL naming the feature/sample), nothing changes (the default). */
  CHECK(0),
  /** No check: non-finite values flow into outputs, weights and optimizer state. */
  ALLOW(1);

  private final int code;

  NonFinitePolicy(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static NonFinitePolicy of(int code) {
    for (NonFinitePolicy v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no NonFinitePolicy has code " + code);
  }
}
