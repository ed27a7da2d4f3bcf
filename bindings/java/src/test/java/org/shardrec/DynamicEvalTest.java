// Evaluation mode and SCORE eviction through the Java binding: an evaluation forward reads
// known rows and zeros and changes nothing; the caller's scores choose the row that leaves.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

class DynamicEvalTest {
  private static final int DIM = 4;

  /** One sample: a bag of {@code a} for "dyn", a bag of {@code b} for "scored". */
  private static Kjt sample(long[] a, long[] b) {
    long[] values = Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, values, a.length, b.length);
    return Kjt.of(1, 2, new int[] {a.length, b.length}, values);
  }

  private static int code(Runnable r) {
    return assertThrows(ShardrecException.class, r::run).code();
  }

  @Test
  void evaluationChangesNothingAndScoresChooseTheVictim() {
    List<Config.Table> tables = List.of(
        new Config.Table("dyn", 4, DIM).features(0).dynamic(
            new Config.DynamicTable().eviction(Eviction.LRU)),
        new Config.Table("scored", 2, DIM).features(1).dynamic(
            new Config.DynamicTable().eviction(Eviction.SCORE)));
    List<Config.Feature> features = List.of(new Config.Feature("a"), new Config.Feature("b"));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    long[] none = {};
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
         Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, sgd, null)) {
      coll.backward(coll.forward(sample(new long[] {10}, new long[] {1, 2})));
      DynamicTableStats before = coll.dynamicStats("dyn");
      assertTrue(coll.isTraining());

      // Evaluation: 10 reads its row, twice the same; 30 reads zeros; nothing changes.
      coll.setTraining(false);
      assertFalse(coll.isTraining());
      float[] known = coll.forward(sample(new long[] {10}, none));
      assertFalse(Arrays.equals(new float[DIM], Arrays.copyOf(known, DIM)));
      float[] unknown = coll.forward(sample(new long[] {30}, none));
      assertArrayEquals(new float[DIM], Arrays.copyOf(unknown, DIM));
      assertEquals(ShardrecException.EUSAGE, code(() -> coll.backward(unknown)));
      assertArrayEquals(known, coll.forward(sample(new long[] {10}, none)));
      DynamicTableStats after = coll.dynamicStats("dyn");
      assertEquals(before.size, after.size);
      assertEquals(before.totalInserted, after.totalInserted);
      assertEquals(before.totalRejectedAdmission, after.totalRejectedAdmission);
      coll.setTraining(true);
      coll.backward(coll.forward(sample(new long[] {30}, none)));
      assertEquals(2, coll.dynamicStats("dyn").size);

      // Scores: 1 keeps 5, 2 gets -1, 99 has no row (not counted). A new id evicts 2.
      assertEquals(2, coll.dynamicSetScores("scored", new long[] {1, 2, 99},
                                            new double[] {5, -1, 3}));
      coll.dynamicMark("scored");
      coll.backward(coll.forward(sample(none, new long[] {3})));
      DynamicDelta d = coll.dynamicDelta("scored");
      assertArrayEquals(new long[] {3}, d.ids);
      assertArrayEquals(new long[] {2}, d.tombstones);
      // Refused, nothing set.
      assertEquals(ShardrecException.EINVAL,
                   code(() -> coll.dynamicSetScores("scored", new long[] {1},
                                                    new double[] {Double.NaN})));
      assertThrows(ShardrecException.class,
                   () -> coll.dynamicSetScores("scored", new long[] {1, 3}, new double[] {1}));
      assertEquals(ShardrecException.EINVAL,
                   code(() -> coll.dynamicSetScores("dyn", new long[] {10}, new double[] {1})));
      assertEquals(ShardrecException.ENOTFOUND,
                   code(() -> coll.dynamicSetScores("nope", none, new double[0])));
      assertEquals(Eviction.SCORE, Eviction.of(4));
    }
  }
}
