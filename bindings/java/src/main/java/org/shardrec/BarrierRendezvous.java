// Rendezvous for barrier-style schedulers (Spark barrier stages): rank 0's unique id travels
// through the scheduler's own all-gather, and an abort hook ties the communicator to the task.
package org.shardrec;

import java.util.Base64;
import java.util.function.BooleanSupplier;

/**
 * Joins the tasks of a barrier stage into one communicator without any Spark dependency: the
 * caller passes its scheduler's all-gather (in Spark, {@code msg -> ctx.allGather(msg)} on the
 * {@code BarrierTaskContext}). Every task of one stage attempt calls {@link #join} once; rank 0
 * creates a fresh unique id, so a retried attempt meets in a new group.
 *
 * <p>Thread-safety: the static methods may be called from any thread; the returned {@link Comm}
 * is used as any other (one thread at a time, abort and close from any thread).
 */
public final class BarrierRendezvous {
  /** Marks the payload so that a message of another protocol is reported, not misread. */
  private static final String PREFIX = "shardrec-uid-v1:";
  /** How often {@link #abortWhen} polls its condition, ms. */
  private static final long POLL_MS = 100;

  private BarrierRendezvous() {}

  /**
   * The scheduler's all-gather: every task passes one message and receives all of them, element
   * i coming from task i (Spark's {@code BarrierTaskContext.allGather}, also a barrier).
   */
  @FunctionalInterface
  public interface AllGather {
    String[] allGather(String message) throws Exception;
  }

  /**
   * Joins the group of {@code numTasks} tasks as rank {@code partitionId} (collective, blocking):
   * rank 0 creates a unique id, every task exchanges it through {@code allGather}, then all
   * connect to rank 0's store within the options' timeout.
   *
   * @param partitionId this task's index in [0, numTasks), its rank
   * @param numTasks the number of tasks of the stage, the world size (at least 1)
   * @param allGather the scheduler's all-gather; not null
   * @param options communicator options (timeout, backend); null for the defaults
   * @return a new communicator owned by the caller (close it, or it leaks until the JVM exits)
   * @throws ShardrecException on a bad rank, size or all-gather result (no state changes)
   * @throws ShardrecException when the rendezvous fails (ETIMEOUT, EREMOTE, EABORTED)
   */
  public static Comm join(int partitionId, int numTasks, AllGather allGather, Comm.Options options)
      throws Exception {
    if (numTasks < 1)
      throw ShardrecException.invalid("numTasks must be >= 1, got " + numTasks);
    if (partitionId < 0 || partitionId >= numTasks) {
      throw ShardrecException.invalid(
          "partitionId " + partitionId + " is outside [0, " + numTasks + ")");
    }
    if (allGather == null)
      throw ShardrecException.invalid("allGather must not be null");
    String mine =
        partitionId == 0 ? PREFIX + Base64.getEncoder().encodeToString(Comm.createUniqueId()) : "";
    String[] all = allGather.allGather(mine);
    if (all == null || all.length != numTasks) {
      throw ShardrecException.invalid("allGather returned "
          + (all == null ? "null" : all.length + " messages") + " for " + numTasks
          + " tasks (it must return one message per task, in partition order)");
    }
    return Comm.create(decode(all[0]), numTasks, partitionId, options);
  }

  private static byte[] decode(String message) {
    if (message == null || !message.startsWith(PREFIX)) {
      throw ShardrecException.invalid(
          "allGather's element 0 is not rank 0's unique id (is element i task i's message?)");
    }
    byte[] id;
    try {
      id = Base64.getDecoder().decode(message.substring(PREFIX.length()));
    } catch (IllegalArgumentException e) { // java.util.Base64's refusal
      throw ShardrecException.invalid("rank 0's unique id is not valid Base64", e);
    }
    if (id.length != NativeConstants.UNIQUE_ID_BYTES) {
      throw ShardrecException.invalid(
          "rank 0's unique id has " + id.length + " bytes, not " + NativeConstants.UNIQUE_ID_BYTES);
    }
    return id;
  }

  /**
   * An abort for a task-failure listener (Spark: {@code ctx.addTaskFailureListener((c, e) ->
   * hook.run())}): aborts {@code comm} so that its peers fail with EREMOTE at once instead of at
   * their timeout. Does nothing once {@code comm} is closed; never throws.
   *
   * <p>Safe while another thread closes {@code comm}: the close waits for a running abort, and an
   * abort after the close does nothing.
   */
  public static Runnable abortHook(Comm comm) {
    if (comm == null)
      throw ShardrecException.invalid("comm must not be null");
    return () -> abortQuietly(comm);
  }

  /**
   * Watches {@code condition} from a daemon thread every 100 ms and aborts {@code comm} once it
   * holds, which unblocks a call blocked in {@code comm} within about a second (it throws
   * EABORTED). In Spark, pass {@code ctx::isInterrupted}: a killed task's thread stays blocked in
   * native code, which a Java interrupt cannot reach.
   *
   * @return closing it stops the watcher and waits for it; close it before {@code comm} (declare
   *     it after {@code comm} in one try-with-resources)
   */
  public static AutoCloseable abortWhen(BooleanSupplier condition, Comm comm) {
    if (condition == null || comm == null) {
      throw ShardrecException.invalid("condition and comm must not be null");
    }
    Thread watcher = new Thread(() -> {
      try {
        while (!Thread.currentThread().isInterrupted()) {
          if (condition.getAsBoolean()) {
            abortQuietly(comm);
            return;
          }
          Thread.sleep(POLL_MS);
        }
      } catch (InterruptedException e) {
        // Closed: stop watching.
      }
    }, "shardrec-abort-watcher");
    watcher.setDaemon(true);
    watcher.start();
    return () -> {
      watcher.interrupt();
      watcher.join();
    };
  }

  private static void abortQuietly(Comm comm) {
    if (comm.isClosed())
      return;
    try {
      comm.abort();
    } catch (RuntimeException e) {
      // Already closed or torn down: nothing left to abort.
    }
  }
}
