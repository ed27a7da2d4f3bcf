// Checkpoints (checkpoint.h): sharded save/load that works under any plan and world size, and
// export/import of one full table as a safetensors file. Every call is collective.
package org.shardrec;

import org.shardrec.swig.Native;
import org.shardrec.swig.checkpoint_options;

/** Static entry points; each throws {@link ShardrecException} with the C status and message. */
public final class Checkpoint {
  private Checkpoint() {}

  /** Load options; the defaults refuse any mismatch with the checkpoint. */
  public static final class Options {
    public boolean resetOptimizerState;
    public boolean allowDtypeChange;
    public boolean verifyFirst;

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

    /** Verify every needed chunk before changing anything (reads the bytes twice). */
    public Options verifyFirst(boolean v) {
      verifyFirst = v;
      return this;
    }

    checkpoint_options toNative() {
      checkpoint_options o = new checkpoint_options();
      Native.checkpoint_options_init(o, NativeConstants.CHECKPOINT_OPTIONS_VERSION);
      o.setReset_optimizer_state(resetOptimizerState ? 1 : 0);
      o.setAllow_dtype_change(allowDtypeChange ? 1 : 0);
      o.setVerify_first(verifyFirst ? 1 : 0);
      return o;
    }
  }

  /** Saves the collection into directory {@code dir} atomically. */
  public static void save(EmbeddingCollection coll, String dir) {
    Native.checkpoint_save(coll.handle(), dir, new Options().toNative());
  }

  /** Loads the checkpoint in {@code dir}, whatever plan and world size saved it. */
  public static void load(EmbeddingCollection coll, String dir, Options options) {
    Native.checkpoint_load(
        coll.handle(), dir, (options == null ? new Options() : options).toNative());
  }

  /** Saves a collection created on {@code mesh}; each shard is written by one replica. */
  public static void save(Mesh mesh, EmbeddingCollection coll, String dir) {
    Native.checkpoint_save_mesh(mesh.handle(), coll.handle(), dir, new Options().toNative());
  }

  /** Loads a checkpoint into a collection created on {@code mesh}. */
  public static void load(Mesh mesh, EmbeddingCollection coll, String dir, Options options) {
    Native.checkpoint_load_mesh(
        mesh.handle(), coll.handle(), dir, (options == null ? new Options() : options).toNative());
  }

  /** Writes one full table (optionally with its optimizer state) to a safetensors file. */
  public static void exportTable(
      EmbeddingCollection coll, String table, String path, boolean withOptimizerState) {
    Native.checkpoint_export_table(coll.handle(), table, path, withOptimizerState ? 1 : 0);
  }

  /** Reads one full table (F32/F16/BF16 "weights", optionally states) from a safetensors file. */
  public static void importTable(
      EmbeddingCollection coll, String table, String path, boolean withOptimizerState) {
    Native.checkpoint_import_table(coll.handle(), table, path, withOptimizerState ? 1 : 0);
  }
}
