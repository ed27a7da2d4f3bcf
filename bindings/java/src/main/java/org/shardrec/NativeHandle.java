// Base of every owning wrapper: one native pointer whose single owner of destruction is a
// Cleaner action, so that close() and a leaked handle's collection free it exactly once.
package org.shardrec;

import java.lang.ref.Cleaner;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongConsumer;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * An owned libshardrec handle. Not thread-safe unless the subclass says otherwise.
 *
 * <p>A handle that becomes unreachable without close() is destroyed by a Cleaner thread, which
 * logs a WARNING on the "org.shardrec" java.util.logging logger naming the handle. Every call
 * that passes the pointer to native code fences the wrapper (Reference.reachabilityFence) after
 * the call, so the Cleaner never destroys a handle that a call is still using.
 */
abstract class NativeHandle implements AutoCloseable {
  /** One daemon thread for all handles: leaks are rare, and each destroy is short. */
  private static final Cleaner CLEANER = Cleaner.create();

  static final Logger LOG = Logger.getLogger("org.shardrec");

  /** Handles destroyed because they were leaked (for tests and diagnostics). */
  static final AtomicLong LEAKS_RELEASED = new AtomicLong();

  private final Owner owner;
  private final Cleaner.Cleanable cleanable;

  /** {@code destroy} must not capture the wrapper (a static method reference is right). */
  NativeHandle(long handle, LongConsumer destroy) {
    owner = new Owner(handle, destroy, getClass().getSimpleName());
    cleanable = CLEANER.register(this, owner);
  }

  /** Names the handle in the leak warning (say rank and size); must not mention the wrapper. */
  final void describeAs(String label) {
    synchronized (owner) {
      owner.label = label;
    }
  }

  /**
   * The raw pointer. Once closed, throws ShardrecException EINVAL naming the class (the code the
   * C API gives a destroyed handle, with a message a Java caller can place: not the C
   * parameter's "must not be NULL").
   */
  final long handle() {
    long h;
    synchronized (owner) {
      h = owner.handle;
    }
    if (h == 0) throw closed();
    return h;
  }

  private ShardrecException closed() {
    return new ShardrecException(
        ShardrecException.EINVAL, getClass().getSimpleName() + " is closed");
  }

  /** Whether close() was called. */
  public final boolean isClosed() {
    synchronized (owner) {
      return owner.handle == 0;
    }
  }

  /**
   * Runs {@code call} on the pointer from any thread while destroy waits: for calls (abort) that
   * the C API allows concurrently with anything, so that close() on another thread cannot free
   * the object under them. Returns without calling when the handle is already closed.
   */
  final void withConcurrentUse(LongConsumer call) {
    long h;
    synchronized (owner) {
      h = owner.handle;
      if (h == 0)
        return;
      ++owner.concurrentUses;
    }
    try {
      call.accept(h);
    } finally {
      synchronized (owner) {
        if (--owner.concurrentUses == 0)
          owner.notifyAll();
      }
      java.lang.ref.Reference.reachabilityFence(this);
    }
  }

  /** A native call on the raw pointer that returns a value (see {@link #shared}). */
  @FunctionalInterface
  interface SharedCall<T> {
    T apply(long handle);
  }

  /**
   * Runs {@code call} on the pointer, from any number of threads at once, while close() waits for
   * it: for handles whose C API allows concurrent calls (an inference handle and its snapshots),
   * so that close() on another thread never destroys the object under a running call. Each call
   * holds the read side of a ReentrantReadWriteLock (readers never wait for each other) and
   * destruction takes the write side. Once closed, throws ShardrecException EINVAL (what the C
   * API answers for a destroyed handle).
   */
  final <T> T shared(SharedCall<T> call) {
    owner.calls.readLock().lock();
    try {
      long h = owner.handle; // ordered by the lock: destruction clears it under the write side
      if (h == 0) throw closed();
      return call.apply(h);
    } finally {
      owner.calls.readLock().unlock();
      java.lang.ref.Reference.reachabilityFence(this);
    }
  }

  /** Releases the native object; calling it again does nothing. */
  @Override
  public final void close() {
    synchronized (owner) {
      owner.closedExplicitly = true;
    }
    cleanable.clean();
  }

  /** The destruction state, shared with the Cleaner; it holds no reference to the wrapper. */
  private static final class Owner implements Runnable {
    private final LongConsumer destroy;
    /** Calls made through shared() hold the read side; destruction takes the write side. */
    private final java.util.concurrent.locks.ReentrantReadWriteLock calls =
        new java.util.concurrent.locks.ReentrantReadWriteLock();
    private long handle;
    private String label;
    private boolean closedExplicitly;
    private int concurrentUses;

    Owner(long handle, LongConsumer destroy, String label) {
      this.handle = handle;
      this.destroy = destroy;
      this.label = label;
    }

    @Override
    public void run() {
      // Waits for the calls running through shared() (none when the Cleaner runs it: a call
      // keeps its wrapper reachable).
      calls.writeLock().lock();
      try {
        release();
      } finally {
        calls.writeLock().unlock();
      }
    }

    private void release() {
      long h;
      boolean leaked;
      String what;
      synchronized (this) {
        h = handle;
        handle = 0;
        leaked = !closedExplicitly;
        what = label;
        // Concurrent users (abort) read the pointer before it was cleared; let them finish.
        boolean interrupted = false;
        while (concurrentUses > 0) {
          try {
            wait();
          } catch (InterruptedException e) {
            interrupted = true;
          }
        }
        if (interrupted)
          Thread.currentThread().interrupt();
      }
      if (h == 0)
        return;
      if (leaked) {
        LEAKS_RELEASED.incrementAndGet();
        LOG.log(Level.WARNING,
            "libshardrec: {0} was not closed; the garbage collector released it (call "
                + "close(), or use try-with-resources)",
            what);
      }
      destroy.accept(h);
    }
  }
}
