// JUnit tests of the Java binding: exactness of sharded training through the binding, error
// paths carrying the C status and message, handle lifetime and buffer checks.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import org.junit.jupiter.api.Test;

class EmbeddingCollectionTest {
  @Test
  void twoRankShardedTrainingEqualsSingleRank() throws Exception {
    float[][] sharded = Training.train(2, 4);
    float[][] single = Training.train(1, 4);
    float[][] initial;
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(
             plan, comm, Training.optimizer(), new Config.EmbeddingOptions().seed(7))) {
      initial = Training.weights(coll);
    }
    for (int t = 0; t < Training.TABLES.length; ++t) {
      assertEquals(Training.ROWS[t] * Training.DIMS[t], sharded[t].length);
      for (int i = 0; i < sharded[t].length; ++i) {
        float tol = 1e-5f * Math.max(1f, Math.abs(single[t][i]));
        assertEquals(single[t][i], sharded[t][i], tol, Training.TABLES[t] + "[" + i + "]");
      }
      assertFalse(java.util.Arrays.equals(initial[t], single[t]), "training changed " + Training.TABLES[t]);
    }
  }

  @Test
  void mixedPlanShardsAsConstrained() {
    try (Plan plan = Training.plan(2)) {
      assertEquals(2, plan.worldSize());
      assertEquals(ShardingType.TABLE_WISE, plan.tableSharding(plan.findTable("t0")));
      assertEquals(1, plan.shard(0, 0).rank());
      assertEquals(ShardingType.ROW_WISE, plan.tableSharding(1));
      assertEquals(ShardingType.COLUMN_WISE, plan.tableSharding(2));
      assertEquals(2, plan.numShards(2));
      try (Plan copy = Plan.fromJson(plan.toJson())) {
        assertEquals(plan.hash(), copy.hash());
      }
    }
  }

  @Test
  void outOfRangeIdThrowsEinvalWithTheCMessage() {
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, null, null)) {
      Kjt bad = Kjt.of(1, 3, new int[] {1, 1, 1}, new long[] {0, 987654, 0});
      ShardrecException e = assertThrows(ShardrecException.class, () -> coll.forward(bad));
      assertEquals(ShardrecException.EINVAL, e.code());
      assertEquals("SHARDREC_EINVAL", e.codeName());
      assertTrue(e.getMessage().contains("987654"), e.getMessage());
      assertEquals(0, coll.numSteps());
    }
  }

  @Test
  void unknownTableThrowsNotFound() {
    try (Plan plan = Training.plan(1)) {
      ShardrecException e = assertThrows(ShardrecException.class, () -> plan.findTable("nope"));
      assertEquals(ShardrecException.ENOTFOUND, e.code());
      assertTrue(e.getMessage().contains("nope"), e.getMessage());
    }
  }

  @Test
  void useAfterCloseThrowsAndCloseIsIdempotent() {
    Plan plan = Training.plan(1);
    Comm comm = Comm.createLocalGroup(1)[0];
    EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, null, null);
    coll.close();
    coll.close();
    assertTrue(coll.isClosed());
    ShardrecException e = assertThrows(ShardrecException.class, coll::numSteps);
    assertEquals(ShardrecException.EINVAL, e.code());
    assertTrue(e.getMessage().contains("EmbeddingCollection is closed"), e.getMessage());
    plan.close();
    e = assertThrows(ShardrecException.class, plan::numTables);
    assertTrue(e.getMessage().contains("Plan is closed"), e.getMessage());
    // A closed plan passed to create is use after close too (it was IllegalArgumentException).
    e = assertThrows(ShardrecException.class,
                     () -> EmbeddingCollection.create(plan, comm, null, null));
    assertEquals(ShardrecException.EINVAL, e.code());
    assertTrue(e.getMessage().contains("Plan is closed"), e.getMessage());
    Comm.Options nul = new Comm.Options();
    nul.bindAddress = "127.0.0.1\0junk";
    ShardrecException cut =
        assertThrows(ShardrecException.class, () -> Comm.createLocalGroup(1, nul));
    assertTrue(cut.getMessage().contains("NUL"), cut.getMessage());
    comm.close();
    e = assertThrows(ShardrecException.class, comm::rank);
    assertTrue(e.getMessage().contains("Comm is closed"), e.getMessage());
  }

  // A negative index reached C as a huge one ("table index 18446744073709551615 is out of
  // range"); it is refused as given.
  @Test
  void negativeIndicesAreNamedAsGiven() {
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, null, null)) {
      for (org.junit.jupiter.api.function.Executable call :
           new org.junit.jupiter.api.function.Executable[] {
               () -> plan.tableName(-1), () -> plan.featureName(-1), () -> plan.tableRows(-1),
               () -> plan.numShards(-1), () -> plan.shard(0, -1), () -> coll.stateName(-1)}) {
        ShardrecException e = assertThrows(ShardrecException.class, call);
        assertEquals(ShardrecException.EINVAL, e.code());
        assertTrue(e.getMessage().contains("index -1 is negative"), e.getMessage());
      }
    }
  }

  @Test
  void wrongBufferKindOrSizeIsRejectedBeforeTheNativeCall() {
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, null, null)) {
      Kjt batch = Training.batch(0, 0, 1);
      long n = coll.outputSize(batch);
      assertThrows(ShardrecException.class,
                   () -> coll.forward(batch, FloatBuffer.allocate((int) n)));
      assertThrows(ShardrecException.class, () -> coll.forward(batch, Buffers.floats(n + 1)));
      FloatBuffer out = Buffers.floats(n);
      coll.forward(batch, out);
      assertThrows(ShardrecException.class, () -> coll.backward(new float[(int) n - 1]));
      coll.backward(Buffers.floats(n));
      assertEquals(1, coll.numSteps());
      assertThrows(ShardrecException.class,
                   () -> Kjt.of(2, 3, new int[] {1, 1}, new long[] {0, 0}));
    }
  }

  @Test
  void pipelinedForwardMatchesForward() {
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, null, null)) {
      Kjt batch = Training.batch(1, 0, 2);
      float[] direct = coll.forward(batch);
      coll.backward(new float[direct.length]);
      coll.inputDistStart(batch);
      coll.inputDistWait();
      FloatBuffer out = Buffers.floats(direct.length);
      coll.forwardDistributed(out);
      float[] piped = new float[direct.length];
      out.get(0, piped);
      assertArrayEquals(direct, piped);
    }
  }
}
