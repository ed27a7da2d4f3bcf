// Sharding plan: built by the planner from Java configs, or read from JSON; immutable.
package org.shardrec;

import java.util.List;
import org.shardrec.swig.Native;
import org.shardrec.swig.shard_t;
import org.shardrec.swig.topology;

/**
 * An immutable sharding plan; its queries are safe from any number of threads, and close() from
 * any thread waits for the queries (and the creates that read the plan) running on others.
 */
public final class Plan extends NativeHandle {
  Plan(long handle) {
    super(handle, Native::plan_destroy);
  }

  /** One rectangle of a table on one rank. */
  public static final class Shard {
    private final long rowOffset;
    private final long rows;
    private final int colOffset;
    private final int cols;
    private final int rank;

    public Shard(long rowOffset, long rows, int colOffset, int cols, int rank) {
      this.rowOffset = rowOffset;
      this.rows = rows;
      this.colOffset = colOffset;
      this.cols = cols;
      this.rank = rank;
    }

    public long rowOffset() {
      return rowOffset;
    }

    public long rows() {
      return rows;
    }

    public int colOffset() {
      return colOffset;
    }

    public int cols() {
      return cols;
    }

    public int rank() {
      return rank;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof Shard)) return false;
      Shard other = (Shard) o;
      return rowOffset == other.rowOffset && rows == other.rows && colOffset == other.colOffset
          && cols == other.cols && rank == other.rank;
    }

    @Override
    public int hashCode() {
      return java.util.Objects.hash(rowOffset, rows, colOffset, cols, rank);
    }

    @Override
    public String toString() {
      return "Shard[rowOffset=" + rowOffset + ", rows=" + rows + ", colOffset=" + colOffset
          + ", cols=" + cols + ", rank=" + rank + "]";
    }
  }

  /** Plans {@code tables} (reading {@code features}) on {@code topology}. */
  public static Plan create(List<Config.Table> tables, List<Config.Feature> features,
                            Config.Topology topology, List<Config.Constraints> constraints) {
    if (tables == null) throw ShardrecException.invalid("tables must not be null");
    if (features == null) throw ShardrecException.invalid("features must not be null");
    for (Config.Table t : tables) {
      if (t == null) throw ShardrecException.invalid("tables must not hold null");
    }
    for (Config.Feature f : features) {
      if (f == null) throw ShardrecException.invalid("features must not hold null");
    }
    long spec = Native.bind_plan_spec_new();
    if (spec == 0) throw new OutOfMemoryError("plan spec");
    try {
      for (Config.Feature f : features) Native.bind_plan_spec_add_feature(spec, f.name, f.poolingFactor);
      for (Config.Table t : tables) {
        // The fields are public: a null set directly is refused here, naming field and table.
        Native.bind_plan_spec_add_table(
            spec, t.name, t.rows, t.dim,
            ShardrecException.nonNull(t.pooling, "pooling of table " + t.name).code(),
            ShardrecException.nonNull(t.dtype, "dtype of table " + t.name).code(), t.features,
            ShardrecException.nonNull(t.initKind, "initKind of table " + t.name).code(),
            t.initLow, t.initHigh);
        if (t.featureNames != null) {
          for (String name : t.featureNames) {
            Native.bind_plan_spec_add_table_feature_name(spec, name);
          }
        }
        if (t.optimizer != null) {
          org.shardrec.swig.optimizer_config o = t.optimizer.toNative();
          try {
            Native.bind_plan_spec_set_table_optimizer(spec, o);
          } finally {
            o.delete();
          }
        }
        if (t.dynamic != null) {
          org.shardrec.swig.dynamic_table_config d = t.dynamic.toNative();
          try {
            Native.bind_plan_spec_set_table_dynamic(spec, d);
          } finally {
            d.delete();
          }
        }
      }
      if (constraints != null) {
        for (Config.Constraints c : constraints) {
          if (c == null) throw ShardrecException.invalid("constraints must not hold null");
          // C reads the cache as unsigned: a negative one would plan a cache of exabytes.
          if (c.tierCacheBytes < 0) {
            throw ShardrecException.invalid("tierCacheBytes of table " + c.table
                                            + " must be >= 0, got " + c.tierCacheBytes);
          }
          Native.bind_plan_spec_add_constraints(spec, c.table, c.shardingTypes, c.minPartition,
                                                c.ranks, c.poolingFactors);
          Native.bind_plan_spec_set_constraints_tier(spec, c.tierCacheBytes, c.tierHitRate,
                                                     c.idZipfAlpha);
        }
      }
      if (topology != null) {
        // C reads memory as unsigned: a negative capacity would plan exabytes per rank.
        if (topology.memoryBytes < 0) {
          throw ShardrecException.invalid("memoryBytes must be >= 0, got "
                                          + topology.memoryBytes);
        }
        if (topology.memoryBytesPerRank != null) {
          for (int r = 0; r < topology.memoryBytesPerRank.length; ++r) {
            if (topology.memoryBytesPerRank[r] < 0) {
              throw ShardrecException.invalid("memoryBytesPerRank[" + r + "] must be >= 0, got "
                                              + topology.memoryBytesPerRank[r]);
            }
          }
        }
        topology t = Native.bind_plan_spec_topology(spec);
        topology.copyTo(t);
        if (topology.memoryBytesPerRank != null) {
          Native.bind_plan_spec_set_memory_bytes_per_rank(spec, topology.memoryBytesPerRank);
        }
      }
      long[] out = new long[1];
      Native.bind_plan_create(out, spec);
      return new Plan(out[0]);
    } finally {
      Native.bind_plan_spec_free(spec);
    }
  }

  /** Reads and validates a plan written by {@link #toJson()}. */
  public static Plan fromJson(String json) {
    long[] out = new long[1];
    Native.plan_from_json(out, json);
    return new Plan(out[0]);
  }

  public String toJson() {
    String[] out = new String[1];
    use(h -> Native.plan_to_json(h, out));
    return out[0];
  }

  public String stats() {
    String[] out = new String[1];
    use(h -> Native.plan_stats(h, out));
    return out[0];
  }

  /** Stable 64-bit hash (compare with Long.toUnsignedString for display). */
  public long hash() {
    long[] out = new long[1];
    use(h -> Native.plan_hash(h, out));
    return out[0];
  }

  public int worldSize() {
    int[] out = new int[1];
    use(h -> Native.plan_world_size(h, out));
    return out[0];
  }

  /** Ranks per node of the topology the plan was made for (node-local sharding types). */
  public int ranksPerNode() {
    int[] out = new int[1];
    use(h -> Native.plan_ranks_per_node(h, out));
    return out[0];
  }

  public int numTables() {
    long[] out = new long[1];
    use(h -> Native.plan_num_tables(h, out));
    return (int) out[0];
  }

  public int numFeatures() {
    long[] out = new long[1];
    use(h -> Native.plan_num_features(h, out));
    return (int) out[0];
  }

  public String tableName(int table) {
    String[] out = new String[1];
    use(h -> Native.plan_table_name(h, Indices.of("table", table), out));
    return out[0];
  }

  public String featureName(int feature) {
    String[] out = new String[1];
    use(h -> Native.plan_feature_name(h, Indices.of("feature", feature), out));
    return out[0];
  }

  /** Index of a table; ShardrecException(ENOTFOUND) when there is none. */
  public int findTable(String name) {
    long[] out = new long[1];
    use(h -> Native.plan_find_table(h, name, out));
    return (int) out[0];
  }

  public long tableRows(int table) {
    long[] out = new long[1];
    use(h -> Native.plan_table_rows(h, Indices.of("table", table), out));
    return out[0];
  }

  public int tableDim(int table) {
    int[] out = new int[1];
    use(h -> Native.plan_table_dim(h, Indices.of("table", table), out));
    return out[0];
  }

  /** How table {@code table} is sharded. */
  public ShardingType tableSharding(int table) {
    int[] type = new int[1];
    long[] n = new long[1];
    use(h -> Native.plan_table_sharding(h, Indices.of("table", table), type, n));
    return ShardingType.of(type[0]);
  }

  public int numShards(int table) {
    int[] type = new int[1];
    long[] n = new long[1];
    use(h -> Native.plan_table_sharding(h, Indices.of("table", table), type, n));
    return (int) n[0];
  }

  public Shard shard(int table, int index) {
    shard_t s = new shard_t();
    try {
      use(h -> Native.plan_shard(h, Indices.of("table", table), Indices.of("shard", index), s));
      return new Shard(s.getRow_offset(), s.getRows(), s.getCol_offset(), s.getCols(), s.getRank());
    } finally {
      s.delete();
    }
  }
}
