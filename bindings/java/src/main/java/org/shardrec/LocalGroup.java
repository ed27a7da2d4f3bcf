// An in-process group of communicators (ranks as threads) that closes them all: what
// Comm.localGroup returns, for try-with-resources.
package org.shardrec;

import java.util.AbstractList;
import java.util.Arrays;
import java.util.List;

/**
 * The n communicators of one in-process group ({@link Comm#localGroup}); element i is rank i
 * (drive each from its own thread). {@link #close()} closes every communicator that is not
 * closed yet, so the group fits a try-with-resources statement:
 *
 * <pre>{@code
 * try (LocalGroup group = Comm.localGroup(2)) {
 *   Comm rank0 = group.get(0), rank1 = group.get(1);
 *   ...
 * }
 * }</pre>
 *
 * A communicator taken out of the group may also be closed alone (close is idempotent). The list
 * view ({@link #comms()}) is read-only. Thread-safety: as {@link Comm#close()}, which waits for a
 * call running on another thread.
 */
public final class LocalGroup implements AutoCloseable {
  private final Comm[] comms;

  LocalGroup(Comm[] comms) {
    this.comms = comms;
  }

  /** Number of ranks. */
  public int size() {
    return comms.length;
  }

  /** Rank {@code rank}'s communicator; ShardrecException EINVAL outside [0, size()). */
  public Comm get(int rank) {
    if (rank < 0 || rank >= comms.length) {
      throw ShardrecException.invalid("rank " + rank + " of a local group of " + comms.length);
    }
    return comms[rank];
  }

  /** Every communicator, rank order, as a read-only list. */
  public List<Comm> comms() {
    return new AbstractList<Comm>() {
      @Override
      public Comm get(int i) {
        return comms[i];
      }

      @Override
      public int size() {
        return comms.length;
      }
    };
  }

  /** A copy of the communicators as an array (what {@link Comm#createLocalGroup} returned). */
  public Comm[] toArray() {
    return Arrays.copyOf(comms, comms.length);
  }

  /**
   * Closes every communicator, last rank first (each as {@link Comm#close()}); idempotent. An
   * exception from one close is thrown after the others were closed, later ones suppressed.
   */
  @Override
  public void close() {
    RuntimeException first = null;
    for (int i = comms.length - 1; i >= 0; --i) {
      try {
        comms[i].close();
      } catch (RuntimeException e) {
        if (first == null) {
          first = e;
        } else {
          first.addSuppressed(e);
        }
      }
    }
    if (first != null) throw first;
  }
}
