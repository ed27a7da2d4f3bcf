// An FP8 table through the Java binding: setWeights encodes each row (the values change, within
// the documented E4M3 bound), and training it follows an fp32 table started from the same
// decoded weights within that bound while its updated rows are encoded again.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class Fp8TableTest {
  private static EmbeddingCollection world1(Config.Table table, Config.Optimizer optimizer) {
    Config.Topology topology = new Config.Topology(1);
    topology.optimizer(optimizer.type);
    try (Plan plan = Plan.create(List.of(table), List.of(new Config.Feature("f0")), topology,
                                 List.of());
         Comm comm = Comm.createLocalGroup(1)[0]) {
      return EmbeddingCollection.create(plan, comm, optimizer, null);
    }
  }

  /** Elements farther from want than 2^-4 of their row's largest magnitude (E4M3's bound). */
  private static int beyondBound(float[] got, float[] want, int dim) {
    int bad = 0;
    for (int r = 0; r + dim <= want.length; r += dim) {
      float amax = 0;
      for (int c = r; c < r + dim; ++c) amax = Math.max(amax, Math.abs(want[c]));
      for (int c = r; c < r + dim; ++c) bad += Math.abs(got[c] - want[c]) > amax / 16 ? 1 : 0;
    }
    return bad;
  }

  @Test
  void fp8TableEncodesRowsAndTrains() {
    assertEquals(7, DType.FP8_E4M3.code());
    assertEquals(0, DType.FP8_E4M3.size());
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.3f);
    try (EmbeddingCollection c8 =
             world1(new Config.Table("a", 20, 8).features(0).dtype(DType.FP8_E4M3), sgd);
         EmbeddingCollection c32 = world1(new Config.Table("a", 20, 8).features(0), sgd)) {
      float[] w = new float[20 * 8];
      for (int i = 0; i < w.length; ++i) w[i] = (((i * 7 + 'a' * 13) % 23) / 23f - 0.5f) * (1 + i % 5);
      c8.setWeights("a", w);
      float[] decoded = c8.getWeights("a");
      int changed = 0;
      for (int i = 0; i < w.length; ++i) changed += decoded[i] != w[i] ? 1 : 0;
      assertTrue(changed > 0, "set_weights did not encode");
      assertEquals(0, beyondBound(decoded, w, 8));
      c32.setWeights("a", decoded);
      Kjt batch = Kjt.of(3, 1, new int[] {2, 1, 3}, new long[] {3, 19, 3, 0, 7, 11});
      c8.backward(c8.forward(batch));
      c32.backward(c32.forward(batch));
      float[] got = c8.getWeights("a");
      float[] want = c32.getWeights("a");
      int moved = 0, off = 0;
      for (int i = 0; i < got.length; ++i) {
        if (want[i] == decoded[i]) continue;
        ++moved;
        off += got[i] != want[i] ? 1 : 0;
      }
      assertTrue(moved > 0 && off > 0, "moved " + moved + ", re-encoded " + off);
      assertEquals(0, beyondBound(got, want, 8));
    }
  }
}
