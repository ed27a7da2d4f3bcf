// JUnit tests of BarrierRendezvous without Spark: threads stand for a barrier stage's tasks and
// an in-JVM all-gather for BarrierTaskContext.allGather; joins, bad input and the abort hooks.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.FloatBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.Test;

class BarrierRendezvousTest {
  private static final Comm.Options OPTIONS = new Comm.Options().timeoutMs(20000);

  /** An all-gather of n threads, as Spark's: every call returns the n messages by task index. */
  private static final class LocalAllGather {
    private final String[] slots;
    private final CyclicBarrier barrier;

    LocalAllGather(int n) {
      slots = new String[n];
      barrier = new CyclicBarrier(n);
    }

    BarrierRendezvous.AllGather forTask(int task) {
      return msg -> {
        slots[task] = msg;
        barrier.await(20, TimeUnit.SECONDS);
        String[] all = slots.clone();
        barrier.await(20, TimeUnit.SECONDS); // nobody overwrites a slot before all have read
        return all;
      };
    }
  }

  private interface RankBody<T> {
    T run(int rank, BarrierRendezvous.AllGather allGather) throws Exception;
  }

  private static <T> List<T> runTasks(int n, RankBody<T> body) throws Exception {
    LocalAllGather gather = new LocalAllGather(n);
    ExecutorService pool = Executors.newFixedThreadPool(n);
    try {
      List<Future<T>> futures = new ArrayList<>();
      for (int r = 0; r < n; ++r) {
        final int rank = r;
        futures.add(pool.submit(() -> body.run(rank, gather.forTask(rank))));
      }
      List<T> out = new ArrayList<>();
      for (Future<T> f : futures) out.add(f.get(60, TimeUnit.SECONDS));
      return out;
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void tasksJoinOneGroupAndAllReduce() throws Exception {
    List<float[]> sums = runTasks(3, (rank, gather) -> {
      try (Comm comm = BarrierRendezvous.join(rank, 3, gather, OPTIONS)) {
        assertEquals(rank, comm.rank());
        assertEquals(3, comm.size());
        FloatBuffer buf = Buffers.floats(2);
        buf.put(0, rank + 1).put(1, 10 * rank);
        comm.allreduceSum(buf);
        return new float[] {buf.get(0), buf.get(1)};
      }
    });
    for (float[] s : sums) assertArrayEquals(new float[] {6, 30}, s);
  }

  @Test
  void oneTaskNeedsNoPeers() throws Exception {
    try (Comm comm = BarrierRendezvous.join(0, 1, msg -> new String[] {msg}, OPTIONS)) {
      assertEquals(1, comm.size());
    }
  }

  @Test
  void badArgumentsAreRejectedBeforeAnyExchange() {
    BarrierRendezvous.AllGather never = msg -> {
      throw new AssertionError("must not be called");
    };
    assertThrows(ShardrecException.class, () -> BarrierRendezvous.join(0, 0, never, null));
    assertThrows(ShardrecException.class, () -> BarrierRendezvous.join(2, 2, never, null));
    assertThrows(ShardrecException.class, () -> BarrierRendezvous.join(-1, 2, never, null));
    assertThrows(ShardrecException.class, () -> BarrierRendezvous.join(0, 2, null, null));
  }

  @Test
  void badAllGatherResultsAreReported() {
    ShardrecException e = assertThrows(ShardrecException.class,
        () -> BarrierRendezvous.join(1, 2, msg -> new String[] {msg}, OPTIONS));
    assertTrue(e.getMessage().contains("one message per task"), e.getMessage());
    e = assertThrows(ShardrecException.class,
        () -> BarrierRendezvous.join(1, 2, msg -> new String[] {"hello", msg}, OPTIONS));
    assertTrue(e.getMessage().contains("not rank 0's unique id"), e.getMessage());
    e = assertThrows(ShardrecException.class,
        ()
            -> BarrierRendezvous.join(
                1, 2, msg -> new String[] {"shardrec-uid-v1:AAAA", msg}, OPTIONS));
    assertTrue(e.getMessage().contains("bytes"), e.getMessage());
    e = assertThrows(ShardrecException.class,
        ()
            -> BarrierRendezvous.join(
                1, 2, msg -> new String[] {"shardrec-uid-v1:*", msg}, OPTIONS));
    assertTrue(e.getMessage().contains("Base64"), e.getMessage());
  }

  @Test
  void abortWhenUnblocksABlockedCallAndTheFailureHookTheSurvivor() throws Exception {
    AtomicBoolean killed = new AtomicBoolean();
    List<Integer> codes = runTasks(2, (rank, gather) -> {
      try (Comm comm = BarrierRendezvous.join(rank, 2, gather, OPTIONS);
           AutoCloseable watcher = BarrierRendezvous.abortWhen(killed::get, comm)) {
        if (rank == 1) {
          // The failing task: its failure listener aborts it, so rank 0 hears at once.
          Thread.sleep(200);
          BarrierRendezvous.abortHook(comm).run();
          return 0;
        }
        comm.barrier(); // rank 1 never enters: only an abort ends this before the timeout
        return 0;
      } catch (ShardrecException e) {
        return e.code();
      }
    });
    assertEquals(0, (int) codes.get(1));
    assertTrue(
        codes.get(0) == ShardrecException.EREMOTE || codes.get(0) == ShardrecException.EABORTED,
        "rank 0 got " + codes.get(0));

    // A killed task: nobody fails, the watcher's condition turns true and unblocks rank 0.
    List<Integer> killedCodes = runTasks(2, (rank, gather) -> {
      try (Comm comm = BarrierRendezvous.join(rank, 2, gather, OPTIONS);
           AutoCloseable watcher =
               BarrierRendezvous.abortWhen(rank == 0 ? killed::get : () -> false, comm)) {
        if (rank == 1) {
          Thread.sleep(300);
          killed.set(true);
          Thread.sleep(1500); // stays in the group, as a stuck task would
          return 0;
        }
        comm.barrier();
        return 0;
      } catch (ShardrecException e) {
        return e.code();
      }
    });
    assertEquals(ShardrecException.EABORTED, (int) killedCodes.get(0));
  }

  @Test
  void hooksAfterCloseDoNothing() throws Exception {
    Comm comm = Comm.createLocalGroup(1)[0];
    Runnable hook = BarrierRendezvous.abortHook(comm);
    AutoCloseable watcher = BarrierRendezvous.abortWhen(() -> false, comm);
    watcher.close();
    comm.close();
    hook.run();
    assertThrows(ShardrecException.class, () -> BarrierRendezvous.abortHook(null));
  }
}
