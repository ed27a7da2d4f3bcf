// JUnit test of the VBE training forward through the Java binding (forwardVbe): equal, bit for
// bit, to the forward of the expanded plain batch, and the backward that follows updates the
// tables as the expanded batch's does (within fp32 rounding of the gradient sums). The batches
// are VbeLookupTest's.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class VbeForwardTest {
  private static EmbeddingCollection create(Plan plan, Comm comm) {
    return EmbeddingCollection.create(
        plan, comm, new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.5f),
        new Config.EmbeddingOptions().seed(5));
  }

  @Test
  void forwardAndBackwardFollowTheExpandedBatch() {
    Comm[] a = Comm.createLocalGroup(1);
    Comm[] b = Comm.createLocalGroup(1);
    try (Plan plan = Training.plan(1, OptimizerType.SGD);
         EmbeddingCollection vbe = create(plan, a[0]);
         EmbeddingCollection plain = create(plan, b[0])) {
      float[][] before = Training.weights(plain);
      VbeKjt batch = VbeLookupTest.vbe(true, true);
      assertEquals(VbeLookupTest.SAMPLES * 18, vbe.outputSizeVbe(batch));
      float[] got = vbe.forwardVbe(batch);
      float[] want = plain.forward(VbeLookupTest.expanded(true));
      assertArrayEquals(want, got);
      float[] grad = new float[got.length];
      for (int i = 0; i < grad.length; ++i) grad[i] = got[i] * 0.25f;
      vbe.backward(grad);
      plain.backward(grad);
      float[][] wv = Training.weights(vbe), wp = Training.weights(plain);
      boolean moved = false;
      for (int t = 0; t < wv.length; ++t) {
        for (int i = 0; i < wv[t].length; ++i) {
          assertEquals(wp[t][i], wv[t][i], 1e-6f * (1 + Math.abs(wp[t][i])), "table " + t);
          moved |= wv[t][i] != before[t][i];
        }
      }
      assertTrue(moved, "the backward updated the tables");
      // A refused batch (sizes that do not add up) throws EINVAL.
      VbeKjt bad = VbeKjt.of(VbeLookupTest.SAMPLES, 3, new int[] {1}, new long[] {0}, null,
                             VbeLookupTest.SIZES, null);
      ShardrecException e = assertThrows(ShardrecException.class, () -> vbe.forwardVbe(bad));
      assertEquals(ShardrecException.EINVAL, e.code());
    } finally {
      a[0].close();
      b[0].close();
    }
  }
}
