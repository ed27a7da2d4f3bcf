// A tiered table of a collection's options (shardrec_table_tier_t, docs/disk-tier.md).
package org.shardrec;

/**
 * Makes table {@code table} tiered on this rank ({@link Config.EmbeddingOptions#tiers}): its rows
 * and optimizer state live in stores under {@code dir} (this rank's directory, created if missing;
 * scratch for the collection's life) and a DRAM cache of {@code cacheBytes} holds the hot rows.
 * Results are bit-identical to the table in memory. Host collections and fixed or dynamic, not
 * data-parallel tables only; checkpoints save and load tiered tables (in the in-memory format), 2D
 * meshes and table import refuse them. An immutable value; a null table or dir throws
 * ShardrecException (EINVAL).
 */
public final class TableTier {
  public final String table;
  public final String dir;
  public final long cacheBytes;

  public TableTier(String table, String dir, long cacheBytes) {
    this.table = ShardrecException.nonNull(table, "table");
    this.dir = ShardrecException.nonNull(dir, "dir");
    this.cacheBytes = cacheBytes;
  }
}
