// Base of every owning wrapper: one native pointer whose single owner of destruction is a
// Cleaner action, so that close() and a leaked handle's collection free it exactly once.
package org.shardrec;

import java.lang.ref.Cleaner;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.LongConsumer;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * An owned libshardrec handle. Not thread-safe unless the subclass says otherwise, with one
 * exception: {@link #close()} may be called from any thread at any time.
 *
 * <p><b>Calls and close.</b> Every method reaches the native object through {@link #use}, which
 * holds the read side of a ReentrantReadWriteLock for the native call; destruction takes the write
 * side. So close() on another thread waits for the calls in flight to return, and a call made after
 * close throws ShardrecException EINVAL "&lt;Class&gt; is closed" instead of reaching freed memory.
 * A collective blocked on a peer returns at the communicator's timeout or when {@link Comm#abort()}
 * (which does not wait for that lock) tears it down: to close promptly, abort first. Readers never
 * wait for each other, and a thread that already holds the read side may take it again (a method
 * calling another on the same object), even while a close waits. A call that also passes other
 * handles holds theirs too, always in one order of classes (Mesh, EmbeddingCollection, Plan,
 * Comm; DenseOptimizer, its layers, Bucketer), so closes on several threads cannot each wait for
 * a call that waits for another of them.
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
   * What a closed handle throws: EINVAL naming the class (the code the C API gives a destroyed
   * handle, with a message a Java caller can place: not the C parameter's "must not be NULL").
   */
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

  /** A native call on the raw pointer (see {@link #use}); most return the C status, unused. */
  @FunctionalInterface
  interface HandleCall<T> {
    T apply(long handle);
  }

  /**
   * Runs {@code call} on the pointer while close() waits for it: the one way every method reaches
   * the native object. Holds the read side of the handle's ReentrantReadWriteLock during the call
   * (any number of threads at once, where the class allows concurrent calls; again on a thread
   * that holds it already) and fences the wrapper after it. Once closed, throws ShardrecException
   * EINVAL "&lt;Class&gt; is closed" without calling.
   */
  final <T> T use(HandleCall<T> call) {
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

  /** {@link #use} of {@code arg}, a required argument: null throws ShardrecException. */
  static <T> T use(NativeHandle arg, String name, HandleCall<T> call) {
    if (arg == null) throw ShardrecException.invalid(name + " must not be null");
    return arg.use(call);
  }

  /** {@link #use} of {@code arg}, an optional argument: null calls with 0 (the C NULL). */
  static <T> T useOrNull(NativeHandle arg, HandleCall<T> call) {
    return arg == null ? call.apply(0) : arg.use(call);
  }

  /**
   * Runs {@code body} while each of {@code handles} (none null) is held as by {@link #use}, in
   * order: for a native call that receives them through a list built inside {@code body}.
   */
  static <T> T useAll(NativeHandle[] handles, java.util.function.Supplier<T> body) {
    return useAll(handles, 0, body);
  }

  private static <T> T useAll(NativeHandle[] handles, int from,
                              java.util.function.Supplier<T> body) {
    if (from == handles.length) return body.get();
    return handles[from].use(h -> useAll(handles, from + 1, body));
  }

  /**
   * Releases the native object; calling it again does nothing. Any thread may call it, also while
   * other threads are inside calls on this object: it waits for those calls to return (a
   * collective blocked on a peer returns at its timeout, or at once after {@link Comm#abort()}),
   * and the calls made after it throw ShardrecException EINVAL "&lt;Class&gt; is closed". Called
   * from inside a call on this object (a callback it runs), it throws EUSAGE instead of waiting
   * for itself.
   */
  @Override
  public final void close() {
    if (owner.calls.getReadHoldCount() > 0) {
      throw new ShardrecException(ShardrecException.EUSAGE, getClass().getSimpleName()
          + ".close() called inside a call on it (a callback?), which it would wait for");
    }
    synchronized (owner) {
      owner.closedExplicitly = true;
    }
    cleanable.clean();
    // A Cleanable runs once: a second close() racing the first returns from clean() at once, so
    // it waits here for the first one's destruction (which holds the write side throughout).
    owner.calls.writeLock().lock();
    owner.calls.writeLock().unlock();
  }

  /** The destruction state, shared with the Cleaner; it holds no reference to the wrapper. */
  private static final class Owner implements Runnable {
    private final LongConsumer destroy;
    /** Calls made through use() hold the read side; destruction takes the write side. */
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
      // Waits for the calls running through use() (none when the Cleaner runs it: a call keeps
      // its wrapper reachable).
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
