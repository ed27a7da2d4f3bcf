// JUnit tests of leaked handles: the Cleaner releases them with a warning, close() stays the one
// release, and abort() from another thread never races close() into freed memory.
package org.shardrec;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import org.junit.jupiter.api.Test;

class LeakTest {
  /** Collects the "org.shardrec" logger's formatted messages while installed. */
  private static final class Captured extends Handler implements AutoCloseable {
    final List<String> messages = new CopyOnWriteArrayList<>();

    Captured() {
      NativeHandle.LOG.addHandler(this);
    }

    @Override
    public void publish(LogRecord r) {
      Object[] p = r.getParameters();
      messages.add(java.text.MessageFormat.format(r.getMessage(), p == null ? new Object[0] : p));
    }

    boolean saw(String text) {
      return messages.stream().anyMatch(m -> m.contains(text));
    }

    @Override
    public void flush() {}

    @Override
    public void close() {
      NativeHandle.LOG.removeHandler(this);
    }
  }

  /** Runs the collector until {@code done} holds or 10 s pass; returns whether it held. */
  private static boolean collectUntil(BooleanSupplier done) throws InterruptedException {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!done.getAsBoolean()) {
      if (System.nanoTime() > end) return false;
      System.gc();
      Thread.sleep(20);
    }
    return true;
  }

  /** Two ranks over a unique-id rendezvous (rank 0 hosts the store), created on two threads. */
  private static Comm[] pair(long graceMs) throws Exception {
    byte[] id = Comm.createUniqueId();
    Comm.Options o = new Comm.Options().timeoutMs(20000);
    o.storeGraceMs = graceMs;
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try {
      Future<Comm> r0 = pool.submit(() -> Comm.create(id, 2, 0, o));
      Future<Comm> r1 = pool.submit(() -> Comm.create(id, 2, 1, o));
      return new Comm[] {r0.get(30, TimeUnit.SECONDS), r1.get(30, TimeUnit.SECONDS)};
    } finally {
      pool.shutdownNow();
    }
  }

  @Test
  void leakedCommIsDestroyedWithAWarningAndFreesRankZero() throws Exception {
    long graceMs = 8000;
    Comm[] comms = pair(graceMs);
    Comm rank0 = comms[0];
    long before = NativeHandle.LEAKS_RELEASED.get();
    try (Captured log = new Captured()) {
      comms = null; // rank 1 is now reachable from nowhere: a task that died without close()
      assertTrue(collectUntil(() -> log.saw("Comm (rank 1 of 2) was not closed")),
                 "no leak warning for rank 1; saw " + log.messages);
      assertFalse(log.saw("Comm (rank 0 of 2)"), "rank 0 is still referenced");
    }
    assertTrue(NativeHandle.LEAKS_RELEASED.get() > before);
    // Rank 1 left the store when the Cleaner destroyed it, so rank 0 does not wait its grace.
    long start = System.nanoTime();
    rank0.close();
    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
    assertTrue(ms < graceMs / 2, "rank 0's close took " + ms + " ms of an " + graceMs + " ms grace");
  }

  @Test
  void closedHandlesAreNotDestroyedAgain() throws Exception {
    String tag = "closed-" + System.nanoTime();
    String sentinel = "sentinel-" + System.nanoTime();
    try (Captured log = new Captured()) {
      Comm[] group = Comm.createLocalGroup(2);
      for (Comm c : group) {
        c.describeAs(tag);
        c.close();
        c.close(); // idempotent
        assertTrue(c.isClosed());
      }
      group = null;
      Comm.createLocalGroup(1)[0].describeAs(sentinel); // leaked on purpose
      assertTrue(collectUntil(() -> log.saw(sentinel)), "sentinel never collected");
      assertFalse(log.saw(tag), "a closed handle was reported as leaked: " + log.messages);
    }
  }

  @Test
  void abortRacingCloseIsSafe() throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try {
      for (int i = 0; i < 200; ++i) {
        Comm c = Comm.createLocalGroup(1)[0];
        CountDownLatch go = new CountDownLatch(1);
        Future<?> abort = pool.submit(() -> {
          go.await();
          c.abort();
          return null;
        });
        Future<?> close = pool.submit(() -> {
          go.await();
          c.close();
          return null;
        });
        go.countDown();
        abort.get(10, TimeUnit.SECONDS);
        close.get(10, TimeUnit.SECONDS);
        assertTrue(c.isClosed());
        c.abort(); // after close: nothing to abort, and no error
      }
    } finally {
      pool.shutdownNow();
    }
  }
}
