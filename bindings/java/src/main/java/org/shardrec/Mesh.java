// 2D mesh (replica.h): a world cut into replica groups x sharding groups, collections sharded
// over the sharding group and replicated over the replica group, and the replica sync.
package org.shardrec;

import org.shardrec.swig.Native;
import org.shardrec.swig.mesh_options;

/**
 * This rank's view of a 2D mesh. One thread at a time (close() from any thread waits for the
 * call in flight). Syncs use the built-in collective unless a {@link SyncHook} is installed.
 */
public final class Mesh extends NativeHandle {
  // Deprecated aliases of the earlier docs' constants (see the top of Config).
  /** @deprecated Use {@link MeshLayout#DEFAULT}. */
  @Deprecated
  public static final MeshLayout LAYOUT_DEFAULT = MeshLayout.DEFAULT;

  /** @deprecated Use {@link MeshLayout#INTER_HOST}. */
  @Deprecated
  public static final MeshLayout LAYOUT_INTER_HOST = MeshLayout.INTER_HOST;

  /** @deprecated Use {@link SyncMode#DEFAULT}. */
  @Deprecated
  public static final SyncMode SYNC_DEFAULT = SyncMode.DEFAULT;

  /** @deprecated Use {@link SyncMode#WEIGHTS_AND_STATE}. */
  @Deprecated
  public static final SyncMode SYNC_WEIGHTS_AND_STATE = SyncMode.WEIGHTS_AND_STATE;

  /** @deprecated Use {@link SyncMode#WEIGHTS_ONLY}. */
  @Deprecated
  public static final SyncMode SYNC_WEIGHTS_ONLY = SyncMode.WEIGHTS_ONLY;
  /** The installed hook's native payload (0: none), freed once the mesh no longer uses it. */
  private final long[] hookPayload;

  private Mesh(long handle) {
    this(handle, new long[1]);
  }

  /** The destroy action shares the payload box, not the wrapper, so a leaked mesh frees both. */
  private Mesh(long handle, long[] hookPayload) {
    super(handle, h -> {
      Native.mesh_destroy(h);
      Native.bind_java_sync_hook_free(hookPayload[0]);
      hookPayload[0] = 0;
    });
    this.hookPayload = hookPayload;
  }

  /**
   * A user collective replacing the sync all-reduce (TorchRec's custom all-reduce hook): called
   * once per coalesced buffer of {@code count} elements of {@code dtype} (float buffers; integer
   * counters keep the built-in collective), it must leave in {@code data} the element-wise
   * AVERAGE over the replica group. {@code data} (native byte order) is valid only during the
   * call. A thrown {@link ShardrecException} fails the sync with its code, any other exception
   * with SHARDREC_ERROR.
   */
  @FunctionalInterface
  public interface SyncHook {
    void average(java.nio.ByteBuffer data, long count, DType dtype);
  }

  /** What the native side calls: adapts byte order and dtype. */
  static final class NativeSyncHook {
    private final SyncHook hook;

    NativeSyncHook(SyncHook hook) {
      this.hook = hook;
    }

    void sync(java.nio.ByteBuffer data, long count, int dtype) {
      hook.average(data.order(java.nio.ByteOrder.nativeOrder()), count, DType.of(dtype));
    }
  }

  /** Installs {@code hook} for the following syncs; null restores the built-in collective. */
  public void setSyncHook(SyncHook hook) {
    NativeSyncHook adapter = hook == null ? null : new NativeSyncHook(hook);
    long[] payload = new long[1];
    use(h -> {
      Native.bind_mesh_set_java_sync_hook(h, adapter, payload);
      // The mesh now uses the new payload (or none): the old one can go. Under use(), so the
      // destroy action, which frees the payload too, does not run meanwhile.
      Native.bind_java_sync_hook_free(hookPayload[0]);
      hookPayload[0] = payload[0];
      return null;
    });
  }

  /** Options of a mesh; zero fields mean the library defaults (a 1D mesh, sync every step). */
  public static final class Options {
    public int shardingGroupSize;
    public MeshLayout layout = MeshLayout.DEFAULT;
    public int ranksPerNode;
    public int syncInterval;
    public SyncMode syncMode = SyncMode.DEFAULT;

    /** S, the ranks of one sharding group; must divide the world size. */
    public Options shardingGroupSize(int v) {
      shardingGroupSize = v;
      return this;
    }

    public Options layout(MeshLayout v) {
      layout = ShardrecException.nonNull(v, "layout");
      return this;
    }

    /** Only used by {@link Mesh#describe()}. */
    public Options ranksPerNode(int v) {
      ranksPerNode = v;
      return this;
    }

    /** {@link Mesh#step} syncs every {@code v} steps. */
    public Options syncInterval(int v) {
      syncInterval = v;
      return this;
    }

    public Options syncMode(SyncMode v) {
      syncMode = ShardrecException.nonNull(v, "syncMode");
      return this;
    }

    mesh_options toNative() {
      ShardrecException.nonNull(layout, "layout");
      ShardrecException.nonNull(syncMode, "syncMode");
      mesh_options o = new mesh_options();
      Native.mesh_options_init(o, NativeConstants.MESH_OPTIONS_VERSION);
      o.setSharding_group_size(shardingGroupSize);
      o.setLayout(layout.code());
      o.setRanks_per_node(ranksPerNode);
      o.setSync_interval(syncInterval);
      o.setSync_mode(syncMode.code());
      return o;
    }
  }

  /** Where this rank sits: sharding group g and plan rank p in it, replica group and rank. */
  public static final class Coords {
    private final int shardingGroup;
    private final int shardRank;
    private final int replicaGroup;
    private final int replicaRank;

    public Coords(int shardingGroup, int shardRank, int replicaGroup, int replicaRank) {
      this.shardingGroup = shardingGroup;
      this.shardRank = shardRank;
      this.replicaGroup = replicaGroup;
      this.replicaRank = replicaRank;
    }

    public int shardingGroup() {
      return shardingGroup;
    }

    public int shardRank() {
      return shardRank;
    }

    public int replicaGroup() {
      return replicaGroup;
    }

    public int replicaRank() {
      return replicaRank;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof Coords)) return false;
      Coords other = (Coords) o;
      return shardingGroup == other.shardingGroup && shardRank == other.shardRank
          && replicaGroup == other.replicaGroup && replicaRank == other.replicaRank;
    }

    @Override
    public int hashCode() {
      return java.util.Objects.hash(shardingGroup, shardRank, replicaGroup, replicaRank);
    }

    @Override
    public String toString() {
      return "Coords[shardingGroup=" + shardingGroup + ", shardRank=" + shardRank
          + ", replicaGroup=" + replicaGroup + ", replicaRank=" + replicaRank + "]";
    }
  }

  /**
   * Figures of the last sync: bytes this rank contributed (averaged elements and, with dynamic
   * tables, the rows it sent to their merge), collectives issued, syncs since creation.
   */
  public static final class SyncStats {
    private final long bytes;
    private final int collectives;
    private final long syncs;

    public SyncStats(long bytes, int collectives, long syncs) {
      this.bytes = bytes;
      this.collectives = collectives;
      this.syncs = syncs;
    }

    public long bytes() {
      return bytes;
    }

    public int collectives() {
      return collectives;
    }

    public long syncs() {
      return syncs;
    }

    @Override
    public boolean equals(Object o) {
      if (!(o instanceof SyncStats)) return false;
      SyncStats other = (SyncStats) o;
      return bytes == other.bytes && collectives == other.collectives && syncs == other.syncs;
    }

    @Override
    public int hashCode() {
      return java.util.Objects.hash(bytes, collectives, syncs);
    }

    @Override
    public String toString() {
      return "SyncStats[bytes=" + bytes + ", collectives=" + collectives + ", syncs=" + syncs + "]";
    }
  }

  /** Splits {@code world} into the mesh (collective; every rank passes the same options). */
  public static Mesh create(Comm world, Options options) {
    long[] out = new long[1];
    mesh_options o = (options == null ? new Options() : options).toNative();
    try {
      use(world, "world", w -> Native.mesh_create(out, w, o));
    } finally {
      o.delete();
    }
    return new Mesh(out[0]);
  }

  public Coords coords() {
    int[] group = new int[1];
    int[] shardRank = new int[1];
    int[] replicaGroup = new int[1];
    int[] replicaRank = new int[1];
    use(h -> Native.mesh_coords(h, group, shardRank, replicaGroup, replicaRank));
    return new Coords(group[0], shardRank[0], replicaGroup[0], replicaRank[0]);
  }

  /** A new handle on this rank's sharding-group communicator (its ranks are plan ranks). */
  public Comm shardingComm() {
    long[] out = new long[1];
    use(h -> Native.mesh_sharding_comm(out, h));
    return new Comm(out[0]);
  }

  /** A new handle on this rank's replica-group communicator. */
  public Comm replicaComm() {
    long[] out = new long[1];
    use(h -> Native.mesh_replica_comm(out, h));
    return new Comm(out[0]);
  }

  /** The sharding and replica groups (and nodes, when ranksPerNode was given) as text. */
  public String describe() {
    String[] out = new String[1];
    use(h -> Native.mesh_describe(h, out));
    return out[0];
  }

  /**
   * This rank's part of a collection sharded over its sharding group and replicated over its
   * replica group (collective over the whole world). {@code plan} is made for S ranks and is
   * the same on every rank, and so is the seed: replicas that start different fail loudly.
   */
  public EmbeddingCollection embeddingCollection(Plan plan, Config.Optimizer optimizer,
                                                 Config.EmbeddingOptions options) {
    // The mesh first, then the plan (the order of NativeHandle's locks).
    return use(m -> EmbeddingCollection.create(
        plan, optimizer, options,
        (out, p, o, e) -> Native.mesh_embedding_create(out, m, p, o, e)));
  }

  /** Averages {@code coll}'s shards over the replica group (collective over the world). */
  public void sync(EmbeddingCollection coll, SyncMode mode) {
    if (mode == null) {
      // The sync is collective: this rank still makes it, with a mode the library refuses, so
      // the other replicas fail with it instead of waiting (over a host replica group).
      ShardrecException why = ShardrecException.invalid("mode must not be null");
      throw RefuseTogether.call(
          () -> use(h -> use(coll, "coll", c -> Native.mesh_sync(h, c, -1))), why);
    }
    int code = mode.code();
    use(h -> use(coll, "coll", c -> Native.mesh_sync(h, c, code)));
  }

  /** {@link #sync(EmbeddingCollection, SyncMode)} in the mesh's configured mode. */
  public void sync(EmbeddingCollection coll) {
    sync(coll, SyncMode.DEFAULT);
  }

  /** Counts a training step (call after every backward); returns whether it synced. */
  public boolean step(EmbeddingCollection coll) {
    int[] synced = new int[1];
    use(h -> use(coll, "coll", c -> Native.mesh_step(h, c, synced)));
    return synced[0] != 0;
  }

  public SyncStats syncStats() {
    long[] bytes = new long[1];
    int[] collectives = new int[1];
    long[] syncs = new long[1];
    use(h -> Native.mesh_sync_stats(h, bytes, collectives, syncs));
    return new SyncStats(bytes[0], collectives[0], syncs[0]);
  }
}
