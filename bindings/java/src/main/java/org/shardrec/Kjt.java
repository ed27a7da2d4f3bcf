// One rank's batch of sparse ids in keyed-jagged form, over direct native-order buffers.
package org.shardrec;

import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;

/**
 * A keyed jagged tensor (feature-major): {@code lengths[f * B + b]} ids of feature f in sample b,
 * all ids in {@code values} in that order, optional per-id {@code weights}. The buffers are
 * borrowed by each call; nothing is copied.
 */
public final class Kjt {
  final long batchSize;
  final int numFeatures;
  final IntBuffer lengths;
  final LongBuffer values;
  final FloatBuffer weights;

  /** Wraps direct native-order buffers (checked here, before any native call). */
  public Kjt(long batchSize, int numFeatures, IntBuffer lengths, LongBuffer values,
             FloatBuffer weights) {
    if (batchSize < 0 || numFeatures < 0) {
      throw ShardrecException.invalid("batchSize and numFeatures must be >= 0");
    }
    this.batchSize = batchSize;
    this.numFeatures = numFeatures;
    if (numFeatures != 0 && batchSize > Long.MAX_VALUE / numFeatures) {
      throw ShardrecException.invalid(
          "batchSize " + batchSize + " x numFeatures " + numFeatures + " overflows");
    }
    this.lengths = Buffers.in(lengths, batchSize * numFeatures, "lengths");
    this.values = Buffers.in(values, "values");
    this.weights = weights == null ? null : Buffers.in(weights, this.values.remaining(), "weights");
  }

  public Kjt(long batchSize, int numFeatures, IntBuffer lengths, LongBuffer values) {
    this(batchSize, numFeatures, lengths, values, null);
  }

  /**
   * Copies Java arrays into direct buffers (convenience). Null {@code lengths} or {@code values}
   * throw ShardrecException naming them.
   */
  public static Kjt of(long batchSize, int numFeatures, int[] lengths, long[] values) {
    return of(batchSize, numFeatures, lengths, values, null);
  }

  /** As {@link #of(long, int, int[], long[])} with per-id weights (null: none). */
  public static Kjt of(long batchSize, int numFeatures, int[] lengths, long[] values,
                       float[] weights) {
    return new Kjt(batchSize, numFeatures, Buffers.copyOrNull(lengths),
                   Buffers.copyOrNull(values), Buffers.copyOrNull(weights));
  }

  public long batchSize() {
    return batchSize;
  }

  public long numValues() {
    return values.remaining();
  }
}
