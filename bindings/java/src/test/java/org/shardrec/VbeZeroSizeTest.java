// A zero-size VBE batch (batchSize 0) with inverse indices through the Java binding: a non-null
// empty inverse-index array reaches C as a non-NULL pointer with 0 entries
// (docs/variable-batch.md), so the training forward and backward and the serving lookups (on the
// handle and on a pinned snapshot) accept it and write nothing; a null one stays "no inverse
// indices", with which batchSize 0 is refused.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

class VbeZeroSizeTest {
  /** No output samples; feature f has sizes[f] bags of one id, which no sample reads. */
  private static VbeKjt zero(long[] sizes, long[] inverse) {
    int bags = 0;
    for (long n : sizes) bags += (int) n;
    int[] lengths = new int[bags];
    long[] values = new long[bags];
    int i = 0;
    for (int f = 0; f < sizes.length; ++f) {
      for (int k = 0; k < sizes[f]; ++k, ++i) {
        lengths[i] = 1;
        values[i] = (f + k) % Training.ROWS[f];
      }
    }
    return VbeKjt.of(0, sizes.length, lengths, values, null, sizes, inverse);
  }

  private static void refusedWithoutInverse(Executable call) {
    ShardrecException e = assertThrows(ShardrecException.class, call::run);
    assertEquals(ShardrecException.EINVAL, e.code(), e.toString());
    assertTrue(e.getMessage().contains("inverse indices"), e.toString());
  }

  private interface Executable {
    void run();
  }

  @Test
  void zeroSizeBatchWithEmptyInverseIndicesTrainsAndServes() throws Exception {
    Path root = Files.createTempDirectory("vbe-zero");
    Comm[] comms = Comm.createLocalGroup(1);
    try (Plan plan = Training.plan(1, OptimizerType.SGD);
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comms[0], null, null)) {
      for (long[] sizes : new long[][] {{1, 2, 1}, {0, 0, 0}}) {
        VbeKjt batch = zero(sizes, new long[0]);
        assertEquals(0, coll.outputSizeVbe(batch));
        assertEquals(0, coll.forwardVbe(batch).length);
        coll.backward(new float[0]);
        coll.forwardVbe(batch, Buffers.floats(0), new long[] {0, coll.outputDim()});
        coll.backward(new float[0]);
      }
      refusedWithoutInverse(() -> coll.outputSizeVbe(zero(new long[] {1, 2, 1}, null)));
      Checkpoint.save(coll, root.resolve("ckpt").toString());
    } finally {
      comms[0].close();
    }
    try (Inference inf = Inference.open(root.resolve("ckpt").toString())) {
      VbeKjt batch = zero(new long[] {1, 2, 1}, new long[0]);
      assertEquals(0, inf.outputSizeVbe(batch));
      assertEquals(0, inf.lookupVbe(batch).length);
      try (InferenceSnapshot s = inf.pin()) {
        s.lookupVbe(batch, Buffers.floats(0));
      }
      refusedWithoutInverse(() -> inf.lookupVbe(zero(new long[] {1, 2, 1}, null)));
    }
  }
}
