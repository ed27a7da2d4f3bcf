// A tiered table through the Java binding trains to the bits of the same table in memory, with a
// cache of a few rows, and its statistics count the cache's work.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

class TieredTableTest {
  private static float[] train(EmbeddingCollection coll) {
    for (int step = 0; step < 5; ++step) Training.step(coll, Training.batch(step, 0, 1));
    return coll.getWeights("t0");
  }

  @Test
  void tieredTableMatchesMemory() throws Exception {
    Path dir = Files.createTempDirectory("shardrec_java_tiered");
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0]) {
      float[] memory;
      try (EmbeddingCollection coll = EmbeddingCollection.create(
               plan, comm, Training.optimizer(), new Config.EmbeddingOptions())) {
        memory = train(coll);
      }
      // t0: 8 fp32 columns, 8 Adagrad state floats and 32 bytes of metadata: 96 bytes a row;
      // 12 rows (a batch has at most 12 ids of it).
      try (EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, Training.optimizer(),
               new Config.EmbeddingOptions().tier("t0", dir.toString(), 12 * 96))) {
        float[] tiered = train(coll);
        for (int i = 0; i < memory.length; ++i) {
          assertEquals(Float.floatToRawIntBits(memory[i]), Float.floatToRawIntBits(tiered[i]),
              "weight " + i);
        }
        TierStats st = coll.tierStats("t0");
        assertEquals(12, st.cacheSlots);
        assertEquals(5, st.steps);
        assertTrue(st.misses > st.cacheSlots && st.writeBacks > 0, st.toString());
        ShardrecException e = assertThrows(ShardrecException.class, () -> coll.tierStats("t1"));
        assertEquals(ShardrecException.EINVAL, e.code());
      }
    }
  }

  @Test
  void tierStatsPrintEveryField() throws Exception {
    // Each field of the C struct gets its own value (setters by reflection, so that a field added
    // later is covered too); every public field of TierStats must show as name=value.
    org.shardrec.swig.tier_stats c = new org.shardrec.swig.tier_stats();
    try {
      int i = 0;
      for (java.lang.reflect.Method m : c.getClass().getMethods()) {
        if (!m.getName().startsWith("set") || m.getName().equals("setVersion")) continue;
        Class<?> type = m.getParameterTypes()[0];
        ++i;
        m.invoke(c, type == double.class ? (Object) (i + 0.25) : (Object) (1000L + i));
      }
      TierStats stats = TierStats.fromNative(c);
      String text = stats.toString();
      int fields = 0;
      for (java.lang.reflect.Field f : TierStats.class.getFields()) {
        ++fields;
        String want = f.getName() + "=" + f.get(stats);
        assertTrue(text.contains(want), "missing " + want + " in " + text);
      }
      assertEquals(19, fields, "TierStats fields");
    } finally {
      c.delete();
    }
  }
}
