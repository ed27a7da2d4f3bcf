// The parts of the C API added to the Java binding last, each checked by value: library and
// device queries, the dense collectives at world 2, the plan's ranks per node, per-table
// optimizer states, dense optimizer state (Adam moments by hand), DDP external gradients
// (averaged in place), dense tensors in checkpoints and the non-finite policy.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.IntFunction;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ApiCoverageTest {
  /** Runs {@code body(rank)} on one thread per rank and returns the results in rank order. */
  private static <T> List<T> onRanks(int world, IntFunction<T> body) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(world);
    try {
      List<Future<T>> futures = new ArrayList<>();
      for (int r = 0; r < world; ++r) {
        final int rank = r;
        futures.add(pool.submit(() -> body.apply(rank)));
      }
      List<T> out = new ArrayList<>();
      for (Future<T> f : futures) out.add(f.get());
      return out;
    } finally {
      pool.shutdown();
    }
  }

  @Test
  void versionAndElementSizes() {
    String[] parts = Shardrec.version().split("\\.");
    assertEquals(3, parts.length);
    int code = Integer.parseInt(parts[0]) * 10000 + Integer.parseInt(parts[1]) * 100
               + Integer.parseInt(parts[2]);
    assertEquals(code, Shardrec.versionCode());
    int[] sizes = {4, 2, 2, 8, 4, 8, 1, 0, 0};  // FP8 (7, 8): storage types, size 0
    for (DType t : DType.values()) assertEquals(sizes[t.code()], t.size(), t.toString());
  }

  @Test
  void devicesReportWhyTheyAreMissing() {
    Shardrec.deviceCheck(DeviceType.HOST, 0);
    ShardrecException neg =
        assertThrows(ShardrecException.class, () -> Shardrec.deviceCheck(DeviceType.CUDA, -1));
    assertEquals(ShardrecException.EINVAL, neg.code());
    int n = Shardrec.deviceCount();
    assertTrue(n >= 0);
    if (n == 0) {
      // No GPU (as on the CI machine): the check and the plugin path say why.
      ShardrecException e =
          assertThrows(ShardrecException.class, () -> Shardrec.deviceCheck(DeviceType.CUDA, 0));
      assertTrue(e.code() == ShardrecException.ENODEVICE
                 || e.code() == ShardrecException.EUNSUPPORTED, e.toString());
      assertTrue(!e.getMessage().isEmpty());
      ShardrecException p =
          assertThrows(ShardrecException.class, Shardrec::devicePluginPath);
      assertTrue(p.code() == ShardrecException.ENODEVICE
                 || p.code() == ShardrecException.EUNSUPPORTED, p.toString());
    } else {
      Shardrec.deviceCheck(DeviceType.CUDA, 0);
      assertTrue(Shardrec.devicePluginPath().startsWith("/"));
      assertThrows(ShardrecException.class, () -> Shardrec.deviceCheck(DeviceType.CUDA, n));
    }
  }

  @Test
  void collectivesAtWorldTwo() throws Exception {
    Comm[] comms = Comm.createLocalGroup(2);
    try {
      List<float[]> got = onRanks(2, rank -> {
        Comm c = comms[rank];
        FloatBuffer send = Buffers.of(new float[] {rank + 1, 10 * (rank + 1)});
        FloatBuffer all = Buffers.floats(4);
        c.allgather(send, all, 2, DType.FLOAT32);
        FloatBuffer bcast = Buffers.of(new float[] {rank == 1 ? 7f : -1f, rank == 1 ? 8f : -1f});
        c.broadcast(bcast, 2, DType.FLOAT32, 1);
        FloatBuffer max = Buffers.floats(2);
        c.allreduce(Buffers.of(new float[] {rank, 5 - rank}), max, 2, DType.FLOAT32, ReduceOp.MAX);
        FloatBuffer sum = Buffers.of(new float[] {rank + 0.5f});
        c.allreduceSum(sum);
        float[] out = new float[9];
        all.get(out, 0, 4);
        bcast.get(out, 4, 2);
        max.get(out, 6, 2);
        out[8] = sum.get(0);
        return out;
      });
      for (float[] g : got) assertArrayEquals(new float[] {1, 10, 2, 20, 7, 8, 1, 5, 2}, g);
      // A receive buffer too small for size x count elements is refused in Java (every rank
      // calls: the refusal still joins C's agreement).
      List<String> why = onRanks(2, rank -> {
        Comm c = comms[rank];
        ShardrecException e = assertThrows(ShardrecException.class,
            () -> c.allgather(Buffers.floats(2), Buffers.floats(3), 2, DType.FLOAT32));
        assertThrows(ShardrecException.class,
            () -> c.broadcast(Buffers.floats(1), 2, DType.FLOAT64, 0));
        return e.getMessage();
      });
      for (String w : why) assertTrue(w.contains("recv"), w);
    } finally {
      for (Comm c : comms) c.close();
    }
  }

  @Test
  void planRanksPerNode() {
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    List<Config.Table> tables = List.of(new Config.Table("t", 64, 8).features(0));
    try (Plan p = Plan.create(tables, features, new Config.Topology(4).ranksPerNode(2), List.of());
         Plan q = Plan.create(tables, features, new Config.Topology(4), List.of());
         Plan r = Plan.fromJson(p.toJson())) {
      assertEquals(2, p.ranksPerNode());
      assertEquals(4, q.ranksPerNode());
      assertEquals(2, r.ranksPerNode());
    }
  }

  @Test
  void tableDtypeAndMinPartitionBuilders() {
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    Config.Table t = new Config.Table("t", 64, 8).features(0).dtype(DType.BFLOAT16);
    assertEquals(DType.BFLOAT16, t.dtype);
    // Eight columns: one block under the default 128-column minimum, two with minPartition 4.
    for (int min : new int[] {0, 4}) {
      Config.Constraints c =
          new Config.Constraints("t").shardingTypes(ShardingType.COLUMN_WISE).minPartition(min);
      try (Plan p = Plan.create(List.of(t), features, new Config.Topology(2), List.of(c))) {
        assertEquals(min == 0 ? 1 : 2, p.numShards(0));
      }
    }
  }

  @Test
  void tableStatesFollowEachTablesOptimizer() {
    Config.Optimizer adam = new Config.Optimizer().type(OptimizerType.ADAM).learningRate(0.01f);
    Config.Optimizer rowwise = new Config.Optimizer().type(OptimizerType.ROWWISE_ADAGRAD);
    List<Config.Feature> features = List.of(new Config.Feature("f0"), new Config.Feature("f1"));
    List<Config.Table> tables = List.of(new Config.Table("a", 10, 4).features(0).optimizer(adam),
                                        new Config.Table("b", 6, 2).features(1));
    Config.Topology topology = new Config.Topology(1).optimizer(OptimizerType.ROWWISE_ADAGRAD);
    try (Plan plan = Plan.create(tables, features, topology, List.of());
         Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, rowwise, null)) {
      assertEquals(List.of(new EmbeddingCollection.State("momentum1", false),
                           new EmbeddingCollection.State("momentum2", false)),
                   coll.tableStates("a"));
      assertEquals(List.of(new EmbeddingCollection.State("momentum1", true)),
                   coll.tableStates("b"));
      assertEquals(coll.states(), coll.tableStates("b"));
      assertEquals(40, coll.getState("a", "momentum2").length);
      assertEquals(6, coll.getState("b", "momentum1").length);
      ShardrecException e =
          assertThrows(ShardrecException.class, () -> coll.tableStates("nope"));
      assertEquals(ShardrecException.ENOTFOUND, e.code());
    }
  }

  @Test
  void denseOptimizerStateHoldsAdamMoments() {
    try (Mlp mlp = Mlp.create(2, new long[] {1}, new Activation[] {Activation.NONE}, 3, "m");
         DenseOptimizer opt = DenseOptimizer.create(
             new Config.Optimizer().type(OptimizerType.ADAM).learningRate(0.1f))) {
      assertEquals(0, opt.stateCount(0, DenseOptimizer.State.MOMENTUM1));
      // y = w . x + b with x = (1, 2), dy = 3: dw = (3, 6), db = 3.
      FloatBuffer y = Buffers.floats(1);
      mlp.forward(Buffers.of(new float[] {1, 2}), 1, y);
      mlp.backward(Buffers.of(new float[] {3}), null);
      float[][] grads = {mlp.getGrad(0), mlp.getGrad(1)};
      assertArrayEquals(new float[] {3, 6}, grads[0]);
      assertArrayEquals(new float[] {3}, grads[1]);
      opt.step(mlp);
      for (int t = 0; t < 2; ++t) {
        float[] m = opt.state(t, DenseOptimizer.State.MOMENTUM1);
        float[] v = opt.state(t, DenseOptimizer.State.MOMENTUM2);
        assertEquals(grads[t].length, m.length);
        for (int i = 0; i < m.length; ++i) {
          assertEquals(0.1f * grads[t][i], m[i], 1e-6f);
          assertEquals(0.001f * grads[t][i] * grads[t][i], v[i], 1e-6f);
        }
      }
      opt.setState(0, DenseOptimizer.State.MOMENTUM1, new float[] {0.5f, -0.5f});
      assertArrayEquals(new float[] {0.5f, -0.5f}, opt.state(0, DenseOptimizer.State.MOMENTUM1));
      assertThrows(ShardrecException.class,
                   () -> opt.setState(0, DenseOptimizer.State.MOMENTUM1, new float[3]));
      ShardrecException e = assertThrows(
          ShardrecException.class, () -> opt.stateCount(2, DenseOptimizer.State.MOMENTUM1));
      assertEquals(ShardrecException.EINVAL, e.code());
    }
  }

  @Test
  void externalGradientsAreAveraged() throws Exception {
    Comm[] comms = Comm.createLocalGroup(2);
    try {
      List<float[]> got = onRanks(2, rank -> {
        try (Bucketer ddp = Bucketer.create(comms[rank], new long[] {3, 2}, null)) {
          FloatBuffer g0 = Buffers.of(new float[] {rank, 2 * rank, 4});
          ddp.setExternal(0, g0);
          assertThrows(ShardrecException.class, () -> ddp.setExternal(1, Buffers.floats(3)));
          ddp.markReady(0);
          ddp.markReady(1);
          ddp.finish();
          float[] out = new float[3];
          g0.get(out);
          return out;
        }
      });
      for (float[] g : got) assertArrayEquals(new float[] {0.5f, 1f, 4f}, g);
    } finally {
      for (Comm c : comms) c.close();
    }
  }

  @Test
  void checkpointCarriesDenseTensors(@TempDir Path dir) throws Exception {
    float[] params = {1.5f, -2f, 3.25f};
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0];
         EmbeddingCollection coll =
             EmbeddingCollection.create(plan, comm, Training.optimizer(), null)) {
      Checkpoint.save(coll, dir.toString(),
                      new Checkpoint.Options().dense("mlp.w", FloatBuffer.wrap(params)));
      FloatBuffer back = Buffers.floats(3);
      Checkpoint.load(coll, dir.toString(), new Checkpoint.Options().dense("mlp.w", back));
      float[] out = new float[3];
      back.get(out);
      assertArrayEquals(params, out);
      // A size other than the saved one is refused by the library.
      assertThrows(ShardrecException.class,
                   () -> Checkpoint.load(coll, dir.toString(),
                                         new Checkpoint.Options().dense("mlp.w", Buffers.floats(2))));
      assertThrows(ShardrecException.class,
                   () -> new Checkpoint.Options().dense("a\nb", Buffers.floats(1)));
    }
  }

  @Test
  void nonFinitePolicyReachesTheCollection() {
    Kjt nan = Kjt.of(1, 1, new int[] {1}, new long[] {0}, new float[] {Float.NaN});
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    List<Config.Table> tables = List.of(new Config.Table("t", 4, 2).features(0));
    for (NonFinitePolicy policy : NonFinitePolicy.values()) {
      try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
           Comm comm = Comm.createLocalGroup(1)[0];
           EmbeddingCollection coll = EmbeddingCollection.create(
               plan, comm, null,
               new Config.EmbeddingOptions().nonFinite(policy).tableMemory(TableMemory.SMALL_PAGES))) {
        if (policy == NonFinitePolicy.CHECK) {
          ShardrecException e = assertThrows(ShardrecException.class, () -> coll.forward(nan));
          assertEquals(ShardrecException.EINVAL, e.code());
        } else {
          float[] out = coll.forward(nan);
          assertTrue(Float.isNaN(out[0]) && Float.isNaN(out[1]));
        }
      }
    }
  }

  @Test
  void embeddingDeviceIsForwarded() {
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    List<Config.Table> tables = List.of(new Config.Table("t", 4, 2).features(0));
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
         Comm comm = Comm.createLocalGroup(1)[0]) {
      ShardrecException e = assertThrows(ShardrecException.class,
          () -> EmbeddingCollection.create(
              plan, comm, null, new Config.EmbeddingOptions().device(DeviceType.CUDA, 0)));
      assertTrue(e.code() == ShardrecException.EUNSUPPORTED
                 || e.code() == ShardrecException.ENODEVICE, e.toString());
    }
  }

  /** An in-process key-value store: what a launcher's store (etcd, Redis, ...) would provide. */
  private static final class MemoryStore implements Store {
    private final java.util.Map<String, byte[]> map = new java.util.HashMap<>();
    int sets;

    @Override
    public synchronized void set(String key, byte[] value) {
      ++sets;
      map.put(key, value.clone());
      notifyAll();
    }

    @Override
    public synchronized byte[] get(String key, long timeoutMs) {
      long deadline = System.currentTimeMillis() + Math.max(timeoutMs, 1);
      while (!map.containsKey(key)) {
        long left = deadline - System.currentTimeMillis();
        if (left <= 0) return null;
        try {
          wait(left);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          return null;
        }
      }
      return map.get(key);
    }
  }

  @Test
  void customStoreRendezvousAtWorldTwo() throws Exception {
    MemoryStore store = new MemoryStore();
    List<float[]> got = onRanks(2, rank -> {
      try (Comm c = Comm.create(store, 2, rank, new Comm.Options().timeoutMs(20000))) {
        assertEquals(rank, c.rank());
        assertEquals(2, c.size());
        FloatBuffer v = Buffers.of(new float[] {rank + 1, 10});
        c.allreduceSum(v);
        return new float[] {v.get(0), v.get(1)};
      }
    });
    for (float[] g : got) assertArrayEquals(new float[] {3, 20}, g);
    assertTrue(store.sets >= 2, "the store was not used");
  }

  @Test
  void storeExceptionsCarryTheirCode() {
    Store failing = new Store() {
      @Override
      public void set(String key, byte[] value) {
        throw new ShardrecException(ShardrecException.EIO, "store down");
      }

      @Override
      public byte[] get(String key, long timeoutMs) {
        throw new IllegalStateException("store down");
      }
    };
    ShardrecException e = assertThrows(
        ShardrecException.class,
        () -> Comm.create(failing, 2, 0, new Comm.Options().timeoutMs(2000)));
    // The rendezvous fails as a whole (EREMOTE); the message names the store's own code.
    assertEquals(ShardrecException.EREMOTE, e.code(), e.toString());
    assertTrue(e.getMessage().contains("returned code " + ShardrecException.EIO), e.getMessage());
  }

  @Test
  void tensorViewsMatchThePlainCalls() {
    Kjt batch = Kjt.of(2, 1, new int[] {2, 1}, new long[] {0, 3, 1});
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    List<Config.Table> tables = List.of(new Config.Table("t", 4, 3).features(0));
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.5f);
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of());
         Comm c1 = Comm.createLocalGroup(1)[0]; Comm c2 = Comm.createLocalGroup(1)[0];
         EmbeddingCollection plain = EmbeddingCollection.create(
             plan, c1, sgd, new Config.EmbeddingOptions().seed(5));
         EmbeddingCollection viewed = EmbeddingCollection.create(
             plan, c2, sgd, new Config.EmbeddingOptions().seed(5))) {
      float[] want = plain.forward(batch);
      FloatBuffer out = Buffers.floats(6);
      viewed.forward(batch, out, new long[] {2, 3});
      float[] got = new float[6];
      out.get(got);
      assertArrayEquals(want, got);
      plain.backward(want);
      viewed.backward(Buffers.of(got), new long[] {2, 3});
      assertArrayEquals(plain.getWeights("t"), viewed.getWeights("t"));
      viewed.synchronize();  // a host collection: nothing queued, returns at once
      assertEquals(plain.numSteps(), viewed.numSteps());
      // Pipelined: the distributed forward into a view.
      viewed.inputDistStart(batch);
      viewed.inputDistWait();
      FloatBuffer dist = Buffers.floats(6);
      viewed.forwardDistributed(dist, new long[] {6});
      float[] again = viewed.forward(batch);
      float[] d = new float[6];
      dist.get(d);
      assertArrayEquals(again, d);
      // A last extent other than the output width: refused by the library.
      ShardrecException e = assertThrows(ShardrecException.class,
          () -> viewed.forward(batch, Buffers.floats(6), new long[] {3, 2}));
      assertEquals(ShardrecException.EINVAL, e.code());
      // A shape that does not match the buffer: refused before the call.
      assertThrows(ShardrecException.class,
                   () -> viewed.forward(batch, Buffers.floats(6), new long[] {2, 4}));
    }
  }

  @Test
  void layersComputeWithBoundStorage() {
    try (Mlp mlp = Mlp.create(2, new long[] {1}, new Activation[] {Activation.NONE}, 3, "m")) {
      // One flat buffer holds weight (2) and bias (1); the layer reads and writes it in place.
      FloatBuffer flat = Buffers.of(new float[] {1, 2, 0.5f});
      FloatBuffer w = flat.duplicate().position(0).limit(2).slice();
      FloatBuffer b = flat.duplicate().position(2).limit(3).slice();
      FloatBuffer dw = Buffers.floats(2);
      mlp.bindTensor(0, w, dw);
      mlp.bindTensor(1, b, null);
      FloatBuffer y = Buffers.floats(1);
      mlp.forward(Buffers.of(new float[] {3, 4}), 1, y);
      assertEquals(1 * 3 + 2 * 4 + 0.5f, y.get(0));
      mlp.backward(Buffers.of(new float[] {1}), null);
      assertEquals(3f, dw.get(0));
      assertEquals(4f, dw.get(1));
      mlp.setParam(1, new float[] {-1});
      assertEquals(-1f, flat.get(2)); // the parameters ARE the caller's storage
      assertThrows(ShardrecException.class,
                   () -> mlp.bindTensor(0, Buffers.floats(3), null));
      assertThrows(ShardrecException.class,
                   () -> mlp.bindTensor(2, Buffers.floats(1), null));
    }
  }

  @Test
  void syncHookAveragesTheReplicas() throws Exception {
    Comm[] world = Comm.createLocalGroup(2);
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    List<Config.Table> tables = List.of(new Config.Table("t", 4, 2).features(0));
    try (Plan plan = Plan.create(tables, features, new Config.Topology(1), List.of())) {
      List<float[]> got = onRanks(2, rank -> {
        // Sharding groups of 1: two replicas of the whole collection.
        try (Mesh mesh = Mesh.create(world[rank], new Mesh.Options().shardingGroupSize(1));
             Comm replicas = mesh.replicaComm();
             EmbeddingCollection coll = mesh.embeddingCollection(plan, null, null)) {
          int[] calls = {0};
          mesh.setSyncHook((data, count, dtype) -> {
            ++calls[0];
            replicas.allreduce(data, data, count, dtype, ReduceOp.AVG);
          });
          float[] w = new float[8];
          java.util.Arrays.fill(w, rank + 1);
          coll.setWeights("t", w);
          mesh.sync(coll, SyncMode.WEIGHTS_ONLY);
          assertTrue(calls[0] >= 1, "the hook was not called");
          // A failing hook fails the sync with its code.
          mesh.setSyncHook((data, count, dtype) -> {
            throw new ShardrecException(ShardrecException.EIO, "hook down");
          });
          ShardrecException e =
              assertThrows(ShardrecException.class, () -> mesh.sync(coll, SyncMode.WEIGHTS_ONLY));
          assertTrue(e.code() < 0 && e.getMessage().contains("sync hook"), e.toString());
          mesh.setSyncHook(null);
          return coll.getWeights("t");
        }
      });
      float[] want = new float[8];
      java.util.Arrays.fill(want, 1.5f);
      for (float[] g : got) assertArrayEquals(want, g);
    } finally {
      for (Comm c : world) c.close();
    }
  }

  @Test
  void abortFromAnotherThreadUnblocksABarrierAndLocalRank() throws Exception {
    Comm.Options options = new Comm.Options().timeoutMs(30000);
    Comm[] group = Comm.createLocalGroup(2, options);
    try {
      assertEquals(1, group[1].localRank());
      assertEquals(2, group[1].localSize());
      ExecutorService pool = Executors.newSingleThreadExecutor();
      Future<?> blocked = pool.submit(() -> group[0].barrier()); // rank 1 never joins
      Thread.sleep(200);
      long start = System.nanoTime();
      group[0].abort();
      java.util.concurrent.ExecutionException e =
          assertThrows(java.util.concurrent.ExecutionException.class, blocked::get);
      assertTrue(System.nanoTime() - start < 1_000_000_000L);
      assertEquals(ShardrecException.EABORTED, ((ShardrecException) e.getCause()).code());
      pool.shutdown();
    } finally {
      group[0].close();
      group[1].close();
    }
  }

  @Test
  void fromEnvWithoutLauncherVariablesIsNotFound() {
    for (String v :
        new String[] {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
      if (System.getenv(v) != null) return; // launched: the variables are real
    }
    ShardrecException e = assertThrows(ShardrecException.class, () -> Comm.fromEnv(null));
    assertEquals(ShardrecException.ENOTFOUND, e.code());
  }
}
