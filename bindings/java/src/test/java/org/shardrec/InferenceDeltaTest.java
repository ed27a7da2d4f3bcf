// A dynamic table's delta export replayed into a serving handle opened from the checkpoint
// taken at the mark: the served rows are the trained ones, the evicted id reads zeros; after a
// checkpoint load the delta is full and replaces the rows of a copy opened elsewhere.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class InferenceDeltaTest {
  private static final int DIM = 4;
  private static final int WIDTH = DIM + 2; // the fixed table's 2 columns follow

  /** One sample per id, each a bag of that id (the fixed feature reads row 0). */
  private static Kjt request(long... ids) {
    int[] lengths = new int[2 * ids.length];
    Arrays.fill(lengths, 1);
    return Kjt.of(ids.length, 2, lengths, Arrays.copyOf(ids, 2 * ids.length));
  }

  private static float[] dynamicColumns(float[] out, int sample) {
    return Arrays.copyOfRange(out, sample * WIDTH, sample * WIDTH + DIM);
  }

  @Test
  void appliesADynamicDelta(@TempDir Path dir) {
    List<Config.Table> tables = List.of(
        new Config.Table("dyn", 4, DIM).features(0).dynamic(
            new Config.DynamicTable().eviction(Eviction.LRU)),
        new Config.Table("fixed", 3, 2).features(1));
    List<Config.Feature> features = List.of(new Config.Feature("raw"), new Config.Feature("small"));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
         Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, sgd, null)) {
      coll.backward(coll.forward(request(10, 20, 30)));
      coll.dynamicMark("dyn");
      Checkpoint.save(coll, dir.toString());
      // 20 trains again, 40 and 50 arrive and 10 is evicted (LRU).
      coll.backward(coll.forward(request(20)));
      coll.backward(coll.forward(request(40, 50)));
      DynamicDelta d = coll.dynamicDelta("dyn");
      assertArrayEquals(new long[] {10}, d.tombstones);
      float[] want = coll.forward(request(20, 30, 40, 50)); // known ids: changes no weights

      try (Inference inf = Inference.open(dir.toString())) {
        assertEquals(2, inf.applyDelta("dyn", d));
        float[] got = inf.lookup(request(20, 30, 40, 50));
        // The dynamic columns (the fixed table trained on since the checkpoint).
        for (int i = 0; i < 4; ++i) {
          assertArrayEquals(dynamicColumns(want, i), dynamicColumns(got, i), "sample " + i);
        }
        assertArrayEquals(new float[DIM], dynamicColumns(inf.lookup(request(10)), 0));
        // Bad deltas change nothing.
        assertThrows(ShardrecException.class,
                     () -> inf.applyDelta("dyn", new long[] {7}, new float[DIM - 1], null));
        assertEquals(ShardrecException.EINVAL,
                     assertThrows(ShardrecException.class,
                                  () -> inf.applyDelta("fixed", new long[0], new float[0],
                                                       new long[] {1})).code());
        assertEquals(ShardrecException.EINVAL,
                     assertThrows(ShardrecException.class,
                                  () -> inf.applyDelta("fixed", new long[] {3}, new float[2],
                                                       null)).code());
        assertEquals(ShardrecException.ENOTFOUND,
                     assertThrows(ShardrecException.class,
                                  () -> inf.applyDelta("nope", new long[0], new float[0],
                                                       null)).code());
        assertEquals(2, inf.version());
        // A fixed table takes row updates.
        assertEquals(3, inf.applyDelta("fixed", new long[] {0}, new float[] {1.5f, -2f}, null));
        float[] fixed = inf.lookup(request(20));
        assertArrayEquals(new float[] {1.5f, -2f}, Arrays.copyOfRange(fixed, DIM, WIDTH));
      }
    }
  }
  /**
   * After a checkpoint load the delta is {@link DynamicDelta#full}, and applying it makes its rows
   * the served table's only rows: a copy opened from an older checkpoint (not the table at the
   * mark) loses the id training no longer holds, which no tombstone names.
   */
  @Test
  void appliesAFullDelta(@TempDir Path dir) {
    List<Config.Table> tables = List.of(new Config.Table("dyn", 4, DIM).features(0).dynamic(
        new Config.DynamicTable().eviction(Eviction.LRU)));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    String older = dir.resolve("older").toString();
    String newer = dir.resolve("newer").toString();
    try (Plan plan = Plan.create(tables, List.of(new Config.Feature("raw")),
                                 new Config.Topology(1), List.of());
         Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, sgd, null)) {
      coll.backward(coll.forward(bags(10, 20, 30)));
      Checkpoint.save(coll, older);
      coll.backward(coll.forward(bags(40, 50))); // 10 is evicted (LRU)
      Checkpoint.save(coll, newer);
      coll.dynamicMark("dyn");
      Checkpoint.load(coll, newer, null);
      DynamicDelta d = coll.dynamicDelta("dyn");
      assertTrue(d.full);
      assertArrayEquals(new long[] {20, 30, 40, 50}, d.ids);
      assertArrayEquals(new long[0], d.tombstones);

      try (Inference inf = Inference.open(older)) {
        assertEquals(2, inf.applyDelta("dyn", d));
        assertEquals(4, inf.table(0).rows);
        coll.setTraining(false);
        float[] want = coll.forward(bags(10, 20, 30, 40, 50));
        float[] got = inf.lookup(bags(10, 20, 30, 40, 50));
        assertArrayEquals(want, got);
        assertArrayEquals(new float[DIM], Arrays.copyOfRange(got, 0, DIM));
        // The same delta's arrays and flag, as a service that received them would apply them.
        try (Inference other = Inference.open(older)) {
          other.applyDelta("dyn", d.ids, d.rows.duplicate(), d.tombstones, true);
          assertArrayEquals(want, other.lookup(bags(10, 20, 30, 40, 50)));
        }
      }
      // A mark starts an ordinary period again.
      coll.dynamicMark("dyn");
      DynamicDelta next = coll.dynamicDelta("dyn");
      assertFalse(next.full);
      assertEquals(0, next.ids.length);
    }
  }

  /** One sample per id of the single feature, each a bag of that id. */
  private static Kjt bags(long... ids) {
    int[] lengths = new int[ids.length];
    Arrays.fill(lengths, 1);
    return Kjt.of(ids.length, 1, lengths, ids);
  }
}
