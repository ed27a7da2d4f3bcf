// This rank's part of one dynamic table (shardrec_dynamic_table_stats_t), read by
// EmbeddingCollection.dynamicStats.
package org.shardrec;

/**
 * This rank's part of one dynamic table: the rows of the row blocks it holds and what training
 * forwards did to them. The table's totals are the sums over ranks. "last" counts are those of
 * the last training forward, "total" counts those since the collection was created. A plain
 * value: a copy, safe to keep and share.
 */
public final class DynamicTableStats {
  /** Rows (ids with a row) held here. */
  public long size;
  /** Slots of the row blocks held here. */
  public long capacity;
  /** size / capacity; 0 when capacity is 0. */
  public double loadFactor;
  public long lastInserted;
  public long lastEvicted;
  /** Distinct ids below the admission threshold. */
  public long lastRejectedAdmission;
  /** Distinct admitted ids that found no slot. */
  public long lastRejectedFull;
  public long totalInserted;
  public long totalEvicted;
  public long totalRejectedAdmission;
  public long totalRejectedFull;
  /** Bytes of the id index, per-slot metadata and admission counts (unsigned in C). */
  public long metadataBytes;
  /**
   * The capacity in bytes: what this rank allocated for the table (every slot's row and optimizer
   * state, each shard's zero row, and {@link #metadataBytes}; unsigned in C).
   */
  public long capacityBytes;
  /**
   * Distinct ids without a row whose count reached the admission threshold in the last training
   * forward (every new id at a threshold of 0 or 1); each got a row or found no slot, so this is
   * {@link #lastInserted} + {@link #lastRejectedFull}.
   */
  public long lastAdmitted;
  /** As {@link #lastAdmitted}, summed over the forwards since creation. */
  public long totalAdmitted;

  static DynamicTableStats fromNative(org.shardrec.swig.dynamic_table_stats s) {
    DynamicTableStats v = new DynamicTableStats();
    v.size = s.getSize();
    v.capacity = s.getCapacity();
    v.loadFactor = s.getLoad_factor();
    v.lastInserted = s.getLast_inserted();
    v.lastEvicted = s.getLast_evicted();
    v.lastRejectedAdmission = s.getLast_rejected_admission();
    v.lastRejectedFull = s.getLast_rejected_full();
    v.totalInserted = s.getTotal_inserted();
    v.totalEvicted = s.getTotal_evicted();
    v.totalRejectedAdmission = s.getTotal_rejected_admission();
    v.totalRejectedFull = s.getTotal_rejected_full();
    v.metadataBytes = s.getMetadata_bytes();
    v.capacityBytes = s.getCapacity_bytes();
    v.lastAdmitted = s.getLast_admitted();
    v.totalAdmitted = s.getTotal_admitted();
    return v;
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
