// Tables served from the checkpoint's files through a row cache, through the Java binding: the
// same bits as the checkpoint opened in memory, across a reload, with the cache's statistics;
// and the planner's tier constraints and disk calibration.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class InferenceTierTest {
  /** Two checkpoints of one world-1 table-wise run, after 2 and 3 steps. */
  private static Path[] train() throws Exception {
    Path root = Files.createTempDirectory("shardrec_inference_tier_java");
    Path[] dirs = {root.resolve("v1"), root.resolve("v2")};
    Comm[] comms = Comm.createLocalGroup(1);
    try (Plan plan = Training.plan(1, OptimizerType.SGD);
         EmbeddingCollection coll = EmbeddingCollection.create(
             plan, comms[0], new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.5f),
             new Config.EmbeddingOptions().seed(11))) {
      for (int s = 0; s < 2; ++s) Training.step(coll, Training.batch(s, 0, 1));
      Checkpoint.save(coll, dirs[0].toString());
      Training.step(coll, Training.batch(2, 0, 1));
      Checkpoint.save(coll, dirs[1].toString());
    } finally {
      comms[0].close();
    }
    return dirs;
  }

  @Test
  void tieredTablesServeTheBitsOfTheTablesInMemory() throws Exception {
    Path[] dirs = train();
    for (ServingStorage storage : new ServingStorage[] {ServingStorage.AS_TRAINED,
                                                        ServingStorage.INT8}) {
      Inference.Options tiered = new Inference.Options().defaultStorage(storage);
      for (String t : new String[] {"t0", "t1", "t2"}) tiered.tier(t, 200); // a row or two
      try (Inference mem = Inference.open(dirs[0].toString(),
                                          new Inference.Options().defaultStorage(storage));
           Inference disk = Inference.open(dirs[0].toString(), tiered)) {
        for (int step = 5; step < 8; ++step) {
          Kjt request = Training.batch(step, 0, 1);
          assertArrayEquals(mem.lookup(request), disk.lookup(request));
        }
        ServingTierStats s = disk.tierStats("t1");
        assertEquals(1, s.modelVersion);
        assertTrue(s.misses > 0 && s.diskReads > 0 && s.cacheSlots > 0, s.toString());
        assertTrue(s.cacheBytes <= 200 && s.cacheRows <= s.cacheSlots, s.toString());
        disk.reload(dirs[1].toString());
        s = disk.tierStats("t1");
        assertEquals(2, s.modelVersion);
        assertEquals(0, s.hits + s.misses);
        assertThrows(ShardrecException.class, () -> mem.tierStats("t1"));
      }
    }
    ShardrecException e = assertThrows(
        ShardrecException.class,
        () -> Inference.open(dirs[0].toString(), new Inference.Options().tier("nope", 4096)));
    assertTrue(e.getMessage().contains("nope"), e.getMessage());
  }

  @Test
  void plansTieredTablesAndCalibratesADisk() throws Exception {
    List<Config.Table> tables = new ArrayList<>();
    tables.add(new Config.Table("big", 10_000_000L, 64).features(0));
    List<Config.Feature> features = new ArrayList<>();
    features.add(new Config.Feature("f").poolingFactor(20));
    Config.Topology topo = new Config.Topology(1);
    topo.memoryBytes = 4L << 30;
    topo.optimizer = OptimizerType.ADAGRAD;
    assertThrows(ShardrecException.class, () -> Plan.create(tables, features, topo, null));
    List<Config.Constraints> tier = new ArrayList<>();
    tier.add(new Config.Constraints("big").tier(512L << 20, 0, 1.05));
    try (Plan plan = Plan.create(tables, features, topo, tier)) {
      assertTrue(plan.stats().contains("cache 512.00 MiB"), plan.stats());
    }
    Path dir = Files.createTempDirectory("shardrec_calibrate_disk_java");
    double iops = topo.calibrateDisk(dir.toString(), 16L << 20, 0.2);
    assertTrue(iops > 100, "iops " + iops);
    assertEquals(iops, topo.diskReadIops);
    assertTrue(topo.diskReadBandwidth > 0 && topo.diskCapacity > 0);
    Files.delete(dir);  // the scratch file is gone: the directory is empty
  }
}
