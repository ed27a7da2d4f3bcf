// Java's idioms on libshardrec errors and handles: one catch clause sees every refusal of the
// library, the binding's own argument checks (a wrong buffer size) included, with its code; the
// message is the library's alone and toString shows the code once; Comm.localGroup's group closes
// every communicator in try-with-resources; dynamic table statistics are immutable values.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class ErrorIdiomsTest {
  /** The code of the ShardrecException {@code call} throws; fails on any other throwable. */
  private static int codeOf(Runnable call) {
    try {
      call.run();
    } catch (ShardrecException e) {
      assertFalse(e.getMessage().startsWith("SHARDREC_"), e.getMessage());
      String text = e.toString();
      assertEquals(ShardrecException.class.getName() + ": " + e.codeName() + ": " + e.getMessage(),
                   text);
      assertEquals(text.indexOf("SHARDREC_"), text.lastIndexOf("SHARDREC_"), text);
      return e.code();
    }
    throw new AssertionError("nothing was thrown");
  }

  @Test
  void oneCatchClauseSeesEveryRefusalWithItsCode() {
    try (Plan plan = Training.plan(1);
         LocalGroup group = Comm.localGroup(1);
         EmbeddingCollection coll =
             EmbeddingCollection.create(plan, group.get(0), Training.optimizer(), null)) {
      // The binding's own check (a buffer of the wrong size) and the library's (a table it does
      // not know) land in the same clause, told apart by their codes.
      assertEquals(ShardrecException.EINVAL,
                   codeOf(() -> coll.getWeights("t0", Buffers.floats(3))));
      assertEquals(ShardrecException.EINVAL, codeOf(() -> coll.forward(null)));
      assertEquals(ShardrecException.ENOTFOUND, codeOf(() -> coll.getWeights("nope")));
      // A NUL in a name, refused by the JNI layer before C.
      assertEquals(ShardrecException.EINVAL, codeOf(() -> coll.getWeights("t\0")));
    }
  }

  @Test
  void aLocalGroupClosesEveryCommunicator() {
    List<Comm> comms = new ArrayList<>();
    try (LocalGroup group = Comm.localGroup(3)) {
      assertEquals(3, group.size());
      for (int r = 0; r < 3; ++r) {
        assertEquals(r, group.get(r).rank());
        comms.add(group.get(r));
      }
      assertEquals(comms, group.comms());
      assertEquals(ShardrecException.EINVAL, codeOf(() -> group.get(3)));
      assertThrows(UnsupportedOperationException.class, () -> group.comms().add(null));
      group.get(1).close(); // one closed early: the group's close skips it
    }
    for (Comm c : comms) assertTrue(c.isClosed());
    assertEquals(ShardrecException.EINVAL, codeOf(() -> Comm.localGroup(0)));
  }

  @Test
  void dynamicTableStatsAreImmutableValues() throws Exception {
    for (Field f : DynamicTableStats.class.getFields()) {
      assertTrue(Modifier.isFinal(f.getModifiers()), f.getName() + " is not final");
    }
    Config.DynamicTable dynamic = new Config.DynamicTable().eviction(Eviction.LRU);
    List<Config.Table> tables =
        List.of(new Config.Table("dyn", 4, 2).features(0).dynamic(dynamic));
    List<Config.Feature> features = List.of(new Config.Feature("raw"));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
         LocalGroup group = Comm.localGroup(1);
         EmbeddingCollection coll = EmbeddingCollection.create(plan, group.get(0), sgd, null)) {
      DynamicTableStats before = coll.dynamicStats("dyn");
      assertEquals(before, coll.dynamicStats("dyn"));
      assertEquals(before.hashCode(), coll.dynamicStats("dyn").hashCode());
      coll.backward(coll.forward(Kjt.of(1, 1, new int[] {2}, new long[] {5, 9})));
      DynamicTableStats after = coll.dynamicStats("dyn");
      assertNotEquals(before, after);
      assertEquals(2, after.size);
      assertEquals(0, before.size);
    }
  }
}
