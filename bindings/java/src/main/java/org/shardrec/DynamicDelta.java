// A dynamic table's changes since its mark (shardrec_embedding_dynamic_delta), returned by
// EmbeddingCollection.dynamicDelta.
package org.shardrec;

import java.nio.FloatBuffer;
import java.nio.LongBuffer;
import org.shardrec.swig.Native;

/**
 * The rows of a dynamic table changed since its mark and the ids evicted since, the same on
 * every rank (docs/dynamic-tables.md, "Delta export"). {@link #ids} ascend; row {@code i} (of
 * {@code ids[i]}) is {@code rows[i * dim, (i + 1) * dim)}, widened to fp32; {@link #tombstones}
 * are the ids evicted since the mark that have no row now. Replaying it (upsert each row, erase
 * each tombstone) onto the table as it was at the mark gives the table as it is. A plain value:
 * the library filled it once; it is not tied to the collection.
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
  /** Ids evicted since the mark that have no row now. */
  public final long[] tombstones;

  private DynamicDelta(int dim, long[] ids, FloatBuffer rows, long[] tombstones) {
    this.dim = dim;
    this.ids = ids;
    this.rows = rows;
    this.tombstones = tombstones;
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
   * shardrec_embedding_dynamic_delta on {@code handle} (held by the caller's use()): two collective
   * calls on every rank alike, the sizes then the fill; nothing trains in between, so both see one
   * delta. An unknown table ({@code shape} null) fails the first call, gathering nothing.
   */
  static DynamicDelta gather(long handle, String table, long[] shape) {
    long[] numRows = new long[1];
    long[] numTombstones = new long[1];
    try {
      Native.embedding_dynamic_delta(handle, table, null, null, 0, null, 0, numRows,
                                     numTombstones);
      return empty((int) shape[1]);
    } catch (ShardrecException e) {
      if (e.code() != ShardrecException.EINVAL || (numRows[0] == 0 && numTombstones[0] == 0)) {
        throw e;
      }
    }
    int dim = (int) shape[1];
    Storage b = new Storage(numRows[0], numTombstones[0], dim);
    Native.embedding_dynamic_delta(handle, table, b.ids, b.rows, numRows[0], b.tombstones,
                                   numTombstones[0], numRows, numTombstones);
    return b.toDelta(dim);
  }

  /** An empty delta of rows {@code dim} wide. */
  static DynamicDelta empty(int dim) {
    return new DynamicDelta(dim, new long[0], Buffers.floats(0), new long[0]);
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

    DynamicDelta toDelta(int dim) {
      long[] i = new long[ids.capacity()];
      ids.duplicate().get(i);
      long[] t = new long[tombstones.capacity()];
      tombstones.duplicate().get(t);
      return new DynamicDelta(dim, i, rows, t);
    }
  }
}
