// One tiered table's statistics on this rank (shardrec_tier_stats_t), read by
// EmbeddingCollection.tierStats.
package org.shardrec;

/**
 * This rank's part of one tiered table ({@link EmbeddingCollection#tierStats}), summed over its
 * shards of it, since creation. An immutable value: a copy, safe to keep and share.
 */
public final class TierStats {
  public final long cacheBytes;
  public final long cacheSlots;
  public final long cacheRows;
  /** Distinct rows of a forward found in the cache. */
  public final long hits;
  /** Distinct rows of a forward that were not (read or initialised). */
  public final long misses;
  public final double hitRate;
  public final long diskReads;
  public final long diskReadBytes;
  public final long diskBytes;
  /** Misses served from the write-back queue. */
  public final long queueReads;
  /** Misses of rows never written (their initial values). */
  public final long initialised;
  /** Misses read one batch ahead (pipelined input distribution). */
  public final long prefetched;
  /** Dirty rows evicted to the write-back queue. */
  public final long writeBacks;
  /** Records the write-back thread stored (the collection's queue). */
  public final long written;
  public final long queueDepth;
  public final long queueMaxDepth;
  public final long steps;
  /** Seconds forwards waited for rows (an unfinished prefetch plus misses read at the forward). */
  public final double exposedFetchSeconds;
  public final double lastExposedFetchSeconds;

  private TierStats(org.shardrec.swig.tier_stats s) {
    cacheBytes = s.getCache_bytes();
    cacheSlots = s.getCache_slots();
    cacheRows = s.getCache_rows();
    hits = s.getHits();
    misses = s.getMisses();
    hitRate = s.getHit_rate();
    diskReads = s.getDisk_reads();
    diskReadBytes = s.getDisk_read_bytes();
    diskBytes = s.getDisk_bytes();
    queueReads = s.getQueue_reads();
    initialised = s.getInitialised();
    prefetched = s.getPrefetched();
    writeBacks = s.getWrite_backs();
    written = s.getWritten();
    queueDepth = s.getQueue_depth();
    queueMaxDepth = s.getQueue_max_depth();
    steps = s.getSteps();
    exposedFetchSeconds = s.getExposed_fetch_seconds();
    lastExposedFetchSeconds = s.getLast_exposed_fetch_seconds();
  }

  static TierStats fromNative(org.shardrec.swig.tier_stats s) {
    return new TierStats(s);
  }

  /** Every field, in declaration order, as name=value. */
  @Override
  public String toString() {
    return "TierStats{cacheBytes=" + cacheBytes + ", cacheSlots=" + cacheSlots + ", cacheRows="
        + cacheRows + ", hits=" + hits + ", misses=" + misses + ", hitRate=" + hitRate
        + ", diskReads=" + diskReads + ", diskReadBytes=" + diskReadBytes + ", diskBytes="
        + diskBytes + ", queueReads=" + queueReads + ", initialised=" + initialised
        + ", prefetched=" + prefetched + ", writeBacks=" + writeBacks + ", written=" + written
        + ", queueDepth=" + queueDepth + ", queueMaxDepth=" + queueMaxDepth + ", steps=" + steps
        + ", exposedFetchSeconds=" + exposedFetchSeconds + ", lastExposedFetchSeconds="
        + lastExposedFetchSeconds + "}";
  }
}
