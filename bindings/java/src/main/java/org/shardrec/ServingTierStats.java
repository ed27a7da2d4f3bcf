// The row cache of a table served from the checkpoint's files (shardrec_serving_tier_stats_t),
// read by Inference.tierStats.
package org.shardrec;

/**
 * The row cache of a table served from the checkpoint's files ({@link Inference#tierStats}), in
 * the version that answered: counts start at 0 with each version. An immutable copy.
 */
public final class ServingTierStats {
  /** The handle's version these figures belong to. */
  public final long modelVersion;
  public final long cacheBytes;
  public final long cacheSlots;
  public final long cacheRows;
  /** Distinct rows of a request found in the cache. */
  public final long hits;
  /** Distinct rows of a request read from the checkpoint's files. */
  public final long misses;
  public final double hitRate;
  /**
   * Reads issued to the files: a request's misses are read as one batch, so rows lying close
   * share a read (fewer reads than misses).
   */
  public final long diskReads;
  public final long diskReadBytes;

  private ServingTierStats(org.shardrec.swig.serving_tier_stats s) {
    modelVersion = s.getModel_version();
    cacheBytes = s.getCache_bytes();
    cacheSlots = s.getCache_slots();
    cacheRows = s.getCache_rows();
    hits = s.getHits();
    misses = s.getMisses();
    hitRate = s.getHit_rate();
    diskReads = s.getDisk_reads();
    diskReadBytes = s.getDisk_read_bytes();
  }

  static ServingTierStats fromNative(org.shardrec.swig.serving_tier_stats s) {
    return new ServingTierStats(s);
  }

  @Override
  public String toString() {
    return "ServingTierStats{version=" + modelVersion + ", cacheRows=" + cacheRows + "/"
        + cacheSlots + ", hits=" + hits + ", misses=" + misses + ", hitRate=" + hitRate
        + ", diskReads=" + diskReads + ", diskReadBytes=" + diskReadBytes + "}";
  }
}
