// Misuse that once surfaced as a bare NullPointerException or ArithmeticException, or as a
// timeout that was none, now gets a clear error naming what is wrong: ShardrecException EINVAL
// naming the parameter (the binding's own checks, IllegalArgumentException until 0.1), or the
// library's status with the cause.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

class BadArgumentsTest {
  /** {@code call} throws ShardrecException EINVAL whose message contains {@code text}. */
  private static void refused(String text, Executable call) {
    ShardrecException e = assertThrows(ShardrecException.class, call);
    assertEquals(ShardrecException.EINVAL, e.code(), e.toString());
    assertTrue(e.getMessage() != null && e.getMessage().contains(text), e.toString());
  }

  @Test
  void nullListsPoolingAndOverflowingShapesAreRefusedNamingThem() {
    refused("tables must not be null", () -> Plan.create(null, List.of(), null, null));
    refused("features must not be null", () -> Plan.create(List.of(), null, null, null));
    java.util.List<Config.Table> holdsNull = new java.util.ArrayList<>();
    holdsNull.add(null);
    refused("tables must not hold null", () -> Plan.create(holdsNull, List.of(), null, null));
    refused("pooling must not be null", () -> new Config.Table("t", 4, 2).pooling(null));
    // batchSize x numFeatures wraps to 0 in a long: refused, not taken as an empty batch.
    refused("overflows", () -> new Kjt(1L << 62, 4, Buffers.ints(0), Buffers.longs(0)));
    // Sizes that wrap: no buffer of 2^62 floats, and no interaction over 2^62 samples (its
    // backward's C call takes no lengths, so wrapped checks let empty buffers through to a crash).
    refused("not allocatable", () -> Buffers.floats(1L << 62));
    refused("not allocatable", () -> Buffers.floats((1L << 62) + 3));
    FloatBuffer none = Buffers.floats(0);
    refused("overflows", () -> Dense.dotInteractionBackward(none, none, none, 1L << 62, 7, 4,
                                                              none, none));
    refused("overflows", () -> Dense.dotInteractionForward(none, none, 1L << 62, 7, 4, none));
  }

  @Test
  void negativeByteCountsThatCWouldReadAsHugeAreRefusedNamingThem() {
    List<Config.Feature> features = List.of(new Config.Feature("f"));
    List<Config.Table> tables = List.of(new Config.Table("t", 64, 8).features(0));
    Config.Topology negative = new Config.Topology(1);
    negative.memoryBytes = -1;
    refused("memoryBytes must be >= 0, got -1",
            () -> Plan.create(tables, features, negative, List.of()));
    Config.Topology negativeRank = new Config.Topology(2);
    negativeRank.memoryBytesPerRank = new long[] {1L << 30, -5};
    refused("memoryBytesPerRank[1] must be >= 0, got -5",
            () -> Plan.create(tables, features, negativeRank, List.of()));
    Config.Constraints tier = new Config.Constraints("t").tier(-1, 0.5, 1.05);
    refused("tierCacheBytes of table t must be >= 0, got -1",
            () -> Plan.create(tables, features, new Config.Topology(1), List.of(tier)));
    refused("tier cache bytes of table t must be >= 0, got -1",
            () -> new Inference.Options().tier("t", -1));
    // The same calls with the counts at 0 (the defaults) go through.
    try (Plan p = Plan.create(tables, features, new Config.Topology(1), List.of())) {
      assertEquals(1, p.numShards(0));
    }
  }

  @Test
  void nullConfigValuesAreShardrecExceptionsNamingThem() {
    // The setters, refusing at once.
    refused("table must not be null", () -> new Config.EmbeddingOptions().tier(null, "d", 4096));
    refused("dir must not be null", () -> new Config.EmbeddingOptions().tier("t", null, 4096));
    refused("table must not be null", () -> new TableTier(null, "d", 4096));
    refused("dtype must not be null", () -> new Config.Table("t", 4, 2).dtype(null));
    refused("kind must not be null", () -> new Config.Table("t", 4, 2).init(null, 0, 1));
    refused("features must not be null", () -> new Config.Table("t", 4, 2).features((int[]) null));
    refused("featureNames must not be null",
            () -> new Config.Table("t", 4, 2).featureNames((String[]) null));
    refused("type must not be null", () -> new Config.Optimizer().type(null));
    refused("mode must not be null", () -> new Config.Optimizer().weightDecay(0.1f, null));
    refused("optimizer must not be null", () -> new Config.Topology(1).optimizer(null));
    refused("types must not be null",
            () -> new Config.Constraints("t").shardingTypes((ShardingType[]) null));
    refused("a sharding type must not be null",
            () -> new Config.Constraints("t").shardingTypes(ShardingType.TABLE_WISE, null));
    refused("ranks must not be null", () -> new Config.Constraints("t").ranks((int[]) null));
    refused("type must not be null", () -> new Config.EmbeddingOptions().device(null, 0));
    refused("nonFinite must not be null", () -> new Config.EmbeddingOptions().nonFinite(null));
    refused("tableMemory must not be null", () -> new Config.EmbeddingOptions().tableMemory(null));
    refused("forward must not be null",
            () -> new Config.EmbeddingOptions().commEncoding(null, CommEncoding.FP32));
    refused("backward must not be null",
            () -> new Config.EmbeddingOptions().commEncoding(CommEncoding.FP32, null));
    refused("eviction must not be null", () -> new Config.DynamicTable().eviction(null));
    refused("compression must not be null", () -> new Bucketer.Options().compression(null));
    refused("layout must not be null", () -> new Mesh.Options().layout(null));
    refused("syncMode must not be null", () -> new Mesh.Options().syncMode(null));
    refused("device must not be null",
            () -> Mlp.create(4, new long[] {2}, null, 1, "m", null, 0, DenseMath.FP32));
    refused("math must not be null",
            () -> Mlp.create(4, new long[] {2}, null, 1, "m", DeviceType.HOST, 0, null));
    refused("activations[0] must not be null",
            () -> Mlp.create(4, new long[] {2}, new Activation[] {null}, 1, "m", DeviceType.HOST,
                             0, DenseMath.FP32));

    // The public fields set to null directly: refused where the call reads them.
    Config.Table noDtype = new Config.Table("t0", 40, 8).features(0);
    noDtype.dtype = null;
    refused("dtype of table t0 must not be null",
            () -> Plan.create(List.of(noDtype), Training.features(), null, null));
    Config.Table noPooling = new Config.Table("t0", 40, 8).features(0);
    noPooling.pooling = null;
    refused("pooling of table t0 must not be null",
            () -> Plan.create(List.of(noPooling), Training.features(), null, null));
    Config.Topology noOptimizer = new Config.Topology(1);
    noOptimizer.optimizer = null;
    refused("optimizer must not be null",
            () -> Plan.create(Training.tables(), Training.features(), noOptimizer, null));
    java.util.List<Config.Constraints> holdsNull = new java.util.ArrayList<>();
    holdsNull.add(null);
    refused("constraints must not hold null",
            () -> Plan.create(Training.tables(), Training.features(), null, holdsNull));
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0]) {
      Config.Optimizer noType = new Config.Optimizer();
      noType.type = null;
      refused("the optimizer's type must not be null",
              () -> EmbeddingCollection.create(plan, comm, noType, null));
      Config.EmbeddingOptions noBounds = new Config.EmbeddingOptions();
      noBounds.boundsPolicy = null;
      refused("boundsPolicy must not be null",
              () -> EmbeddingCollection.create(plan, comm, null, noBounds));
      Config.EmbeddingOptions nullTier = new Config.EmbeddingOptions();
      nullTier.tiers.add(null);
      refused("each of tiers must not be null",
              () -> EmbeddingCollection.create(plan, comm, null, nullTier));
      refused("the optimizer's type must not be null",
              () -> Fsdp.create(comm, new long[] {1}, new float[] {0}, noType));
      // The refusals were collective calls refused in step: the group still creates.
      EmbeddingCollection.create(plan, comm, null, null).close();
    }
  }

  @Test
  void nullArraysAreRefusedNamingTheParameter() {
    refused("lengths must not be null", () -> Kjt.of(2, 1, null, null));
    refused("values must not be null", () -> Kjt.of(2, 1, new int[] {1, 1}, null));
    refused("lengths must not be null", () -> Kjt.of(2, 1, null, new long[] {0, 1}, null));
    refused("values must not be null", () -> Buffers.of((float[]) null));
    refused("values must not be null", () -> Buffers.of((long[]) null));
  }

  @Test
  void nullArgumentsOfACollectionAreRefusedNamingThem() throws Exception {
    try (Plan plan = Training.plan(1); Comm comm = Comm.createLocalGroup(1)[0]) {
      refused("plan must not be null", () -> EmbeddingCollection.create(null, comm, null, null));
      refused("comm must not be null",
              () -> EmbeddingCollection.create(plan, (Comm) null, null, null));
      refused("world must not be null", () -> Mesh.create(null, null));
      refused("comm must not be null", () -> Config.Topology.fromComm(null));
      refused("comm must not be null", () -> Bucketer.create(null, new long[] {1}, null));
      refused("coll must not be null", () -> Checkpoint.save(null, "/nonexistent/ckpt"));
      try (EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, null, null)) {
        refused("batch must not be null", () -> coll.forward((Kjt) null));
        Kjt batch = Training.batch(0, 0, 1);
        float[] out = coll.forward(batch);
        refused("grad must not be null", () -> coll.backward((float[]) null));
        refused("weights must not be null", () -> coll.setWeights("t0", (float[]) null));
        refused("values must not be null", () -> coll.setState("t0", "momentum1", null));
        // Nothing was half-done: the backward of the forward still trains.
        coll.backward(out);
        assertEquals(1, coll.numSteps());
      }
    }
  }

  /**
   * What `create` did on each of two ranks of a local group (its message; "created", with
   * " (slow)" after 10 s), after which each rank runs `retry` on the same communicator, which
   * must create (the creations pair up again after a refusal).
   */
  private static String[] onTwoRanks(
      java.util.function.BiFunction<Integer, Comm, AutoCloseable> create,
      java.util.function.BiFunction<Integer, Comm, AutoCloseable> retry) throws Exception {
    Comm[] comms = Comm.createLocalGroup(2, new Comm.Options().timeoutMs(60000));
    java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(2);
    try {
      List<java.util.concurrent.Future<String>> results = new java.util.ArrayList<>();
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        results.add(pool.submit(() -> {
          long start = System.nanoTime();
          String why = "created";
          try (AutoCloseable made = create.apply(rank, comms[rank])) {
            // nothing to do: creation is the test
          } catch (ShardrecException e) {
            why = e.getMessage();
          }
          if (System.nanoTime() - start > 10_000_000_000L) why += " (slow)";
          try (AutoCloseable again = retry.apply(rank, comms[rank])) {
            return why;
          }
        }));
      }
      return new String[] {results.get(0).get(60, java.util.concurrent.TimeUnit.SECONDS),
                           results.get(1).get(60, java.util.concurrent.TimeUnit.SECONDS)};
    } finally {
      pool.shutdownNow();
      comms[0].close();
      comms[1].close();
    }
  }

  /**
   * Creation is collective: a rank given a null plan fails with its peers at once (they name
   * it), and the next creation pairs up on every rank (before, the peers waited, and the retry
   * met their first create).
   */
  @Test
  void aNullPlanOnOneRankFailsEveryRankTogether() throws Exception {
    try (Plan plan = Training.plan(2)) {
      String[] why = onTwoRanks(
          (rank, comm) -> EmbeddingCollection.create(rank == 1 ? null : plan, comm, null, null),
          (rank, comm) -> EmbeddingCollection.create(plan, comm, null, null));
      assertTrue(why[0].contains("rank 1 rejected") && !why[0].contains("slow"), why[0]);
      assertTrue(why[1].contains("plan must not be null") && !why[1].contains("slow"), why[1]);
    }
  }

  /** The same for the bucketer and the sharded parameters, refused in Java before C. */
  @Test
  void aRefusedBucketerOrFsdpOnOneRankFailsEveryRankTogether() throws Exception {
    long[] counts = {3, 2};
    String[] ddp = onTwoRanks(
        (rank, comm) -> Bucketer.create(comm, rank == 1 ? null : counts, null),
        (rank, comm) -> Bucketer.create(comm, counts, null));
    assertTrue(ddp[0].contains("rank 1 refused") && !ddp[0].contains("slow"), ddp[0]);
    assertTrue(ddp[1].contains("counts must not be null") && !ddp[1].contains("slow"), ddp[1]);
    Config.Optimizer sgd = new Config.Optimizer().type(OptimizerType.SGD).learningRate(0.1f);
    String[] fsdp = onTwoRanks(
        (rank, comm) -> Fsdp.create(comm, counts, new float[rank == 1 ? 4 : 5], sgd),
        (rank, comm) -> Fsdp.create(comm, counts, new float[5], sgd));
    assertTrue(fsdp[0].contains("rank 1 refused") && !fsdp[0].contains("slow"), fsdp[0]);
    assertTrue(fsdp[1].contains("initial has 4 values") && !fsdp[1].contains("slow"), fsdp[1]);
  }

  /**
   * A checkpoint load refused in Java (a read-only dense buffer on one rank) still joins C's
   * agreement on the arguments: the other rank fails at once naming it instead of waiting.
   */
  @Test
  void aCheckpointLoadRefusedInJavaFailsEveryRankTogether() throws Exception {
    String dir = java.nio.file.Files.createTempDirectory("shardrec-ro").toString();
    try (Plan plan = Training.plan(2)) {
      String[] why = onTwoRanks(
          (rank, comm) -> {
            try (EmbeddingCollection c = EmbeddingCollection.create(plan, comm, null, null)) {
              FloatBuffer d = Buffers.floats(2);
              Checkpoint.load(c, dir, new Checkpoint.Options().dense(
                  "d", rank == 1 ? d.asReadOnlyBuffer() : d));
            }
            return () -> {};
          },
          (rank, comm) -> () -> {});
      assertTrue(why[0].contains("rank 1 refused its arguments") && !why[0].contains("slow"),
                 why[0]);
      assertTrue(why[1].contains("read-only") && !why[1].contains("slow"), why[1]);
    }
  }

  /**
   * A raw collective refused in Java (a buffer too short for the count) still joins C's
   * agreement: the other rank fails at once naming it (it waited out its timeout before), and the
   * next collective pairs up.
   */
  @Test
  void aRawCollectiveRefusedInJavaFailsEveryRankTogether() throws Exception {
    String[] why = onTwoRanks(
        (rank, comm) -> {
          FloatBuffer four = Buffers.floats(4);
          comm.allreduce(rank == 1 ? Buffers.floats(2) : four, four, 4, DType.FLOAT32,
                         ReduceOp.SUM);
          return () -> {};
        },
        (rank, comm) -> {
          comm.allreduceSum(Buffers.floats(4));
          return () -> {};
        });
    assertTrue(why[0].contains("rank 1 refused its allreduce") && !why[0].contains("slow"),
               why[0]);
    assertTrue(why[1].contains("send holds 8 bytes") && !why[1].contains("slow"), why[1]);
  }

  @Test
  void aCountTooLargeForAnyBufferIsRefusedNamingIt() {
    try (Comm comm = Comm.createLocalGroup(1)[0]) {
      FloatBuffer b = Buffers.floats(4);
      for (long count : new long[] {Long.MAX_VALUE / 2, Long.MAX_VALUE}) {
        refused("count " + count + " is too large",
                () -> comm.allreduce(b, b, count, DType.FLOAT32, ReduceOp.SUM));
        refused("count " + count + " is too large",
                () -> comm.broadcast(b, count, DType.FLOAT64, 0));
        refused("count " + count + " is too large",
                () -> comm.allgather(b, Buffers.floats(4), count, DType.FLOAT32));
      }
      refused("op must not be null", () -> comm.allreduce(b, b, 4, DType.FLOAT32, null));
      // A big-endian view (allocateDirect's default) would be summed as garbage: refused.
      java.nio.FloatBuffer big = java.nio.ByteBuffer.allocateDirect(16).asFloatBuffer();
      java.nio.ByteBuffer bigBytes = java.nio.ByteBuffer.allocateDirect(16);
      if (java.nio.ByteOrder.nativeOrder() != java.nio.ByteOrder.BIG_ENDIAN) {
        refused("send must be in native byte order",
                () -> comm.allreduce(big, b, 4, DType.FLOAT32, ReduceOp.SUM));
        refused("recv must be in native byte order",
                () -> comm.allreduce(b, bigBytes, 4, DType.FLOAT32, ReduceOp.SUM));
        refused("buf must be in native byte order",
                () -> comm.broadcast(big, 4, DType.FLOAT32, 0));
        refused("send must be in native byte order",
                () -> comm.allgather(bigBytes, Buffers.floats(4), 4, DType.FLOAT32));
      }
      // The communicator is unharmed.
      comm.allreduceSum(b);
    }
  }

  /** A store over a map whose get answers at once: null for a key not set yet. */
  private static final class NoWaitStore implements Store {
    private final java.util.Map<String, byte[]> map =
        new java.util.concurrent.ConcurrentHashMap<>();

    @Override
    public void set(String key, byte[] value) {
      map.put(key, value.clone());
    }

    @Override
    public byte[] get(String key, long timeoutMs) {
      return map.get(key);
    }
  }

  @Test
  void aStoreNullBeforeItsTimeoutIsNotReportedAsATimeout() {
    long start = System.nanoTime();
    ShardrecException e = assertThrows(
        ShardrecException.class,
        () -> Comm.create(new NoWaitStore(), 2, 0, new Comm.Options().timeoutMs(20000)));
    assertTrue(System.nanoTime() - start < 10_000_000_000L, "the create waited its timeout");
    // The store's answer fails the rendezvous (EREMOTE, as any store failure), and the message
    // says what happened instead of "timed out after 20000 ms".
    assertEquals(ShardrecException.EREMOTE, e.code(), e.toString());
    assertTrue(e.getMessage().contains("returned null after"), e.getMessage());
    assertTrue(e.getMessage().contains("before its timeout"), e.getMessage());
    assertTrue(!e.getMessage().contains("timed out"), e.getMessage());
    assertEquals(ShardrecException.ENOTFOUND, ((ShardrecException) e.getCause()).code());
  }

  @Test
  void aStoreThatWaitsItsTimeoutStillReportsATimeout() {
    Store waiting = new Store() {
      @Override
      public void set(String key, byte[] value) {}

      @Override
      public byte[] get(String key, long timeoutMs) {
        try {
          Thread.sleep(timeoutMs);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        return null;
      }
    };
    ShardrecException e = assertThrows(
        ShardrecException.class,
        () -> Comm.create(waiting, 2, 0, new Comm.Options().timeoutMs(300)));
    assertEquals(ShardrecException.ETIMEOUT, e.code(), e.toString());
  }
}
