// The arguments of a collective embedding call that the binding refuses on this rank (a buffer
// of the wrong kind or size, a bad shape) are refused by every rank in the same call: this rank
// still makes the call, with no output or gradient view or with a decoy buffer, which the library
// refuses on it and reports to the others (docs/semantics.md, "Validation before any change").
// Throwing before the call instead would leave the other ranks' call to pair with this rank's
// next one.
package org.shardrec;

import java.nio.FloatBuffer;
import org.shardrec.swig.Native;

final class RefuseTogether {
  private RefuseTogether() {}

  // One float against a shape of two: the native helper finds the mismatch and passes no view.
  private static final long[] MISMATCH = {2};

  /** Makes {@code call}, which every rank fails (it passes a decoy); returns {@code why}. */
  static ShardrecException call(Runnable call, ShardrecException why) {
    try {
      call.run();
    } catch (ShardrecException refused) {
      why.addSuppressed(refused);
    }
    return why;
  }

  /** A buffer whose size is not {@code need}, which the library refuses in place of a bad one. */
  static FloatBuffer decoy(long need) {
    return Buffers.floats(need == 1 ? 2 : 1);
  }

  // In place of a null batch: an empty one, which the library refuses (its feature count).
  private static Kjt noBatch() {
    return Kjt.of(0, 0, new int[0], new long[0]);
  }

  /** Makes the forward of {@code batch} that every rank fails; returns {@code why} to throw. */
  static ShardrecException forward(long handle, Kjt batch, ShardrecException why) {
    Kjt b = batch != null ? batch : noBatch();
    return call(() -> Native.bind_embedding_forward_tensor(handle, b.batchSize, b.numFeatures,
                                                           b.lengths, b.values, b.weights,
                                                           Buffers.floats(1), MISMATCH), why);
  }

  /** Makes the pipelined start of no batch that every rank fails; returns {@code why}. */
  static ShardrecException inputDistStart(long handle, ShardrecException why) {
    Kjt b = noBatch();
    return call(() -> Native.bind_embedding_input_dist_start(handle, b.batchSize, b.numFeatures,
                                                             b.lengths, b.values, b.weights),
                why);
  }

  /** As forward, for the waited batch of the pipelined input distribution. */
  static ShardrecException forwardDistributed(long handle, ShardrecException why) {
    return call(() -> Native.bind_embedding_forward_distributed_tensor(
        handle, Buffers.floats(1), MISMATCH), why);
  }

  /** Makes the backward that every rank fails; returns {@code why} to throw. */
  static ShardrecException backward(long handle, ShardrecException why) {
    return call(() -> Native.bind_embedding_backward_tensor(handle, Buffers.floats(1), MISMATCH),
                why);
  }
}
