// JUnit tests of the 2D mesh binding: 2 replicas x 2-way sharding (4 ranks as threads) trained
// with SGD and a sync every step equals one rank on the global batch; errors and lifetime.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

class MeshTest {
  private static final int WORLD = 4;
  private static final int STEPS = 3;

  private record RankResult(Mesh.Coords coords, Mesh.SyncStats stats, String description,
                            int shardingSize, int replicaSize, float[][] weights) {}

  private static Config.Optimizer sgd() {
    return new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.5f);
  }

  private static Config.EmbeddingOptions seeded() {
    return new Config.EmbeddingOptions().seed(7);
  }

  private static RankResult trainRank(Plan plan, Comm world, int rank) {
    try (Mesh mesh = Mesh.create(world, new Mesh.Options().shardingGroupSize(2));
         EmbeddingCollection coll = mesh.embeddingCollection(plan, sgd(), seeded());
         Comm sharding = mesh.shardingComm(); Comm replica = mesh.replicaComm()) {
      for (int s = 0; s < STEPS; ++s) {
        Training.step(coll, Training.batch(s, rank, 1));
        assertTrue(mesh.step(coll), "interval 1 syncs every step");
      }
      return new RankResult(mesh.coords(), mesh.syncStats(), mesh.describe(), sharding.size(),
                            replica.size(), Training.weights(coll));
    }
  }

  @Test
  void twoReplicasOfTwoWayShardingEqualOneRankOnTheGlobalBatch() throws Exception {
    float[][] initial;
    float[][] single;
    try (Plan plan = Training.plan(1, OptimizerType.SGD); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, sgd(), seeded())) {
      initial = Training.weights(coll);
      for (int s = 0; s < STEPS; ++s) Training.step(coll, Training.batch(s, 0, WORLD));
      single = Training.weights(coll);
    }

    Comm[] world = Comm.createLocalGroup(WORLD);
    ExecutorService pool = Executors.newFixedThreadPool(WORLD);
    List<RankResult> results = new ArrayList<>();
    try (Plan plan = Training.plan(2, OptimizerType.SGD)) {
      List<Future<RankResult>> futures = new ArrayList<>();
      for (int r = 0; r < WORLD; ++r) {
        final int rank = r;
        futures.add(pool.submit(() -> trainRank(plan, world[rank], rank)));
      }
      for (Future<RankResult> f : futures) results.add(f.get());
    } finally {
      pool.shutdown();
      for (Comm c : world) c.close();
    }

    for (int r = 0; r < WORLD; ++r) {
      RankResult res = results.get(r);
      // Default layout, W = 4, S = 2: plan rank p of sharding group g is global rank 2p + g.
      assertEquals(new Mesh.Coords(r % 2, r / 2, r / 2, r % 2), res.coords(), "rank " + r);
      assertEquals(2, res.shardingSize());
      assertEquals(2, res.replicaSize());
      assertEquals(STEPS, res.stats().syncs());
      assertTrue(res.stats().collectives() >= 1 && res.stats().bytes() > 0, res.stats().toString());
      for (int t = 0; t < Training.TABLES.length; ++t) {
        assertEquals(single[t].length, res.weights()[t].length);
        for (int i = 0; i < single[t].length; ++i) {
          float tol = 1e-5f * Math.max(1f, Math.abs(single[t][i]));
          assertEquals(single[t][i], res.weights()[t][i], tol,
                       "rank " + r + " " + Training.TABLES[t] + "[" + i + "]");
        }
      }
    }
    for (int t = 0; t < Training.TABLES.length; ++t) {
      assertFalse(java.util.Arrays.equals(initial[t], single[t]), "training changed " + Training.TABLES[t]);
    }
    String text = results.get(0).description();
    assertTrue(text.contains("replica groups (weight sync): [0,1] [2,3]"), text);
    assertTrue(text.contains("[0,2] [1,3]"), text);
  }

  @Test
  void groupSizeThatDoesNotDivideTheWorldThrowsEinvalWithTheCMessage() throws Exception {
    Comm[] world = Comm.createLocalGroup(WORLD);
    try {
      // Creation is collective: every rank calls it and every rank refuses it.
      java.util.List<Thread> threads = new java.util.ArrayList<>();
      ShardrecException[] errors = new ShardrecException[WORLD];
      for (int r = 0; r < WORLD; ++r) {
        final int rank = r;
        threads.add(new Thread(() -> {
          try {
            Mesh.create(world[rank], new Mesh.Options().shardingGroupSize(3)).close();
          } catch (ShardrecException e) {
            errors[rank] = e;
          }
        }));
      }
      for (Thread t : threads) t.start();
      for (Thread t : threads) t.join();
      for (ShardrecException e : errors) {
        assertTrue(e != null);
        assertEquals(ShardrecException.EINVAL, e.code());
        assertEquals("SHARDREC_EINVAL", e.codeName());
        assertTrue(e.getMessage().contains("sharding group size 3 must divide the world size 4"),
                   e.getMessage());
      }
    } finally {
      for (Comm c : world) c.close();
    }
  }

  @Test
  void oneRankMeshIsOneDimensionalAndCloseIsIdempotent() {
    try (Comm comm = Comm.createLocalGroup(1)[0]) {
      Mesh mesh = Mesh.create(comm, null);
      assertEquals(new Mesh.Coords(0, 0, 0, 0), mesh.coords());
      try (Plan plan = Training.plan(1, OptimizerType.SGD);
           EmbeddingCollection coll = mesh.embeddingCollection(plan, null, null)) {
        mesh.sync(coll, SyncMode.WEIGHTS_ONLY);
        // Modes are typed: an invalid one cannot be written, a missing one is named (and, the
        // sync being collective, refused by the library too, so the other replicas fail with it).
        ShardrecException bad =
            assertThrows(ShardrecException.class, () -> mesh.sync(coll, null));
        assertTrue(bad.getMessage().contains("mode must not be null"), bad.getMessage());
        assertEquals(1, bad.getSuppressed().length);
        mesh.sync(coll, SyncMode.WEIGHTS_ONLY);
      }
      mesh.close();
      mesh.close();
      assertTrue(mesh.isClosed());
      ShardrecException e = assertThrows(ShardrecException.class, mesh::describe);
      assertEquals(ShardrecException.EINVAL, e.code());
      assertFalse(e.getMessage().isEmpty());
      assertEquals(0, comm.rank());
    }
  }
}
