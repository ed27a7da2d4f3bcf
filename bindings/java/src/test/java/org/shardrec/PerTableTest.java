// Per-table optimizers, named features, output keys and offsets, and step timings through the
// Java binding: a collection mixing a row-wise Adagrad table and an SGD table trains each table
// exactly like a collection holding that table alone with that optimizer.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class PerTableTest {
  private static float pattern(String table, int i) {
    return ((i * 7 + table.charAt(0) * 13) % 23) / 23f - 0.5f;
  }

  private static EmbeddingCollection world1(List<Config.Table> tables,
                                            List<Config.Feature> features,
                                            Config.Optimizer optimizer) {
    // The plan is made for the collection's optimizer.
    Config.Topology topology = new Config.Topology(1);
    if (optimizer != null) topology.optimizer(optimizer.type);
    try (Plan plan = Plan.create(tables, features, topology, List.of());
         Comm comm = Comm.createLocalGroup(1)[0]) {
      return EmbeddingCollection.create(plan, comm, optimizer, null);
    }
  }

  /** Sets every table to pattern, then trains {@code steps} steps with gradient = output. */
  private static void train(EmbeddingCollection coll, List<Config.Table> tables, Kjt batch,
                            int steps) {
    for (Config.Table t : tables) {
      float[] w = new float[(int) t.rows * t.dim];
      for (int i = 0; i < w.length; ++i) w[i] = pattern(t.name, i);
      coll.setWeights(t.name, w);
    }
    for (int s = 0; s < steps; ++s) coll.backward(coll.forward(batch));
  }

  @Test
  void mixedOptimizersEqualPerTableReferences() {
    Config.Optimizer adagrad =
        new Config.Optimizer().type(OptimizerType.ROWWISE_ADAGRAD).learningRate(0.1f);
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.5f);
    List<Config.Feature> features = List.of(new Config.Feature("f0"), new Config.Feature("f1"));
    Config.Table a = new Config.Table("a", 50, 8).featureNames("f0").optimizer(adagrad);
    Config.Table b = new Config.Table("b", 40, 4).features(1);
    try (EmbeddingCollection mixed = world1(List.of(a, b), features, sgd);
         EmbeddingCollection refA =
             world1(List.of(new Config.Table("a", 50, 8).features(0)), features.subList(0, 1),
                    adagrad);
         EmbeddingCollection refB =
             world1(List.of(new Config.Table("b", 40, 4).features(0)), features.subList(1, 2),
                    sgd)) {
      Kjt both = Kjt.of(2, 2, new int[] {2, 1, 1, 2}, new long[] {3, 49, 3, 0, 17, 39});
      train(mixed, List.of(a, b), both, 3);
      train(refA, List.of(a), Kjt.of(2, 1, new int[] {2, 1}, new long[] {3, 49, 3}), 3);
      train(refB, List.of(b), Kjt.of(2, 1, new int[] {1, 2}, new long[] {0, 17, 39}), 3);
      for (Object[] c : new Object[][] {{"a", refA}, {"b", refB}}) {
        String table = (String) c[0];
        float[] got = mixed.getWeights(table);
        float[] want = ((EmbeddingCollection) c[1]).getWeights(table);
        boolean changed = false;
        for (int i = 0; i < want.length; ++i) {
          assertEquals(want[i], got[i], 1e-6f, "table " + table + " weight " + i);
          changed |= got[i] != pattern(table, i);
        }
        assertTrue(changed, "table " + table + " did not train");
      }
      assertEquals(OptimizerType.ROWWISE_ADAGRAD, mixed.tableOptimizer("a").type);
      Config.Optimizer usedB = mixed.tableOptimizer("b");
      assertEquals(OptimizerType.SGD, usedB.type);
      assertEquals(0.5f, usedB.learningRate);
    }
  }

  @Test
  void optimizerOtherThanThePlansIsRejected() {
    List<Config.Table> tables = List.of(new Config.Table("t", 10, 4).features(0));
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    try (Plan plan = Plan.create(tables, features,
                                 new Config.Topology(1).optimizer(OptimizerType.ADAM), List.of());
         Comm comm = Comm.createLocalGroup(1)[0]) {
      ShardrecException e = assertThrows(
          ShardrecException.class,
          () -> EmbeddingCollection.create(plan, comm, new Config.Optimizer(), null));
      assertEquals(ShardrecException.EINVAL, e.code());
      assertTrue(e.getMessage().contains("adam"), e.getMessage());
      try (EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, null, null)) {
        assertEquals(OptimizerType.ADAM, coll.tableOptimizer("t").type);
      }
    }
  }

  @Test
  void tableLearningRatesOutputKeysAndTimings() {
    Config.Optimizer adagrad =
        new Config.Optimizer().type(OptimizerType.ADAGRAD).learningRate(0.1f);
    List<Config.Feature> features = List.of(new Config.Feature("user"),
                                            new Config.Feature("item"), new Config.Feature("shop"));
    List<Config.Table> tables =
        List.of(new Config.Table("users", 30, 8).featureNames("user").optimizer(adagrad),
                new Config.Table("items", 20, 4).features(1, 2));
    try (EmbeddingCollection coll = world1(tables, features, null)) {
      assertEquals(List.of(new EmbeddingCollection.OutputBlock("user", "users", 0, 8),
                           new EmbeddingCollection.OutputBlock("item", "items", 8, 4),
                           new EmbeddingCollection.OutputBlock("shop", "items", 12, 4)),
                   coll.outputs());
      assertEquals(16, coll.outputDim());

      coll.setTableLearningRate("users", 0.25f);
      assertEquals(0.25f, coll.tableOptimizer("users").learningRate);
      assertEquals(OptimizerType.SGD, coll.tableOptimizer("items").type);
      assertNotEquals(0.25f, coll.tableOptimizer("items").learningRate);
      ShardrecException e =
          assertThrows(ShardrecException.class, () -> coll.setTableLearningRate("nope", 0.1f));
      assertEquals(ShardrecException.ENOTFOUND, e.code());

      Kjt batch = Kjt.of(3, 3, new int[] {1, 1, 1, 1, 1, 1, 1, 1, 1},
                         new long[] {0, 1, 2, 3, 4, 5, 6, 7, 8});
      for (int s = 0; s < 4; ++s) coll.backward(coll.forward(batch));
      EmbeddingCollection.StepTimings t = coll.stepTimings();
      assertEquals(4, t.forwards);
      assertEquals(4, t.backwards);
      assertEquals(12, t.samples);
      assertTrue(t.totalSeconds > 0 && t.samplesPerSecond() > 0, "timings");
    }
  }
}
