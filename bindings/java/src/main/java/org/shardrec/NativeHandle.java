// Base of every owning wrapper: one native pointer, an idempotent close, and use after close
// reaching the C API as NULL so that it fails there with libshardrec's own message.
package org.shardrec;

/** An owned libshardrec handle. Not thread-safe unless the subclass says otherwise. */
abstract class NativeHandle implements AutoCloseable {
  private long handle;

  NativeHandle(long handle) {
    this.handle = handle;
  }

  /** The raw pointer, 0 once closed (the C call then rejects it with SHARDREC_EINVAL). */
  final synchronized long handle() {
    return handle;
  }

  /** Whether close() was called. */
  public final synchronized boolean isClosed() {
    return handle == 0;
  }

  abstract void destroy(long handle);

  /** Releases the native object; calling it again does nothing. */
  @Override
  public final void close() {
    long h;
    synchronized (this) {
      h = handle;
      handle = 0;
    }
    if (h != 0) destroy(h);
  }
}
