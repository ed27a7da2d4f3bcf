// What a replica sync averages (SHARDREC_SYNC_*, shardrec/replica.h).
package org.shardrec;

/** What a replica sync averages (SHARDREC_SYNC_*, shardrec/replica.h). */
public enum SyncMode {
  /** The mesh's configured mode. */
  DEFAULT(0),
  /** Weights, every optimizer state and the step. */
  WEIGHTS_AND_STATE(1),
  /** Weights only; optimizer state stays per replica. */
  WEIGHTS_ONLY(2);

  private final int code;

  SyncMode(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static SyncMode of(int code) {
    for (SyncMode v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no SyncMode has code " + code);
  }
}
