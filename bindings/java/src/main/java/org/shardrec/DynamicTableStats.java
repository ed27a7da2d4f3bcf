// One dynamic table's statistics (shardrec_dynamic_table_stats_t): this rank's part, read by
// EmbeddingCollection.dynamicStats, or the whole table's, by dynamicStatsGlobal.
package org.shardrec;

/**
 * This rank's part of one dynamic table ({@link EmbeddingCollection#dynamicStats}): the rows of
 * the row blocks it holds and what training forwards did to them; or the whole table's, the sums
 * over ranks ({@link EmbeddingCollection#dynamicStatsGlobal}). "last" counts are those of the
 * last training forward, "total" counts those since the collection was created. An immutable
 * value (final fields, equals and hashCode by value): a copy, safe to keep and share.
 */
public final class DynamicTableStats {
  /** Rows (ids with a row) held here. */
  public final long size;
  /** Slots of the row blocks held here. */
  public final long capacity;
  /** size / capacity; 0 when capacity is 0. */
  public final double loadFactor;
  public final long lastInserted;
  public final long lastEvicted;
  /** Distinct ids below the admission threshold. */
  public final long lastRejectedAdmission;
  /** Distinct admitted ids that found no slot. */
  public final long lastRejectedFull;
  public final long totalInserted;
  public final long totalEvicted;
  public final long totalRejectedAdmission;
  public final long totalRejectedFull;
  /** Bytes of the id index, per-slot metadata and admission counts (unsigned in C). */
  public final long metadataBytes;
  /**
   * The capacity in bytes: what this rank allocated for the table (every slot's row and optimizer
   * state, each shard's zero row, and {@link #metadataBytes}; unsigned in C).
   */
  public final long capacityBytes;
  /**
   * Distinct ids without a row whose count reached the admission threshold in the last training
   * forward (every new id at a threshold of 0 or 1); each got a row or found no slot, so this is
   * {@link #lastInserted} + {@link #lastRejectedFull}.
   */
  public final long lastAdmitted;
  /** As {@link #lastAdmitted}, summed over the forwards since creation. */
  public final long totalAdmitted;

  private DynamicTableStats(org.shardrec.swig.dynamic_table_stats s) {
    size = s.getSize();
    capacity = s.getCapacity();
    loadFactor = s.getLoad_factor();
    lastInserted = s.getLast_inserted();
    lastEvicted = s.getLast_evicted();
    lastRejectedAdmission = s.getLast_rejected_admission();
    lastRejectedFull = s.getLast_rejected_full();
    totalInserted = s.getTotal_inserted();
    totalEvicted = s.getTotal_evicted();
    totalRejectedAdmission = s.getTotal_rejected_admission();
    totalRejectedFull = s.getTotal_rejected_full();
    metadataBytes = s.getMetadata_bytes();
    capacityBytes = s.getCapacity_bytes();
    lastAdmitted = s.getLast_admitted();
    totalAdmitted = s.getTotal_admitted();
  }

  static DynamicTableStats fromNative(org.shardrec.swig.dynamic_table_stats s) {
    return new DynamicTableStats(s);
  }

  private long[] counts() {
    return new long[] {size, capacity, lastInserted, lastEvicted, lastRejectedAdmission,
                       lastRejectedFull, totalInserted, totalEvicted, totalRejectedAdmission,
                       totalRejectedFull, metadataBytes, capacityBytes, lastAdmitted,
                       totalAdmitted};
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof DynamicTableStats)) return false;
    DynamicTableStats other = (DynamicTableStats) o;
    return java.util.Arrays.equals(counts(), other.counts())
        && Double.compare(loadFactor, other.loadFactor) == 0;
  }

  @Override
  public int hashCode() {
    return 31 * java.util.Arrays.hashCode(counts()) + Double.hashCode(loadFactor);
  }

  @Override
  public String toString() {
    return "DynamicTableStats(size=" + size + ", capacity=" + capacity + ", loadFactor="
        + loadFactor + ", last: admitted=" + lastAdmitted + " inserted=" + lastInserted
        + " evicted=" + lastEvicted
        + " rejectedAdmission=" + lastRejectedAdmission + " rejectedFull=" + lastRejectedFull
        + ", total: admitted=" + totalAdmitted + " inserted=" + totalInserted + " evicted="
        + totalEvicted
        + " rejectedAdmission=" + totalRejectedAdmission + " rejectedFull=" + totalRejectedFull
        + ", metadataBytes=" + metadataBytes + ", capacityBytes=" + capacityBytes + ")";
  }
}
