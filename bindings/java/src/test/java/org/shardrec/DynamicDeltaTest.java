// The delta export of a dynamic table through the Java binding: mark, train, and the delta's
// rows equal what a forward reads, with a tombstone for the id LRU eviction removed.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

class DynamicDeltaTest {
  private static final int DIM = 4;
  private static final int WIDTH = DIM + 2; // the fixed table's 2 columns follow

  /** One sample per id, each a bag of that id (the fixed feature reads row 0). */
  private static float[] forward(EmbeddingCollection coll, boolean train, long... ids) {
    int n = ids.length;
    int[] lengths = new int[2 * n];
    Arrays.fill(lengths, 1);
    long[] values = Arrays.copyOf(ids, 2 * n);
    float[] out = coll.forward(Kjt.of(n, 2, lengths, values));
    if (train) coll.backward(out);
    return out;
  }

  @Test
  void deltaAfterMarkHoldsTheForwardsRowsAndATombstone() {
    List<Config.Table> tables =
        List.of(new Config.Table("dyn", 4, DIM)
                    .features(0)
                    .dynamic(new Config.DynamicTable().eviction(Eviction.LRU)),
            new Config.Table("fixed", 3, 2).features(1));
    List<Config.Feature> features = List.of(new Config.Feature("raw"), new Config.Feature("small"));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
         Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, sgd, null)) {
      assertEquals(ShardrecException.EUSAGE,
          assertThrows(ShardrecException.class, () -> coll.dynamicDelta("dyn")).code());
      forward(coll, true, 10, 20, 30);
      coll.dynamicMark("dyn");
      DynamicDelta d = coll.dynamicDelta("dyn");
      assertEquals(0, d.ids.length);
      assertEquals(0, d.tombstones.length);
      assertEquals(DIM, d.dim);

      // 20 trains again; 40 takes the free slot and 50 evicts the row seen longest ago, 10
      // (10 and 30 tie on last sight: the smaller id leaves).
      forward(coll, true, 20);
      forward(coll, true, 40, 50);
      d = coll.dynamicDelta("dyn");
      assertArrayEquals(new long[] {20, 40, 50}, d.ids);
      assertArrayEquals(new long[] {10}, d.tombstones);
      assertEquals(3 * DIM, d.rows.capacity());
      assertEquals(3 * DIM, d.rowsArray().length);
      // The rows are the table's current rows: what a forward of those ids reads.
      float[] out = forward(coll, false, d.ids);
      for (int i = 0; i < d.ids.length; ++i) {
        assertArrayEquals(
            Arrays.copyOfRange(out, i * WIDTH, i * WIDTH + DIM), d.row(i), "row of id " + d.ids[i]);
      }
      assertEquals(ShardrecException.EINVAL,
          assertThrows(ShardrecException.class, () -> coll.dynamicMark("fixed")).code());
      assertEquals(ShardrecException.EINVAL,
          assertThrows(ShardrecException.class, () -> coll.dynamicDelta("fixed")).code());
      assertEquals(ShardrecException.ENOTFOUND,
          assertThrows(ShardrecException.class, () -> coll.dynamicDelta("nope")).code());
    }
  }
}
