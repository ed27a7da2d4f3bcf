// A dynamic table trained on raw 64-bit ids (beyond 2^53, negative, the extremes) through the
// Java binding: admission at the second sight, LRU eviction at capacity, the stats read back.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class DynamicTableTest {
  private static final int CAPACITY = 4;
  private static final int DIM = 4;

  /** One bag of {@code ids} for the dynamic table and id 2 for the fixed one; output = grad. */
  private static float[] step(EmbeddingCollection coll, long... ids) {
    long[] values = new long[ids.length + 1];
    System.arraycopy(ids, 0, values, 0, ids.length);
    values[ids.length] = 2;
    float[] out = coll.forward(Kjt.of(1, 2, new int[] {ids.length, 1}, values));
    coll.backward(out);
    return java.util.Arrays.copyOf(out, DIM);
  }

  @Test
  void trainsOnRawIdsWithAdmissionAndEviction() {
    Config.DynamicTable dynamic =
        new Config.DynamicTable().eviction(Eviction.LRU).admissionThreshold(2);
    List<Config.Table> tables = List.of(
        new Config.Table("dyn", CAPACITY, DIM).features(0).dynamic(dynamic),
        new Config.Table("fixed", 3, 2).features(1));
    List<Config.Feature> features = List.of(new Config.Feature("raw"), new Config.Feature("small"));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
         Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, sgd, null)) {
      // 2^53 and 2^53 + 1 are one double apart from nothing: they must stay two rows.
      long a = 1L << 53, b = (1L << 53) + 1, c = -7;
      float[] out = step(coll, a, b, c);
      for (float v : out) assertEquals(0f, v, "ids below the admission threshold read zeros");
      DynamicTableStats s = coll.dynamicStats("dyn");
      assertEquals(0, s.size);
      assertEquals(CAPACITY, s.capacity);
      assertEquals(3, s.lastRejectedAdmission);

      out = step(coll, a, b, c);
      boolean nonzero = false;
      for (float v : out) nonzero |= v != 0;
      assertTrue(nonzero, "admitted rows read zeros");
      s = coll.dynamicStats("dyn");
      assertEquals(3, s.size);
      assertEquals(3, s.lastInserted);
      assertEquals(0, s.lastEvicted);
      assertTrue(s.metadataBytes > 0);

      // Two new ids seen twice each in one bag: one free slot, one LRU victim among a, b, c.
      step(coll, Long.MIN_VALUE, Long.MIN_VALUE, Long.MAX_VALUE, Long.MAX_VALUE);
      s = coll.dynamicStats("dyn");
      assertEquals(CAPACITY, s.size);
      assertEquals(1.0, s.loadFactor);
      assertEquals(2, s.lastInserted);
      assertEquals(1, s.lastEvicted);
      assertEquals(0, s.lastRejectedAdmission);
      assertEquals(0, s.lastRejectedFull);
      assertEquals(5, s.totalInserted);
      assertEquals(1, s.totalEvicted);
      assertEquals(3, s.totalRejectedAdmission);
      assertEquals(0, s.totalRejectedFull);
      assertEquals(2, s.lastAdmitted);
      assertEquals(5, s.totalAdmitted);

      assertEquals(ShardrecException.EINVAL,
                   assertThrows(ShardrecException.class, () -> coll.dynamicStats("fixed")).code());
      assertEquals(ShardrecException.ENOTFOUND,
                   assertThrows(ShardrecException.class, () -> coll.dynamicStats("nope")).code());
    }
  }

  @Test
  void ttlWithoutStepsIsRejected() {
    Config.Table t = new Config.Table("dyn", 8, 4).features(0).dynamic(
        new Config.DynamicTable().eviction(Eviction.TTL));
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    assertThrows(ShardrecException.class,
                 () -> Plan.create(List.of(t), features, new Config.Topology(1), List.of()));
    t.dynamic.ttlSteps(5);
    Plan.create(List.of(t), features, new Config.Topology(1), List.of()).close();
    assertEquals(Eviction.LFU, Eviction.of(Eviction.LFU.code()));
  }

  @Test
  void capacityInBytesBecomesSlots() {
    // SGD (no state), fp32 dim 4: 16 bytes of row per slot plus the metadata; 100 slots' worth
    // of rows alone is more than what fits once the metadata is counted.
    Config.Table t = new Config.Table("dyn", 0, DIM).features(0).dynamic(
        new Config.DynamicTable().eviction(Eviction.LRU).capacityBytes(1600));
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    Config.Topology topo = new Config.Topology(1);  // the planner counts SGD's state (none)
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    try (Plan plan = Plan.create(List.of(t), features, topo, List.of());
         Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, sgd, null)) {
      DynamicTableStats s = coll.dynamicStats("dyn");
      assertTrue(s.capacity > 0 && s.capacity < 100, "capacity " + s.capacity);
      assertEquals(s.capacity, 1600 / (4 * DIM + s.metadataBytes / s.capacity));
      assertEquals((s.capacity + 1) * 4 * DIM + s.metadataBytes, s.capacityBytes);
    }
    Config.Table both = new Config.Table("dyn", 8, DIM).features(0).dynamic(t.dynamic);
    assertEquals(ShardrecException.EINVAL,
                 assertThrows(ShardrecException.class,
                              () -> Plan.create(List.of(both), features, topo, List.of()))
                     .code());
  }

  /** Rows of "dyn" after three steps that each see one id once, admission at the second sight. */
  private static long admittedAfterThreeSteps(long decay) {
    Config.Table t = new Config.Table("dyn", 8, DIM).features(0).dynamic(
        new Config.DynamicTable().admissionThreshold(2).admissionDecaySteps(decay));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    try (Plan plan = Plan.create(List.of(t), List.of(new Config.Feature("f")),
                                 new Config.Topology(1), List.of());
         Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, sgd, null)) {
      for (int step = 0; step < 3; ++step) {
        float[] out = coll.forward(Kjt.of(1, 1, new int[] {1}, new long[] {1L << 60}));
        coll.backward(out);
      }
      return coll.dynamicStats("dyn").size;
    }
  }

  @Test
  void admissionCountsDecay() {
    // Without decay the id gets a row at its second step; halved before every step it never does.
    assertEquals(1, admittedAfterThreeSteps(0));
    assertEquals(0, admittedAfterThreeSteps(1));
    assertEquals(ShardrecException.EINVAL,
                 assertThrows(ShardrecException.class, () -> admittedAfterThreeSteps(-1)).code());
  }
}
