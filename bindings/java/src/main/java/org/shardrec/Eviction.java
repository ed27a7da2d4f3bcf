// What a full dynamic table does with an id it would insert (SHARDREC_EVICTION_*, config.h).
package org.shardrec;

/** What a full dynamic table does with an id it would insert (SHARDREC_EVICTION_*). */
public enum Eviction {
  /** Nothing leaves: a full shard refuses new ids, which read as zeros and train nothing. */
  NONE(0),
  /** The row seen longest ago leaves first (ties: smallest id). */
  LRU(1),
  /** The row seen least often leaves first (ties: seen longest ago, then smallest id). */
  LFU(2),
  /** Only rows not seen for more than ttlSteps steps may leave, longest ago first. */
  TTL(3),
  /**
   * The row with the lowest score the caller set leaves first (ties: smallest id); new rows
   * score 0 ({@link EmbeddingCollection#dynamicSetScores}).
   */
  SCORE(4);

  private final int code;

  Eviction(int code) {
    this.code = code;
  }

  /** The C value. */
  public int code() {
    return code;
  }

  /** The constant of C value {@code code}; ShardrecException when there is none. */
  public static Eviction of(int code) {
    for (Eviction v : values()) {
      if (v.code == code) return v;
    }
    throw ShardrecException.invalid("no Eviction has code " + code);
  }
}
