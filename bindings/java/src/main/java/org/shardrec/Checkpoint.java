// Checkpoints (checkpoint.h): sharded save/load that works under any plan and world size, and
// export/import of one full table as a safetensors file. Every call is collective.
package org.shardrec;

import org.shardrec.swig.Native;
import org.shardrec.swig.checkpoint_options;

/** Static entry points; each throws {@link ShardrecException} with the C status and message. */
public final class Checkpoint {
  private Checkpoint() {}

  /**
   * Save/load options; the defaults refuse any mismatch with the checkpoint. Dense tensors
   * (model parameters, dense optimizer state) travel with the checkpoint: save writes them,
   * load fills the same buffers (same names and sizes as saved).
   */
  public static final class Options {
    /** Dense tensors by name, in order; the buffers are read on save and written on load. */
    public final java.util.LinkedHashMap<String, java.nio.FloatBuffer> dense =
        new java.util.LinkedHashMap<>();
    public boolean resetOptimizerState;
    public boolean allowDtypeChange;
    public boolean verifyFirst;
    public boolean allowPartialLoad;

    /** Tables whose optimizer type differs load their weights and start their state at zero. */
    public Options resetOptimizerState(boolean v) {
      resetOptimizerState = v;
      return this;
    }

    /** Convert between fp32 and fp16/bf16 table storage. */
    public Options allowDtypeChange(boolean v) {
      allowDtypeChange = v;
      return this;
    }

    /**
     * With {@link #allowPartialLoad}: verify every needed chunk before changing anything (reads
     * the bytes twice). Without it there is nothing more to do: loads are all-or-nothing.
     */
    public Options verifyFirst(boolean v) {
      verifyFirst = v;
      return this;
    }

    /**
     * Skip the host staging that makes a load all-or-nothing (faster, no extra memory): a
     * failure found while copying then leaves the collection partly loaded.
     */
    public Options allowPartialLoad(boolean v) {
      allowPartialLoad = v;
      return this;
    }

    /**
     * Adds dense tensor {@code name} (non-empty, no '/' or newline; unique): the elements from
     * {@code data}'s position to its limit.
     */
    public Options dense(String name, java.nio.FloatBuffer data) {
      if (name == null || name.indexOf('\n') >= 0) {
        throw ShardrecException.invalid("a dense tensor name must not be null or hold a newline");
      }
      if (data == null) throw ShardrecException.invalid("data of " + name + " must not be null");
      dense.put(name, data);
      return this;
    }

    checkpoint_options toNative() {
      checkpoint_options o = new checkpoint_options();
      Native.checkpoint_options_init(o, NativeConstants.CHECKPOINT_OPTIONS_VERSION);
      o.setReset_optimizer_state(resetOptimizerState ? 1 : 0);
      o.setAllow_dtype_change(allowDtypeChange ? 1 : 0);
      o.setVerify_first(verifyFirst ? 1 : 0);
      o.setAllow_partial_load(allowPartialLoad ? 1 : 0);
      return o;
    }
  }

  /** Saves the collection into directory {@code dir} atomically. */
  public static void save(EmbeddingCollection coll, String dir) {
    save(coll, dir, null);
  }

  /** Saves the collection and the options' dense tensors into {@code dir} atomically. */
  public static void save(EmbeddingCollection coll, String dir, Options options) {
    run(null, coll, dir, options, false);
  }

  /** Loads the checkpoint in {@code dir}, whatever plan and world size saved it. */
  public static void load(EmbeddingCollection coll, String dir, Options options) {
    run(null, coll, dir, options, true);
  }

  /** Saves a collection created on {@code mesh}; each shard is written by one replica. */
  public static void save(Mesh mesh, EmbeddingCollection coll, String dir) {
    save(mesh, coll, dir, null);
  }

  /** Saves a collection created on {@code mesh} with the options' dense tensors. */
  public static void save(Mesh mesh, EmbeddingCollection coll, String dir, Options options) {
    if (mesh == null) throw ShardrecException.invalid("mesh must not be null");
    run(mesh, coll, dir, options, false);
  }

  /** Loads a checkpoint into a collection created on {@code mesh}. */
  public static void load(Mesh mesh, EmbeddingCollection coll, String dir, Options options) {
    if (mesh == null) throw ShardrecException.invalid("mesh must not be null");
    run(mesh, coll, dir, options, true);
  }

  /** One native call: the dense tensors travel as one flat direct buffer, names joined. */
  private static void run(Mesh mesh, EmbeddingCollection coll, String dir, Options options,
                          boolean load) {
    Options o = options == null ? new Options() : options;
    int n = o.dense.size();
    long[] counts = new long[n];
    StringBuilder names = new StringBuilder();
    long total = 0;
    int i = 0;
    for (java.util.Map.Entry<String, java.nio.FloatBuffer> e : o.dense.entrySet()) {
      if (load && e.getValue().isReadOnly()) {
        // Collective: this rank still meets the others in C's agreement on the arguments (a
        // NULL directory, refused there), so they fail at once naming it; this reason is thrown.
        checkpoint_options none = new Options().toNative();
        try {
          NativeHandle.useOrNull(mesh, m -> NativeHandle.use(coll, "coll", c -> Native.bind_checkpoint(
              m, c, null, none, "", new long[0], Buffers.floats(0), 1)));
        } catch (ShardrecException expected) {
          // C's refusal; this rank's reason is the one to report.
        } finally {
          none.delete();
        }
        throw ShardrecException.invalid("dense tensor " + e.getKey() + " is read-only");
      }
      counts[i++] = e.getValue().remaining();
      total += e.getValue().remaining();
      if (names.length() > 0) names.append('\n');
      names.append(e.getKey());
    }
    java.nio.FloatBuffer flat = Buffers.floats(total);
    if (!load) {
      for (java.nio.FloatBuffer b : o.dense.values()) flat.put(b.duplicate());
      flat.rewind();
    }
    checkpoint_options native_ = o.toNative();
    try {
      // The mesh first, then the collection (the order of NativeHandle's locks).
      NativeHandle.useOrNull(mesh, m -> NativeHandle.use(coll, "coll", c -> Native.bind_checkpoint(
          m, c, dir, native_, names.toString(), counts, flat, load ? 1 : 0)));
    } finally {
      native_.delete();
    }
    if (load) {
      for (java.nio.FloatBuffer b : o.dense.values()) {
        java.nio.FloatBuffer part = flat.duplicate();
        part.limit(part.position() + b.remaining());
        b.duplicate().put(part);
        flat.position(flat.position() + b.remaining());
      }
    }
  }

  /** Writes one full table (optionally with its optimizer state) to a safetensors file. */
  public static void exportTable(
      EmbeddingCollection coll, String table, String path, boolean withOptimizerState) {
    NativeHandle.use(coll, "coll", c -> Native.checkpoint_export_table(
        c, table, path, withOptimizerState ? 1 : 0));
  }

  /** Reads one full table (F32/F16/BF16 "weights", optionally states) from a safetensors file. */
  public static void importTable(
      EmbeddingCollection coll, String table, String path, boolean withOptimizerState) {
    NativeHandle.use(coll, "coll", c -> Native.checkpoint_import_table(
        c, table, path, withOptimizerState ? 1 : 0));
  }
}
