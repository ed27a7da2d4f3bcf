// A batch whose features each have their own batch size (VBE), over direct native-order buffers.
package org.shardrec;

import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;

/**
 * A keyed jagged tensor with a batch size per feature (TorchRec's variable batch size per
 * feature; shardrec_kjt_vbe_view_t), so that a request of one user and many candidate items
 * carries the user's features once. {@code lengths} holds sum_f B_f bag lengths, feature-major
 * (the B_0 bags of feature 0, then the B_1 bags of feature 1, ...); {@code values} and
 * {@code weights} follow them. With {@code inverseIndices} ({@code numFeatures x batchSize}
 * entries, each in [0, B_f)), sample b of feature f reads bag {@code inverseIndices[f * B + b]}
 * and the output equals, bit for bit, that of the expanded plain batch of {@code batchSize}
 * samples; without them ({@code null}) {@code batchSize} must be the largest B_f and the output is
 * feature-major (each feature's B_f rows of its width; a sequence collection: one row per id).
 * A non-null empty {@code inverseIndices} ({@code new long[0]}) is the inverse indices of a
 * zero-size batch ({@code batchSize} 0, bags that no sample reads), not their absence.
 * The buffers are borrowed by each call; nothing is copied. The library checks the sizes.
 */
public final class VbeKjt {
  final long batchSize;
  final int numFeatures;
  final IntBuffer lengths;
  final LongBuffer values;
  final FloatBuffer weights;
  final LongBuffer featureBatchSizes;
  final LongBuffer inverseIndices;

  /** Wraps direct native-order buffers ({@code weights} and {@code inverseIndices} may be null). */
  public VbeKjt(long batchSize, int numFeatures, IntBuffer lengths, LongBuffer values,
                FloatBuffer weights, LongBuffer featureBatchSizes, LongBuffer inverseIndices) {
    if (batchSize < 0 || numFeatures < 0) {
      throw ShardrecException.invalid("batchSize and numFeatures must be >= 0");
    }
    this.batchSize = batchSize;
    this.numFeatures = numFeatures;
    this.featureBatchSizes = Buffers.in(featureBatchSizes, "featureBatchSizes");
    this.lengths = Buffers.in(lengths, lengths == null ? 0 : lengths.remaining(), "lengths");
    this.values = Buffers.in(values, "values");
    this.weights = weights == null ? null : Buffers.in(weights, this.values.remaining(), "weights");
    this.inverseIndices =
        inverseIndices == null ? null : Buffers.in(inverseIndices, "inverseIndices");
  }

  /**
   * Copies Java arrays into direct buffers (convenience); {@code weights} and
   * {@code inverseIndices} may be null.
   */
  public static VbeKjt of(long batchSize, int numFeatures, int[] lengths, long[] values,
                          float[] weights, long[] featureBatchSizes, long[] inverseIndices) {
    return new VbeKjt(batchSize, numFeatures, Buffers.copyOrNull(lengths),
                      Buffers.copyOrNull(values), Buffers.copyOrNull(weights),
                      Buffers.copyOrNull(featureBatchSizes), Buffers.copyOrNull(inverseIndices));
  }

  public long batchSize() {
    return batchSize;
  }

  public long numValues() {
    return values.remaining();
  }
}
