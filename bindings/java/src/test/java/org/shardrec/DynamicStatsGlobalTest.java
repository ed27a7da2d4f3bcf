// EmbeddingCollection.dynamicStatsGlobal at world 2: every rank gets the sums over ranks of
// dynamicStats; ranks naming different tables are all refused with EINVAL.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

class DynamicStatsGlobalTest {
  @Test
  void globalStatsAreTheSumsOverRanksOnEveryRank() throws Exception {
    Config.DynamicTable lru = new Config.DynamicTable().eviction(Eviction.LRU);
    List<Config.Table> tables = List.of(new Config.Table("dyn", 8, 4).features(0).dynamic(lru),
                                        new Config.Table("dyn2", 8, 4).features(1).dynamic(lru));
    List<Config.Feature> features = List.of(new Config.Feature("a"), new Config.Feature("b"));
    List<Config.Constraints> rowWise =
        List.of(new Config.Constraints("dyn").shardingTypes(ShardingType.ROW_WISE),
                new Config.Constraints("dyn2").shardingTypes(ShardingType.ROW_WISE));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try (Plan plan = Plan.create(tables, features, new Config.Topology(2), rowWise);
         LocalGroup group = Comm.localGroup(2)) {
      List<Future<DynamicTableStats[]>> ranks = new ArrayList<>();
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        ranks.add(pool.submit(() -> {
          try (EmbeddingCollection coll =
                   EmbeddingCollection.create(plan, group.get(rank), sgd, null)) {
            // 12 ids over 8 slots per step, new ones each step: evictions.
            for (int step = 0; step < 2; ++step) {
              long[] values = new long[12];
              for (int i = 0; i < 6; ++i) {
                values[i] = values[6 + i] = 1 + i + 10 * rank + 100 * step;
              }
              float[] out = coll.forward(Kjt.of(1, 2, new int[] {6, 6}, values));
              coll.backward(out);
            }
            DynamicTableStats local = coll.dynamicStats("dyn");
            DynamicTableStats global = coll.dynamicStatsGlobal("dyn");
            ShardrecException e = assertThrows(ShardrecException.class,
                () -> coll.dynamicStatsGlobal(rank == 0 ? "dyn" : "dyn2"));
            assertEquals(ShardrecException.EINVAL, e.code(), e.toString());
            return new DynamicTableStats[] {local, global};
          }
        }));
      }
      DynamicTableStats l0 = ranks.get(0).get()[0];
      DynamicTableStats l1 = ranks.get(1).get()[0];
      DynamicTableStats g = ranks.get(0).get()[1];
      assertEquals(g, ranks.get(1).get()[1]);
      assertEquals(l0.size + l1.size, g.size);
      assertEquals(l0.capacity + l1.capacity, g.capacity);
      assertEquals((double) g.size / g.capacity, g.loadFactor);
      assertEquals(l0.lastInserted + l1.lastInserted, g.lastInserted);
      assertEquals(l0.lastEvicted + l1.lastEvicted, g.lastEvicted);
      assertEquals(l0.lastRejectedAdmission + l1.lastRejectedAdmission, g.lastRejectedAdmission);
      assertEquals(l0.lastRejectedFull + l1.lastRejectedFull, g.lastRejectedFull);
      assertEquals(l0.totalInserted + l1.totalInserted, g.totalInserted);
      assertEquals(l0.totalEvicted + l1.totalEvicted, g.totalEvicted);
      assertEquals(l0.totalRejectedAdmission + l1.totalRejectedAdmission,
                   g.totalRejectedAdmission);
      assertEquals(l0.totalRejectedFull + l1.totalRejectedFull, g.totalRejectedFull);
      assertEquals(l0.metadataBytes + l1.metadataBytes, g.metadataBytes);
      assertEquals(l0.capacityBytes + l1.capacityBytes, g.capacityBytes);
      assertEquals(l0.lastAdmitted + l1.lastAdmitted, g.lastAdmitted);
      assertEquals(l0.totalAdmitted + l1.totalAdmitted, g.totalAdmitted);
      assertTrue(g.size > 0 && g.totalEvicted > 0, g.toString());
    } finally {
      pool.shutdown();
    }
  }
}
