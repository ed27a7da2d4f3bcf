// Topology.calibrate through the Java binding: plausible figures written into the topology, the
// stats of a plan made with it print them, and a bad argument throws without writing.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

class CalibrateTest {
  @Test
  void calibrateFillsTheTopologyWithPlausibleFigures() {
    Config.Topology topology = new Config.Topology(2);
    Config.Calibration c = topology.calibrate(true, 1);
    assertTrue(c.gatherBandwidth > 1e8 && c.gatherBandwidth < 1e12, "gather " + c.gatherBandwidth);
    assertTrue(c.streamBandwidth > 1e8, "stream " + c.streamBandwidth);
    assertTrue(c.elapsed > 0 && c.elapsed < 60.0, "elapsed " + c.elapsed);
    assertEquals(c.gatherBandwidth, topology.memoryBandwidth);
    // One host's ranks exchange on shared memory where the process can use it (else loopback
    // TCP), and rank threads wait on each other's hand-off.
    assertEquals(c.shmUsed ? c.shmBandwidth : c.loopbackBandwidth, topology.intraNodeBandwidth);
    assertEquals((c.shmUsed ? c.shmLatency : c.loopbackLatency) + c.handoffLatency,
                 topology.collectiveLatency, 1e-15);
    assertTrue(topology.perIdCost > 0);
    Config.Table t = new Config.Table("t", 100, 8).features(0);
    try (Plan plan = Plan.create(List.of(t), List.of(new Config.Feature("f")), topology,
                                 List.of())) {
      assertTrue(plan.stats().contains("GiB/s"), plan.stats());
    }
  }

  @Test
  void aBadThreadCountThrowsAndWritesNothing() {
    Config.Topology topology = new Config.Topology(1);
    assertThrows(ShardrecException.class, () -> topology.calibrate(false, -1));
    assertEquals(0.0, topology.memoryBandwidth);
  }

  @Test
  void fromCommTakesWorldAndLocalSizeOnEveryRank() throws Exception {
    Comm[] group = Comm.createLocalGroup(4);
    Config.Topology[] got = new Config.Topology[group.length];
    Thread[] threads = new Thread[group.length];
    for (int r = 0; r < group.length; ++r) {
      final int rank = r;
      threads[r] = new Thread(() -> got[rank] = Config.Topology.fromComm(group[rank]));
      threads[r].start();
    }
    for (Thread t : threads) t.join();
    for (Comm c : group) c.close();
    for (Config.Topology t : got) {
      assertEquals(4, t.worldSize);
      assertEquals(4, t.ranksPerNode);
      assertEquals(0, t.batchSize);
    }
  }

  @Test
  void calibrateNetworkOnOneHostMeasuresNothing() throws Exception {
    Comm[] group = Comm.createLocalGroup(2);
    double[] got = {-1, -1};
    Config.Topology[] topo = {new Config.Topology(2), new Config.Topology(2)};
    Thread[] threads = new Thread[group.length];
    for (int r = 0; r < group.length; ++r) {
      final int rank = r;
      topo[r].interNodeBandwidth = 123;
      threads[r] = new Thread(() -> got[rank] = topo[rank].calibrateNetwork(group[rank], 0.2));
      threads[r].start();
    }
    for (Thread t : threads) t.join();
    for (Comm c : group) c.close();
    for (int r = 0; r < 2; ++r) {
      assertEquals(0.0, got[r]);
      assertEquals(123.0, topo[r].interNodeBandwidth);
    }
  }
}
