// A dynamic table's changes since its mark (shardrec_embedding_dynamic_delta_ext), returned by
// EmbeddingCollection.dynamicDelta.
package org.shardrec;

import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import org.shardrec.swig.Native;

/**
 * The rows of a dynamic table changed since its mark and the ids that left since, the same on
 * every rank (docs/dynamic-tables.md, "Delta export"). {@link #ids} ascend; row {@code i} (of
 * {@code ids[i]}) is {@code rows[i * dim, (i + 1) * dim)}, widened to fp32; {@link #tombstones}
 * are the ids that left since the mark (evicted, or held before a checkpoint load that lacks
 * them) and have no row now. Replaying it (upsert each row, erase each tombstone) onto the table
 * as it was at the mark gives the table as it is. {@link #full} says a checkpoint load replaced
 * the table since the mark: the rows are then the whole table, and {@link
 * Inference#applyDelta(String, DynamicDelta)} makes them the served table's only rows. A plain
 * value: the library filled it once; it is not tied to the collection.
 */
public final class DynamicDelta {
  /** Row width of the table. */
  public final int dim;
  /** Ids of the changed rows, ascending. */
  public final long[] ids;
  /**
   * The changed rows, {@code ids.length * dim} floats row-major: a direct, native-order buffer
   * (the memory the library wrote; hand it to a serving handle without a copy).
   */
  public final FloatBuffer rows;
  /** Ids that left since the mark and have no row now. */
  public final long[] tombstones;
  /**
   * A full snapshot (shardrec_embedding_dynamic_delta_ext's SHARDREC_DELTA_FULL): a checkpoint
   * load replaced the table since the mark, so {@link #ids} are every row it holds and a serving
   * copy in any state should take them as its whole table, which {@link
   * Inference#applyDelta(String, DynamicDelta)} does. False for an ordinary delta.
   */
  public final boolean full;

  private DynamicDelta(int dim, long[] ids, FloatBuffer rows, long[] tombstones, boolean full) {
    this.dim = dim;
    this.ids = ids;
    this.rows = rows;
    this.tombstones = tombstones;
    this.full = full;
  }

  /** The row of {@code ids[i]}, copied. */
  public float[] row(int i) {
    if (i < 0 || i >= ids.length) {
      throw new IndexOutOfBoundsException("row " + i + " of " + ids.length);
    }
    float[] r = new float[dim];
    FloatBuffer v = rows.duplicate();
    v.position(i * dim);
    v.get(r);
    return r;
  }

  /** All rows as one array, copied. */
  public float[] rowsArray() {
    float[] r = new float[ids.length * dim];
    rows.duplicate().get(r);
    return r;
  }

  /**
   * shardrec_embedding_dynamic_delta_ext on {@code handle} (held by the caller's use()): two
   * collective calls on every rank alike, the sizes then the fill; nothing trains in between, so
   * both see one delta. An unknown table ({@code shape} null) fails the first call, gathering
   * nothing.
   */
  static DynamicDelta gather(long handle, String table, long[] shape) {
    long[] numRows = new long[1];
    long[] numTombstones = new long[1];
    int[] flags = new int[1];
    try {
      Native.embedding_dynamic_delta_ext(handle, table, null, null, 0, null, 0, numRows,
                                         numTombstones, flags);
      return empty((int) shape[1], isFull(flags[0]));
    } catch (ShardrecException e) {
      if (e.code() != ShardrecException.EINVAL || (numRows[0] == 0 && numTombstones[0] == 0)) {
        throw e;
      }
    }
    int dim = (int) shape[1];
    Storage b = new Storage(numRows[0], numTombstones[0], dim);
    Native.embedding_dynamic_delta_ext(handle, table, b.ids, b.rows, numRows[0], b.tombstones,
                                       numTombstones[0], numRows, numTombstones, flags);
    return b.toDelta(dim, isFull(flags[0]));
  }

  /** SHARDREC_DELTA_FULL (common.h): a C value, part of the ABI like the enumerations'. */
  static final int FLAG_FULL = 1;

  private static boolean isFull(int flags) {
    return (flags & FLAG_FULL) != 0;
  }

  /** The flags shardrec_inference_apply_delta_ext takes for this delta. */
  long flags() {
    return full ? FLAG_FULL : 0;
  }

  /** An empty delta of rows {@code dim} wide. */
  static DynamicDelta empty(int dim, boolean full) {
    return new DynamicDelta(dim, new long[0], Buffers.floats(0), new long[0], full);
  }

  /** Direct buffers for {@code numRows} rows and {@code numTombstones} tombstones. */
  static final class Storage {
    final LongBuffer ids;
    final FloatBuffer rows;
    final LongBuffer tombstones;

    Storage(long numRows, long numTombstones, int dim) {
      ids = Buffers.longs(numRows);
      rows = Buffers.floats(numRows * dim);
      tombstones = Buffers.longs(numTombstones);
    }

    DynamicDelta toDelta(int dim, boolean full) {
      long[] i = new long[ids.capacity()];
      ids.duplicate().get(i);
      long[] t = new long[tombstones.capacity()];
      tombstones.duplicate().get(t);
      return new DynamicDelta(dim, i, rows, t, full);
    }
  }
}
