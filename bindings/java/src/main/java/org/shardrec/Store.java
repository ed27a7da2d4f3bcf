// A key-value store the ranks of a group rendezvous through (shardrec_store_callbacks_t).
package org.shardrec;

/**
 * A key-value store the ranks of a group rendezvous through, instead of a unique id: bring
 * your own (etcd, Redis, a launcher's store) and pass it to {@link Comm#create(Store, int,
 * int, Comm.Options)}. Called from the thread that creates a communicator and from library
 * threads (attached to the JVM for the call), so implementations must be thread-safe. A thrown
 * {@link ShardrecException} reports its code to the library; any other exception reports
 * SHARDREC_ERROR. The library keeps the store for the rest of the process (communicators and
 * their splits may use it).
 */
public interface Store {
  /** Stores {@code value} under {@code key}, overwriting. */
  void set(String key, byte[] value);

  /**
   * Waits up to {@code timeoutMs} for {@code key} and returns its value; null on timeout. A null
   * returned well before {@code timeoutMs} (a store that does not wait, or an interrupted thread)
   * is not taken for a timeout: the call fails (SHARDREC_EREMOTE, "returned code" ENOTFOUND, or
   * ERROR when the thread is interrupted), and the exception of the create names the key and the
   * time the get waited.
   */
  byte[] get(String key, long timeoutMs);
}
