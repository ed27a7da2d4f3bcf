// How table weights are initialised (SHARDREC_INIT_*, shardrec/config.h).
package org.shardrec;

/** How table weights are initialised (SHARDREC_INIT_*, shardrec/config.h). */
public enum InitKind {
  /** Uniform in [-sqrt(1/rows), +sqrt(1/rows)]. */
  DEFAULT(0),
  /** Uniform in [low, high). */
  UNIFORM(1),
  /** Every element equals low. */
  CONSTANT(2);

  private final int code;

  InitKind(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static InitKind of(int code) {
    for (InitKind v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no InitKind has code " + code);
  }
}
