// close() from another thread while calls run on a handle (a Spark task killed on its thread while
// a cleanup listener closes the model): close waits for the call in flight and returns, and the
// call either completes or throws EINVAL "<Class> is closed"; the JVM never crashes. A collective
// blocked on a peer keeps close waiting until Comm.abort() ends it, and the abort does not wait.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.junit.jupiter.api.Test;

class CloseRaceTest {
  private static final int ROUNDS = 200;
  private static final java.util.Random RANDOM = new java.util.Random(11);
  /** Threads for the closes and the blocked calls (not the common pool, which may be small). */
  private static final java.util.concurrent.ExecutorService THREADS =
      java.util.concurrent.Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "close-race");
        t.setDaemon(true);
        return t;
      });

  /** One call that the racing thread repeats until the handle is closed under it. */
  private interface Call {
    void run() throws Exception;
  }

  /** The exception a call that lost the race to close() must throw. */
  private static void assertClosed(Throwable t, String cls) {
    assertTrue(t instanceof ShardrecException, "not a ShardrecException: " + t);
    ShardrecException e = (ShardrecException) t;
    assertEquals(ShardrecException.EINVAL, e.code(), e.toString());
    assertTrue(e.getMessage().contains(cls + " is closed"), e.getMessage());
  }

  /**
   * Repeats {@code call} on another thread until it throws, closes {@code handle} from this
   * thread a random few microseconds into the loop (so that some closes land inside a native
   * call, some between two), and checks that close returns and the loop ended with EINVAL
   * "{@code cls} is closed".
   */
  private static void closeWhileCalling(AutoCloseable handle, String cls, Call call)
      throws Exception {
    CountDownLatch running = new CountDownLatch(1);
    AtomicReference<Throwable> ended = new AtomicReference<>();
    Thread caller = new Thread(() -> {
      try {
        while (true) {
          call.run();
          running.countDown();
        }
      } catch (Throwable e) {
        ended.set(e);
        running.countDown();
      }
    }, "close-race-caller");
    caller.start();
    assertTrue(running.await(60, TimeUnit.SECONDS), "the first call did not return");
    assertEquals(null, ended.get(), "the loop failed before close");
    LockSupport.parkNanos(RANDOM.nextInt(300_000));
    CompletableFuture<Void> closing = CompletableFuture.runAsync(() -> {
      try {
        handle.close();
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    }, THREADS);
    closing.get(60, TimeUnit.SECONDS); // close returns (after the call in flight)
    caller.join(60_000);
    assertFalse(caller.isAlive(), "the calls go on after close");
    assertClosed(ended.get(), cls);
  }

  /** A world-1 collection whose forward and backward each take a while (many ids). */
  private static final List<Config.Feature> FEATURES =
      List.of(new Config.Feature("a"), new Config.Feature("b"));

  private static Plan bigPlan() {
    List<Config.Table> tables = List.of(new Config.Table("ta", 2000, 64).features(0),
                                        new Config.Table("tb", 1000, 32).features(1));
    return Plan.create(tables, FEATURES, new Config.Topology(1), List.of());
  }

  private static Kjt bigBatch(int batch, int bag) {
    int[] lengths = new int[2 * batch];
    long[] values = new long[2 * batch * bag];
    java.util.Arrays.fill(lengths, bag);
    for (int i = 0; i < values.length; ++i) values[i] = (i * 7919L) % 1000;
    return Kjt.of(batch, 2, lengths, values);
  }

  @Test
  void closingACollectionWhileAnotherThreadTrainsNeverCrashes() throws Exception {
    Kjt batch = bigBatch(256, 8);
    try (Plan plan = bigPlan(); Comm comm = Comm.createLocalGroup(1)[0]) {
      for (int round = 0; round < ROUNDS; ++round) {
        EmbeddingCollection coll = EmbeddingCollection.create(plan, comm, null, null);
        FloatBuffer out = Buffers.floats(coll.outputSize(batch));
        closeWhileCalling(coll, "EmbeddingCollection", () -> {
          coll.forward(batch, out);
          coll.backward(out);
        });
        assertTrue(coll.isClosed());
      }
    }
  }

  @Test
  void closingACommWhileAnotherThreadRunsCollectivesNeverCrashes() throws Exception {
    int n = 1 << 16;
    FloatBuffer[] send = {Buffers.floats(n), Buffers.floats(n)};
    FloatBuffer[] recv = {Buffers.floats(n), Buffers.floats(n)};
    for (int round = 0; round < ROUNDS / 4; ++round) {
      Comm[] group = Comm.createLocalGroup(2, new Comm.Options().timeoutMs(30000));
      // Rank 1 runs the same collectives until rank 0 stops joining: then it blocks, and the
      // abort that precedes its close ends it (EABORTED) at once.
      CompletableFuture<Void> peer = CompletableFuture.runAsync(() -> {
        while (true) group[1].allreduce(send[1], recv[1], n, DType.FLOAT32, ReduceOp.SUM);
      }, THREADS);
      closeWhileCalling(group[0], "Comm", () -> {
        group[0].allreduce(send[0], recv[0], n, DType.FLOAT32, ReduceOp.SUM);
      });
      group[1].abort();
      ExecutionException e =
          assertThrows(ExecutionException.class, () -> peer.get(60, TimeUnit.SECONDS));
      assertTrue(e.getCause() instanceof ShardrecException, e.getCause().toString());
      group[1].close();
    }
  }

  @Test
  void closingAnMlpOrAPlanWhileAnotherThreadUsesItNeverCrashes() throws Exception {
    int batch = 64;
    FloatBuffer x = Buffers.floats(batch * 256L);
    FloatBuffer y = Buffers.floats(batch * 64L);
    FloatBuffer dx = Buffers.floats(batch * 256L);
    for (int round = 0; round < ROUNDS / 2; ++round) {
      Mlp mlp = Mlp.create(256, new long[] {256, 64}, null, 3, "m");
      closeWhileCalling(mlp, "Mlp", () -> {
        mlp.forward(x, batch, y);
        mlp.backward(y, dx);
      });
      Plan plan = bigPlan();
      closeWhileCalling(plan, "Plan", () -> {
        plan.toJson();
        plan.shard(plan.findTable("tb"), 0);
      });
    }
  }

  @Test
  void aBlockedCollectiveKeepsCloseWaitingUntilAbort() throws Exception {
    Comm[] group = Comm.createLocalGroup(2, new Comm.Options().timeoutMs(60000));
    try {
      CompletableFuture<Void> blocked = CompletableFuture.runAsync(group[0]::barrier, THREADS);
      Thread.sleep(200); // rank 1 never joins
      CompletableFuture<Void> closing = CompletableFuture.runAsync(group[0]::close, THREADS);
      assertThrows(TimeoutException.class, () -> closing.get(300, TimeUnit.MILLISECONDS),
                   "close returned while the barrier still ran");
      // A second close waits too (the first one's destruction is still to come).
      CompletableFuture<Void> closing2 = CompletableFuture.runAsync(group[0]::close, THREADS);
      assertThrows(TimeoutException.class, () -> closing2.get(300, TimeUnit.MILLISECONDS),
                   "a second close returned while the barrier still ran");
      long start = System.nanoTime();
      group[0].abort(); // not behind the barrier nor the waiting close
      ExecutionException e = assertThrows(ExecutionException.class,
                                          () -> blocked.get(10, TimeUnit.SECONDS));
      assertEquals(ShardrecException.EABORTED, ((ShardrecException) e.getCause()).code());
      closing.get(10, TimeUnit.SECONDS);
      closing2.get(10, TimeUnit.SECONDS);
      assertTrue(System.nanoTime() - start < 5_000_000_000L, "close did not follow the abort");
      assertClosed(assertThrows(ShardrecException.class, group[0]::barrier), "Comm");
      group[0].abort(); // after close: does nothing
    } finally {
      group[0].close();
      group[1].close();
    }
  }

  @Test
  void closeFromACallbackOfTheSameObjectIsRefusedNotADeadlock() throws Exception {
    Comm[] world = Comm.createLocalGroup(2);
    List<Config.Table> tables = List.of(new Config.Table("t", 4, 2).features(0));
    try (Plan plan = Plan.create(tables, List.of(new Config.Feature("f")),
                                 new Config.Topology(1), List.of())) {
      List<Future<Integer>> ranks = new java.util.ArrayList<>();
      java.util.concurrent.ExecutorService pool =
          java.util.concurrent.Executors.newFixedThreadPool(2);
      for (int r = 0; r < 2; ++r) {
        final int rank = r;
        ranks.add(pool.submit(() -> {
          try (Mesh mesh = Mesh.create(world[rank], new Mesh.Options().shardingGroupSize(1));
               EmbeddingCollection coll = mesh.embeddingCollection(plan, null, null)) {
            mesh.setSyncHook((data, count, dtype) -> mesh.close());
            ShardrecException e =
                assertThrows(ShardrecException.class, () -> mesh.sync(coll, SyncMode.WEIGHTS_ONLY));
            assertFalse(mesh.isClosed(), e.toString());
            mesh.setSyncHook(null);
            return e.code();
          }
        }));
      }
      // The hook runs on the thread inside sync(): its close() throws EUSAGE, which fails the
      // sync with that code (on both ranks: both hooks close), and the mesh stays open.
      assertEquals(ShardrecException.EUSAGE, ranks.get(0).get(60, TimeUnit.SECONDS));
      assertEquals(ShardrecException.EUSAGE, ranks.get(1).get(60, TimeUnit.SECONDS));
      pool.shutdown();
    } finally {
      for (Comm c : world) c.close();
    }
  }
}
